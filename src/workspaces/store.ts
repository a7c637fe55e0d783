/**
 * Workspaces: the directories tool calls run in.
 *
 * - Persistent workspaces belong to a tenant, have an id and a TTL (renewed
 *   on every use), and live under `<root>/tenants/<tenant>/ws/<id>`, with
 *   their metadata beside them in `.../meta/<id>.json`, out of the tools'
 *   reach. A background sweeper removes expired ones that no call is using.
 * - Ephemeral workspaces (a call or batch without `workspace`) live under
 *   the ephemeral root (`<root>/ephemeral` unless configured) and are
 *   removed when their lease is released.
 *
 * The metadata on disk is the truth; the map here is a cache of it. So
 * several instances can share one root (a ReadWriteMany volume): a
 * workspace made by one is found by the others, a deletion is noticed
 * within `recheckMs`, and the sweeper looks at the disk before it removes
 * anything another instance may have renewed. Each instance needs its own
 * ephemeral root (it is emptied at start).
 *
 * This file holds creation and deletion; finding one is lookup.ts, the
 * cache is cached-workspaces.ts, making one is creation.ts, leases and the
 * sweep of expired ones are expiry.ts.
 * A deleted workspace goes to the trash at once (trash.ts).
 */
import { randomUUID } from 'node:crypto'
import { constants } from 'node:fs'
import { access, mkdir, realpath } from 'node:fs/promises'
import path from 'node:path'
import type { Logger } from 'pino'
import { ToolError } from '../errors.ts'
import { runExclusively } from '../workspace-fs/keyed-mutex.ts'
import { type CachedWorkspace, CachedWorkspaces } from './cached-workspaces.ts'
import { ClaimedElsewhere } from './creation.ts'
import { EphemeralWorkspaces, type WorkspaceLease } from './ephemeral.ts'
import { WorkspaceExpiry } from './expiry.ts'
import { validateWorkspaceId } from './ids.ts'
import { WorkspaceLookup } from './lookup.ts'
import { WorkspaceLayout, type WorkspaceMeta } from './meta.ts'
import { describeWorkspace, type WorkspaceInfo, type WorkspaceRecord } from './record.ts'
import { WorkspaceTrash } from './trash.ts'
import { forgetUsage, usageOf } from './usage.ts'

export type { WorkspaceLease } from './ephemeral.ts'
export type { WorkspaceInfo, WorkspaceRecord } from './record.ts'

export interface WorkspaceStoreOptions {
  root: string
  /** Where ephemeral workspaces go; private to this instance (emptied at start). */
  ephemeralRoot?: string
  ttlSeconds: number
  sweepIntervalSeconds: number
  log: Logger
  /** How many persistent workspaces a tenant may hold (unlimited when absent). */
  maxWorkspacesOf?: (tenant: string) => number
  /** How long a cached workspace is trusted before its metadata is read again (another instance may have deleted it). */
  recheckMs?: number
  /** How long a metadata file a crash left without its record must stay so before it is written again (crash-left-meta.ts). */
  crashLeftAfterMs?: number
}

/**
 * A staged upload older than this was abandoned (its instance stopped while
 * unpacking): an upload's body must arrive within the request timeout, and
 * it is unpacked as it arrives.
 */
const ABANDONED_UPLOAD_MS = 60 * 60 * 1000

/**
 * `GET /v1/workspaces/{id}` after a process waits for the workspace's scan
 * when it held at most this many files at the last count (a scan of a few
 * milliseconds); a larger one answers its running figure at once.
 */
const INFO_WAITS_FOR_SCAN_BELOW_FILES = 2000

/** Rounds of a deletion whose workspace another instance removes and makes again under it. */
const DELETE_ATTEMPTS = 3

export class WorkspaceStore {
  readonly #options: WorkspaceStoreOptions
  readonly #cache = new CachedWorkspaces()
  #layout = new WorkspaceLayout('')
  readonly #expiry: WorkspaceExpiry
  readonly #lookup: WorkspaceLookup
  readonly #ephemeral: EphemeralWorkspaces
  #trash: WorkspaceTrash | undefined
  #sweeper: NodeJS.Timeout | undefined
  #sweeping: Promise<number> | undefined
  #removalListeners: Array<(dir: string) => Promise<void>> = []

