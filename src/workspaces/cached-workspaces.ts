/**
 * The store's cache of persistent workspaces, by tenant and id. The metadata
 * on disk is the truth (meta.ts); an entry adds what only this instance
 * knows: the calls holding the workspace, when its metadata was last read
 * and last written, and whether its creation has finished.
 */
import type { WorkspaceLayout, WorkspaceMeta } from './meta.ts'
import type { WorkspaceRecord } from './record.ts'

export interface CachedWorkspace extends WorkspaceRecord {
  /** Calls holding the workspace: it is not removed while any does. */
  users: number
  savedExpiresAt: number
  checkedAt: number
  /** Settles when the directory and its metadata exist: calls that arrive meanwhile wait for it. */
  ready: Promise<void>
  /** `ready` has resolved: a call need not wait for it (a promise turn per call is not free). */
  made: boolean
}

const keyOf = (tenant: string, id: string): string => `${tenant}\u0000${id}`

export class CachedWorkspaces {
  readonly #entries = new Map<string, CachedWorkspace>()
  /** The creations under way here, in the order they began (creation.ts counts them against the quota). */
  readonly creating: CachedWorkspace[] = []

  get (tenant: string, id: string): CachedWorkspace | undefined {
    return this.#entries.get(keyOf(tenant, id))
  }

  has (tenant: string, id: string): boolean {
    return this.#entries.has(keyOf(tenant, id))
  }

  /** Whether `entry` is still the cached one for its id (not deleted or replaced meanwhile). */
  holds (entry: CachedWorkspace): boolean {
    return this.get(entry.tenant, entry.id) === entry
  }

  add (entry: CachedWorkspace): void {
    this.#entries.set(keyOf(entry.tenant, entry.id), entry)
  }

  delete (tenant: string, id: string): void {
    this.#entries.delete(keyOf(tenant, id))
  }

  /** Forgets `entry`, unless another entry has replaced it meanwhile. */
  forget (entry: CachedWorkspace): void {
    if (this.holds(entry)) this.delete(entry.tenant, entry.id)
  }

  /** A snapshot of the entries (safe to iterate while they change). */
  all (): CachedWorkspace[] {
    return [...this.#entries.values()]
  }

  /** How many persistent workspaces `tenant` holds, as far as this instance knows. */
  countOf (tenant: string): number {
    let count = 0
    for (const entry of this.#entries.values()) if (entry.tenant === tenant) count++
    return count
  }

  /** Caches a workspace known only from disk (made by another instance, or before a restart). */
  adopt (meta: WorkspaceMeta, layout: WorkspaceLayout): CachedWorkspace {
    const entry: CachedWorkspace = { ...meta, dir: layout.workspaceDir(meta.tenant, meta.id), users: 0, savedExpiresAt: meta.expiresAt, checkedAt: Date.now(), ready: Promise.resolve(), made: true }
    this.add(entry)
    return entry
  }

  /** Caches every workspace on disk that is not cached yet (reading only their metadata). */
  async adoptAll (layout: WorkspaceLayout): Promise<void> {
    const known = new Set<string>()
    for (const entry of this.#entries.values()) known.add(entry.dir)
    for (const meta of await layout.all((dir) => known.has(dir))) {
      if (!this.has(meta.tenant, meta.id)) this.adopt(meta, layout)
    }
  }
}

/** The metadata of a cached workspace, as it goes to disk. */
export function metaOf ({ tenant, id, createdAt, expiresAt, ttlSeconds, incarnation, recovered }: CachedWorkspace): WorkspaceMeta {
  return { tenant, id, createdAt, expiresAt, ttlSeconds, incarnation, recovered }
}
