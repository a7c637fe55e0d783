/**
 * Finding a persistent workspace: from the cache while it is fresh (and its
 * directory there), else
 * from its metadata on disk (another instance may have made, renewed or
 * removed it); made on first use for a call that names it. A workspace
 * found expired is removed there and then; metadata that has lost its
 * directory is, alone (a removal elsewhere left it, or a renewal written late).
 */
import { ToolError } from '../errors.ts'
import type { CachedWorkspace, CachedWorkspaces } from './cached-workspaces.ts'
import { ClaimedElsewhere, materialise } from './creation.ts'
import { validateWorkspaceId } from './ids.ts'
import { directoryExists, sameWorkspace, type WorkspaceLayout, type WorkspaceMeta } from './meta.ts'

const DEFAULT_RECHECK_MS = 1000
/** Rounds of finding, then making, a workspace that other calls or instances make or remove meanwhile. */
const FIND_OR_CREATE_ATTEMPTS = 5

export interface WorkspaceLookupOptions {
  cache: CachedWorkspaces
  /** The store's layout (it is known only after the store's `init`). */
  layout: () => WorkspaceLayout
  ttlSeconds: number
  /** How many persistent workspaces a tenant may hold (unlimited when absent). */
  maxWorkspacesOf?: (tenant: string) => number
  /** How long a cached workspace is trusted before its metadata is read again. */
  recheckMs?: number
  /** The store's removal of a workspace (a removal already under way, so not in a turn of its own). */
  remove: (workspace: WorkspaceMeta) => Promise<void>
  /** Another instance removed a workspace known here: what runs here in it ends, and what this instance kept of it goes (never its files). */
  removedElsewhere: (entry: CachedWorkspace) => Promise<void>
}

export class WorkspaceLookup {
  readonly #options: WorkspaceLookupOptions

  constructor (options: WorkspaceLookupOptions) {
    this.#options = options
  }

  /**
   * A workspace of `tenant`; NotFound when absent (or another tenant's, or
   * expired). `reread` reads its metadata even when it was read within
   * recheckMs: a process is to run in the workspace there is now, not in
   * one another instance removed and made again meanwhile (same directory).
   */
  async find (tenant: string, id: string, reread = false): Promise<CachedWorkspace> {
    const { cache, layout, recheckMs, removedElsewhere } = this.#options
    validateWorkspaceId(id)
    const cached = cache.get(tenant, id)
    if (cached) {
      // A creation that failed (quota, or claimed by another instance) leaves only what the disk says.
      const made = cached.made || await cached.ready.then(() => true, () => false)
      const fresh = !reread && Date.now() - cached.checkedAt < (recheckMs ?? DEFAULT_RECHECK_MS)
      // Its directory is looked at every time: another instance may have removed the workspace
      // since, and a call would find nowhere to run (findOrCreate makes it afresh).
      if (made && fresh && cached.expiresAt > Date.now() && await directoryExists(cached.dir)) return cached
    }
    const meta = await layout().read(tenant, id)
    if (meta && await directoryExists(layout().workspaceDir(tenant, id))) return this.#found(tenant, id, meta)
    // A record there that cannot be read yet (a crash's leftover, until it is written again) is no removal:
    // the workspace this instance holds stays as it knows it, renewed and kept by what runs in it.
    if (meta === null && cached?.made === true && cache.holds(cached) && await layout().hasMeta(tenant, id) && await directoryExists(cached.dir)) return cached
    // Metadata without its directory (a removal under way or cut short, a renewal written late) is a
    // workspace that is gone: only that metadata goes, never a directory or record made since for a new
    // workspace of the id by another instance.
    if (meta) await layout().removeMetaOf(meta)
    // Removed elsewhere (metadata that cannot be read is not taken for that): what ran here in it ends,
    // and what this instance kept of it (ended processes, usage) goes, or a new workspace of the id would
    // show it; once, should a sweep have come first.
    const removed = cached?.made === true && (meta !== null || !await layout().hasMeta(tenant, id))
    if (cached && cache.holds(cached)) {
      cache.forget(cached)
      if (removed) await removedElsewhere(cached)
    }
    throw new ToolError('NotFound', `no workspace ${JSON.stringify(id)}`)
  }

  /** A workspace of `tenant`, made when it does not exist. */
  async findOrCreate (tenant: string, id: string, reread = false): Promise<CachedWorkspace> {
    const { cache, ttlSeconds } = this.#options
    validateWorkspaceId(id)
    // Bounded: metadata that can be neither read nor made again (an empty file a crash left, until it is written again) must not hold a call for good.
    for (let attempt = 0; attempt < FIND_OR_CREATE_ATTEMPTS; attempt++) {
      try {
        return await this.find(tenant, id, reread)
      } catch (error) {
        if (!(error instanceof ToolError) || error.code !== 'NotFound') throw error
      }
      const cached = cache.get(tenant, id)
      if (cached?.made) {
        // Made meanwhile (here or elsewhere), or adopted by a sweep from metadata read before a removal: the disk says which.
        cached.checkedAt = 0
        continue
      }
      // Joins a creation under way, or makes the workspace.
      const entry = cached ?? this.materialise(tenant, id, ttlSeconds)
      try {
        await entry.ready
        return entry
      } catch (error) {
        // Another instance made it meanwhile: use theirs.
        if (!(error instanceof ClaimedElsewhere)) throw error
      }
    }
    throw new ToolError('ExecutionFailed', `workspace ${JSON.stringify(id)} can be neither found nor made (its metadata is unreadable)`)
  }

  /** Starts making a workspace (its `ready` settles when it is made, or not). */
  materialise (tenant: string, id: string, ttlSeconds: number): CachedWorkspace {
    const limit = this.#options.maxWorkspacesOf?.(tenant) ?? Infinity
    return materialise(this.#options.cache, this.#options.layout(), { tenant, id, ttlSeconds, limit })
  }

  /** The entry of a workspace whose metadata (and directory) exist; NotFound when it has expired. */
  async #found (tenant: string, id: string, meta: WorkspaceMeta): Promise<CachedWorkspace> {
    const { cache, layout, remove, removedElsewhere } = this.#options
    // A cached entry of an older workspace of that id (removed and made again elsewhere) is replaced:
    // its renewal would write the old one's creation and TTL over the new one's. What it held here (a
    // process) ends first, as a sweep would end it, which no longer finds it once it is out of the cache,
    // and what this instance kept of it (ended processes, usage) goes: the new workspace shows none of it.
    const cached = cache.get(tenant, id)
    const older = cached !== undefined && cached.made && !sameWorkspace(cached, meta) ? cached : undefined
    if (older !== undefined) {
      cache.forget(older)
      await removedElsewhere(older)
    }
    const entry = cached !== undefined && sameWorkspace(cached, meta) ? cached : cache.adopt(meta, layout())
    if (entry.recovered === true && meta.recovered !== true) {
      // Known only from a record written again after a crash: the holder's renewal gave back its own identity.
      entry.createdAt = meta.createdAt
      entry.incarnation = meta.incarnation
      delete entry.recovered
    }
    entry.expiresAt = Math.max(entry.expiresAt, meta.expiresAt)
    entry.checkedAt = Date.now()
    if (entry.expiresAt <= Date.now() && entry.users === 0) {
      // Expired is gone, whether or not the sweeper has come by yet.
      cache.forget(entry)
      await remove(entry)
      throw new ToolError('NotFound', `no workspace ${JSON.stringify(id)} (it expired)`)
    }
    return entry
  }
}