  constructor (options: WorkspaceStoreOptions) {
    this.#options = options
    this.#ephemeral = new EphemeralWorkspaces(options.log)
    this.#lookup = new WorkspaceLookup({
      cache: this.#cache,
      layout: () => this.#layout,
      ttlSeconds: options.ttlSeconds,
      maxWorkspacesOf: options.maxWorkspacesOf,
      recheckMs: options.recheckMs,
      remove: async (workspace) => { await this.#remove(workspace) },
      removedElsewhere: (entry) => this.#removedElsewhere(entry),
    })
    this.#expiry = new WorkspaceExpiry({
      cache: this.#cache,
      layout: () => this.#layout,
      log: options.log,
      remove: async (workspace) => { await this.#remove(workspace) },
      removedElsewhere: (entry) => this.#removedElsewhere(entry),
      asRemoval: (dir, task) => this.withoutRemoval(dir, task),
      // Past the next sweep of every instance, with room to spare: theirs must not find a held workspace expired.
      holdMs: 2 * options.sweepIntervalSeconds * 1000,
    })
  }

  /** Where archive uploads are unpacked first (after `init`): on the workspaces' filesystem, out of the tools' reach. */
  get stagingDir (): string {
    return this.#layout.stagingDir
  }

  /** The canonical root directory (after `init`). */
  get root (): string {
    return this.#layout.root
  }

  /** A directory of the service's own, private to this instance and hidden from every sandbox (ephemeral.ts). */
  serviceDir (name: string): Promise<string> {
    return this.#ephemeral.serviceDir(name)
  }

  /** The canonical ephemeral root (after `init`). */
  get ephemeralRoot (): string {
    return this.#ephemeral.root
  }

  /** Creates the roots, forgets stale ephemeral dirs, empties the trash, starts the sweeper. */
  async init (): Promise<void> {
    await mkdir(this.#options.root, { recursive: true, mode: 0o700 })
    this.#layout = new WorkspaceLayout(await realpath(this.#options.root), this.#options.ttlSeconds, this.#options.crashLeftAfterMs)
    // A root that cannot be written (a read-only mount) would serve reads and answer every write with a 500.
    await access(this.#layout.root, constants.W_OK)
    const notPrivate = await this.#layout.makePrivate()
    if (notPrivate) this.#options.log.warn({ err: notPrivate, dir: this.#layout.tenantsDir }, 'could not make the tenants directory private (0700): other users of the host may reach into workspaces')
    this.#trash = new WorkspaceTrash(this.#layout.trashDir, this.#options.log)
    await this.#ephemeral.init(this.#options.ephemeralRoot ?? path.join(this.#layout.root, 'ephemeral'))
    // The workspaces already on disk are not read now (a start would take longer with each): a lookup
    // finds one from its metadata, and the sweeps adopt the rest, expired ones included.
    // Deletions a crash or restart interrupted; may take long, so not before the service answers.
    void this.#trash.empty()
    // One sweep at a time: a sweep may wait for process starts' turns, and the next must not queue behind it.
    this.#sweeper = setInterval(() => { this.#sweeping ??= this.sweep().finally(() => { this.#sweeping = undefined }) }, this.#options.sweepIntervalSeconds * 1000)
    this.#sweeper.unref()
  }

  /** `listener` runs before a workspace's files go (deleted, expired, an ephemeral one released): its processes end. */
  onRemoval (listener: (dir: string) => Promise<void>): void {
    this.#removalListeners.push(listener)
  }

  async #beforeRemoval (dir: string): Promise<void> {
    for (const listener of this.#removalListeners) await listener(dir)
  }

  /** Stops the sweeper. Persistent workspaces stay on disk for the next start. */
  close (): void {
    clearInterval(this.#sweeper)
  }

  /** Creates a persistent workspace; Conflict when the id exists for this tenant (here or on disk). */
  async create (tenant: string, request: { id?: string, ttlSeconds?: number } = {}): Promise<WorkspaceRecord> {
    const id = request.id ?? randomUUID()
    validateWorkspaceId(id)
    const conflict = () => new ToolError('Conflict', `workspace ${JSON.stringify(id)} already exists`)
    // The disk says whether it exists (made here, by another instance, or before a restart), or has expired
    // (then it goes first, and does not count against the quota).
    if (await this.#lookup.find(tenant, id).then(() => true, (error: unknown) => {
      if (error instanceof ToolError && error.code === 'NotFound') return false
      throw error
    })) throw conflict()
    // A creation of the id begun here while the disk was read is the one: this one is its Conflict.
    const begun = this.#cache.get(tenant, id)
    if (begun !== undefined && await begun.ready.then(() => true, () => false)) throw conflict()
    const entry = this.#lookup.materialise(tenant, id, request.ttlSeconds ?? this.#options.ttlSeconds)
    try {
      await entry.ready
    } catch (error) {
      throw error instanceof ClaimedElsewhere ? conflict() : error
    }
    return entry
  }

  /** The cached record of a workspace; NotFound when this instance does not know it. Prefer `find`. */
  get (tenant: string, id: string): WorkspaceRecord {
    validateWorkspaceId(id)
    const entry = this.#cache.get(tenant, id)
    if (!entry) throw new ToolError('NotFound', `no workspace ${JSON.stringify(id)}`)
    return entry
  }

  /** A workspace of `tenant`, from the cache or from disk; NotFound when absent (or another tenant's). */
  async find (tenant: string, id: string): Promise<WorkspaceRecord> {
    return this.#lookup.find(tenant, id)
  }

  /**
   * A workspace with its usage: the running figure (usage.ts), exact when
   * nothing has changed the tree outside the file tools since the last scan.
   * After a process, a small workspace waits for its scan; a large one
   * answers the figure at once while the scan runs in the background.
   */
  async info (tenant: string, id: string): Promise<WorkspaceInfo> {
    const record = await this.find(tenant, id)
    const { files, bytes } = await usageOf(record.dir).current(INFO_WAITS_FOR_SCAN_BELOW_FILES)
    return { ...describeWorkspace(record), files, bytes }
  }

  async delete (tenant: string, id: string): Promise<void> {
    await this.withoutRemoval(this.dirOf(tenant, id), async () => {
      // The workspace there now (read again: another instance may have removed it and made the id again
      // since it was last read here); one that changes under the removal is looked up again.
      for (let attempt = 0; attempt < DELETE_ATTEMPTS; attempt++) {
        const found = await this.#lookup.find(tenant, id, true)
        this.#cache.delete(tenant, id)
        if (await this.#remove(found)) return
      }
      throw new ToolError('Conflict', `workspace ${JSON.stringify(id)} was removed and made again elsewhere while it was being deleted; delete it again`)
    })
  }

  /**
   * Runs `task` while the workspace at `dir` is not being removed (deleted,
   * expired, removed by another instance, or, an ephemeral one, released),
   * and holds its removal back until `task` is done: a process start and a
   * removal take turns. Not reentrant: nothing a removal runs may take it.
   */
  async withoutRemoval<T> (dir: string, task: () => Promise<T>): Promise<T> {
    return runExclusively(`${dir}\u0000removal`, task)
  }

  /** Another instance removed a workspace known here: what runs here in it ends (its removal listeners) and its usage is forgotten; its files are not touched. */
  async #removedElsewhere (entry: CachedWorkspace): Promise<void> {
    await this.#beforeRemoval(entry.dir)
    forgetUsage(entry.dir)
  }

  /** Moves a workspace to the trash and drops its metadata, then removes its files in the background. */
  async #remove (workspace: WorkspaceMeta): Promise<boolean> {
    const dir = this.#layout.workspaceDir(workspace.tenant, workspace.id)
    // What runs in it ends once the removal knows the workspace there is this one.
    const removed = await this.#layout.remove(workspace, () => this.#beforeRemoval(dir))
    if (!removed) return false
    forgetUsage(dir)
    void this.#trash?.empty()
    return true
  }

  /** The directory a workspace of `tenant` has (or would have), without touching the disk. */
  dirOf (tenant: string, id: string): string {
    validateWorkspaceId(id)
    return this.#layout.workspaceDir(tenant, id)
  }

  /**
   * Holds a persistent workspace for a call (or, `lasting`, a process), creating it on first use (not when
   * `existing`: then one that is gone is NotFound); renews its TTL.
   */
  async acquire (tenant: string, id: string, options: { lasting?: boolean, existing?: boolean } = {}): Promise<WorkspaceLease> {
    const reread = options.lasting === true
    const entry = options.existing === true ? await this.#lookup.find(tenant, id, reread) : await this.#lookup.findOrCreate(tenant, id, reread)
    const lease = this.#expiry.lease(entry, options.lasting === true)
    usageOf(entry.dir).refreshIfOld()
    return lease
  }

  /** A fresh, empty workspace that disappears on release. */
  async ephemeral (): Promise<WorkspaceLease> {
    const lease = await this.#ephemeral.lease()
    if (this.#removalListeners.length === 0) return lease
    return { ...lease, release: () => this.withoutRemoval(lease.dir, async () => { await this.#beforeRemoval(lease.dir); await lease.release() }) }
  }

  /**
   * Removes expired workspaces that no call here holds (expiry.ts), then
   * finishes removals left in the trash and ephemeral workspaces left
   * behind. Runs on a timer; callable from tests.
   */
  async sweep (now = Date.now()): Promise<number> {
    const removed = await this.#expiry.sweep(now)
    // Uploads and removals that a crash or restart cut short, and removals that failed before, are tried again.
    await this.#trash?.collectAbandoned(this.#layout.stagingDir, ABANDONED_UPLOAD_MS, now)
    await this.#trash?.empty()
    await this.#ephemeral.sweep()
    return removed
  }

  /** How many persistent workspaces `tenant` holds, as far as this instance knows. */
  countOf (tenant: string): number {
    return this.#cache.countOf(tenant)
  }
}
