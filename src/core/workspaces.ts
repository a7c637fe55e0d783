/**
 * Workspaces: the directories tool calls run in.
 *
 * - Persistent workspaces belong to a tenant, have an id and a TTL (renewed
 *   on every use), and live under `<root>/tenants/<tenant>/ws/<id>`, with
 *   their metadata beside them in `.../meta/<id>.json`, out of the tools'
 *   reach. A background sweeper removes expired ones that no call is using.
 * - Ephemeral workspaces (a call or batch without `workspace`) live under
 *   `<root>/ephemeral/<uuid>` and are removed when their lease is released.
 */
import { randomUUID } from 'node:crypto'
import { mkdir, readdir, readFile, realpath, rename, rm, writeFile } from 'node:fs/promises'
import path from 'node:path'
import type { Logger } from 'pino'
import { ToolError } from '../errors.ts'
import { directorySize } from './directory-size.ts'
import { directoryNameOf, validateWorkspaceId } from './workspace-ids.ts'

export interface WorkspaceRecord {
  tenant: string
  id: string
  dir: string
  createdAt: number
  expiresAt: number
  ttlSeconds: number
}

export interface WorkspaceInfo {
  id: string
  created_at: string
  expires_at: string
  files: number
  bytes: number
}

/** A workspace held by a running call; `release` once the call is done. */
export interface WorkspaceLease {
  id: string | null
  dir: string
  release: () => Promise<void>
}

export interface WorkspaceStoreOptions {
  root: string
  ttlSeconds: number
  sweepIntervalSeconds: number
  log: Logger
  /** How many persistent workspaces a tenant may hold (unlimited when absent). */
  maxWorkspacesOf?: (tenant: string) => number
}

interface Entry extends WorkspaceRecord {
  users: number
  savedExpiresAt: number
  /** Settles when the directory exists: calls that arrive while it is being made wait for it. */
  ready: Promise<void>
}

const keyOf = (tenant: string, id: string): string => `${tenant}\u0000${id}`

export class WorkspaceStore {
  readonly #options: WorkspaceStoreOptions
  readonly #entries = new Map<string, Entry>()
  #root = ''
  #sweeper: NodeJS.Timeout | undefined

  constructor (options: WorkspaceStoreOptions) {
    this.#options = options
  }

  /** The canonical root directory (after `init`). */
  get root (): string {
    return this.#root
  }

  /** Creates the root, forgets stale ephemeral dirs, loads persistent workspaces, starts the sweeper. */
  async init (): Promise<void> {
    await mkdir(this.#options.root, { recursive: true, mode: 0o700 })
    this.#root = await realpath(this.#options.root)
    await rm(this.#ephemeralRoot(), { recursive: true, force: true })
    await mkdir(this.#ephemeralRoot(), { recursive: true })
    await this.#loadIndex()
    this.#sweeper = setInterval(() => { void this.sweep() }, this.#options.sweepIntervalSeconds * 1000)
    this.#sweeper.unref()
  }

  /** Stops the sweeper. Persistent workspaces stay on disk for the next start. */
  close (): void {
    clearInterval(this.#sweeper)
  }

  /** Creates a persistent workspace; Conflict when the id exists for this tenant. */
  async create (tenant: string, request: { id?: string, ttlSeconds?: number } = {}): Promise<WorkspaceRecord> {
    const id = request.id ?? randomUUID()
    validateWorkspaceId(id)
    if (this.#entries.has(keyOf(tenant, id))) throw new ToolError('Conflict', `workspace ${JSON.stringify(id)} already exists`)
    const entry = this.#materialise(tenant, id, request.ttlSeconds ?? this.#options.ttlSeconds)
    await entry.ready
    return entry
  }

  /** The record of a workspace; NotFound when absent (or another tenant's). */
  get (tenant: string, id: string): WorkspaceRecord {
    validateWorkspaceId(id)
    const entry = this.#entries.get(keyOf(tenant, id))
    if (!entry) throw new ToolError('NotFound', `no workspace ${JSON.stringify(id)}`)
    return entry
  }

  async info (tenant: string, id: string): Promise<WorkspaceInfo> {
    const record = this.get(tenant, id)
    const { files, bytes } = await directorySize(record.dir)
    return { ...describe(record), files, bytes }
  }

  async delete (tenant: string, id: string): Promise<void> {
    const record = this.get(tenant, id)
    this.#entries.delete(keyOf(tenant, id))
    await Promise.all([
      rm(record.dir, { recursive: true, force: true, maxRetries: 3 }),
      rm(this.#metaFile(tenant, id), { force: true }),
    ])
  }

  /** Holds a persistent workspace for a call, creating it on first use; renews its TTL. */
  async acquire (tenant: string, id: string): Promise<WorkspaceLease> {
    validateWorkspaceId(id)
    const entry = this.#entries.get(keyOf(tenant, id)) ?? this.#materialise(tenant, id, this.#options.ttlSeconds)
    await entry.ready
    entry.users++
    this.#renew(entry)
    let released = false
    return {
      id,
      dir: entry.dir,
      release: async () => {
        if (released) return
        released = true
        entry.users--
        this.#renew(entry)
      },
    }
  }

  /** A fresh, empty workspace that disappears on release. */
  async ephemeral (): Promise<WorkspaceLease> {
    const dir = path.join(this.#ephemeralRoot(), randomUUID())
    await mkdir(dir)
    let released = false
    return {
      id: null,
      dir,
      release: async () => {
        if (released) return
        released = true
        await rm(dir, { recursive: true, force: true, maxRetries: 3 }).catch((error: unknown) => {
          this.#options.log.error({ err: error, dir }, 'could not remove an ephemeral workspace')
        })
      },
    }
  }

  /** Removes expired workspaces that no call holds. Runs on a timer; callable from tests. */
  async sweep (now = Date.now()): Promise<number> {
    let removed = 0
    for (const entry of [...this.#entries.values()]) {
      if (entry.expiresAt > now || entry.users > 0) continue
      await this.delete(entry.tenant, entry.id).catch((error: unknown) => {
        this.#options.log.error({ err: error, workspace: entry.id }, 'could not remove an expired workspace')
      })
      removed++
    }
    if (removed > 0) this.#options.log.info({ removed }, 'expired workspaces removed')
    return removed
  }

  /** How many persistent workspaces `tenant` holds. */
  countOf (tenant: string): number {
    let count = 0
    for (const entry of this.#entries.values()) if (entry.tenant === tenant) count++
    return count
  }

  /**
   * Registers a workspace at once (so that concurrent creations of one id
   * make it once, and count against the quota at once) and makes its
   * directory; `entry.ready` settles when the directory exists.
   */
  #materialise (tenant: string, id: string, ttlSeconds: number): Entry {
    const limit = this.#options.maxWorkspacesOf?.(tenant) ?? Infinity
    if (this.countOf(tenant) >= limit) {
      throw new ToolError('PermissionDenied', `the tenant's quota of ${limit} workspaces is used up; delete one first`)
    }
    const now = Date.now()
    const dir = path.join(this.#tenantDir(tenant), 'ws', directoryNameOf(id))
    const entry: Entry = { tenant, id, dir, createdAt: now, expiresAt: now + ttlSeconds * 1000, ttlSeconds, users: 0, savedExpiresAt: 0, ready: Promise.resolve() }
    this.#entries.set(keyOf(tenant, id), entry)
    entry.ready = (async () => {
      await mkdir(dir, { recursive: true })
      await this.#saveMeta(entry)
    })()
    entry.ready.catch(() => {
      if (this.#entries.get(keyOf(tenant, id)) === entry) this.#entries.delete(keyOf(tenant, id))
    })
    return entry
  }

  #renew (entry: Entry): void {
    entry.expiresAt = Math.max(entry.expiresAt, Date.now() + entry.ttlSeconds * 1000)
    // Persist at most once per tenth of the TTL: a busy workspace should not cost a write per call.
    if (entry.expiresAt - entry.savedExpiresAt > entry.ttlSeconds * 100) {
      void this.#saveMeta(entry).catch((error: unknown) => this.#options.log.warn({ err: error }, 'could not save workspace metadata'))
    }
  }

  async #saveMeta (entry: Entry): Promise<void> {
    const file = this.#metaFile(entry.tenant, entry.id)
    await mkdir(path.dirname(file), { recursive: true })
    const temp = `${file}.${randomUUID()}.tmp`
    const { tenant, id, createdAt, expiresAt, ttlSeconds } = entry
    await writeFile(temp, JSON.stringify({ tenant, id, createdAt, expiresAt, ttlSeconds }))
    await rename(temp, file)
    entry.savedExpiresAt = expiresAt
  }

  async #loadIndex (): Promise<void> {
    const tenantsDir = path.join(this.#root, 'tenants')
    const tenants = await readdir(tenantsDir).catch(() => [] as string[])
    for (const tenantName of tenants) {
      const metaDir = path.join(tenantsDir, tenantName, 'meta')
      for (const file of await readdir(metaDir).catch(() => [] as string[])) {
        if (!file.endsWith('.json')) continue
        try {
          const meta = JSON.parse(await readFile(path.join(metaDir, file), 'utf8')) as WorkspaceRecord
          const dir = path.join(this.#tenantDir(meta.tenant), 'ws', directoryNameOf(meta.id))
          this.#entries.set(keyOf(meta.tenant, meta.id), { ...meta, dir, users: 0, savedExpiresAt: meta.expiresAt, ready: Promise.resolve() })
        } catch (error) {
          this.#options.log.warn({ err: error, file }, 'skipping unreadable workspace metadata')
        }
      }
    }
  }

  #tenantDir (tenant: string): string {
    return path.join(this.#root, 'tenants', directoryNameOf(tenant))
  }

  #metaFile (tenant: string, id: string): string {
    return path.join(this.#tenantDir(tenant), 'meta', `${directoryNameOf(id)}.json`)
  }

  #ephemeralRoot (): string {
    return path.join(this.#root, 'ephemeral')
  }
}

function describe (record: WorkspaceRecord): Omit<WorkspaceInfo, 'files' | 'bytes'> {
  return {
    id: record.id,
    created_at: new Date(record.createdAt).toISOString(),
    expires_at: new Date(record.expiresAt).toISOString(),
  }
}

/** The API shape of a record (creation answer). */
export function describeWorkspace (record: WorkspaceRecord): Omit<WorkspaceInfo, 'files' | 'bytes'> {
  return describe(record)
}
