/**
 * Leases and expiry of persistent workspaces: a call holds its workspace
 * through a lease, which renews the TTL; the sweep removes expired
 * workspaces that no call holds. The disk decides what has expired, so a
 * workspace another instance renewed is kept.
 */
import type { Logger } from 'pino'
import { metaOf, type CachedWorkspace, type CachedWorkspaces } from './cached-workspaces.ts'
import type { WorkspaceLease } from './ephemeral.ts'
import { directoryExists, sameWorkspace, type WorkspaceLayout, type WorkspaceMeta } from './meta.ts'

export interface WorkspaceExpiryOptions {
  cache: CachedWorkspaces
  /** The store's layout (it is known only after the store's `init`). */
  layout: () => WorkspaceLayout
  log: Logger
  /** The store's removal of a workspace (its removal listeners first, then the trash). */
  remove: (workspace: WorkspaceMeta) => Promise<void>
  /** Another instance removed a workspace known here: what runs here in it ends (its removal listeners), and what this instance kept of it goes (never its files). */
  removedElsewhere: (entry: CachedWorkspace) => Promise<void>
  /** Runs a task as a removal of the workspace at `dir` (WorkspaceStore.withoutRemoval): a process start waits, or is waited for. */
  asRemoval: (dir: string, task: () => Promise<void>) => Promise<void>
  /** How far ahead the expiry of a workspace a process holds reaches at least, whatever its TTL: past every instance's next sweep. */
  holdMs: number
}

export class WorkspaceExpiry {
  readonly #options: WorkspaceExpiryOptions

  constructor (options: WorkspaceExpiryOptions) {
    this.#options = options
  }

  /**
   * Holds `entry` for a call until the lease is released; renews its TTL at
   * both ends. A `lasting` hold (a process) reaches past every instance's
   * next sweep from the start, whatever the TTL.
   */
  lease (entry: CachedWorkspace, lasting = false): WorkspaceLease {
    entry.users++
    this.renew(entry, lasting ? this.#options.holdMs : 0)
    let released = false
    return {
      id: entry.id,
      dir: entry.dir,
      release: async () => {
        if (released) return
        released = true
        entry.users--
        this.renew(entry)
      },
    }
  }

  /**
   * Moves the expiry a TTL from now (or `atLeastMs`, when longer: a workspace
   * a process holds must not be found expired by another instance's sweep
   * because its TTL is shorter than the sweep interval), and saves it when it
   * has moved far enough.
   */
  renew (entry: CachedWorkspace, atLeastMs = 0): void {
    const { cache, layout, log } = this.#options
    entry.expiresAt = Math.max(entry.expiresAt, Date.now() + Math.max(entry.ttlSeconds * 1000, atLeastMs))
    // Persist at most once per tenth of the TTL: a busy workspace should not cost a write per call.
    // A workspace deleted meanwhile (here or elsewhere) is not brought back.
    if (entry.expiresAt - entry.savedExpiresAt <= entry.ttlSeconds * 100) return
    if (!cache.holds(entry)) return
    entry.savedExpiresAt = entry.expiresAt
    const meta = metaOf(entry)
    void layout().saveRenewal(meta).then(async (saved) => {
      // Deleted while the write was under way, here or by another instance (which moves the directory
      // away first): the write must not bring it back.
      if (saved && (!cache.holds(entry) || !await directoryExists(entry.dir))) await layout().removeMetaOf(meta)
    }).catch((error: unknown) => log.warn({ err: error }, 'could not save workspace metadata'))
  }

  /**
   * Removes expired workspaces that no call here holds, including those
   * other instances made; one whose metadata another instance renewed is
   * kept. Answers how many went.
   */
  async sweep (now: number): Promise<number> {
    const { cache, layout, log, asRemoval } = this.#options
    await cache.adoptAll(layout())
    let removed = 0
    for (const entry of cache.all()) {
      // Nothing to do for one that is neither held nor expired (without waiting for its turn).
      if (entry.users === 0 && entry.expiresAt > now) continue
      // Decided and done in the workspace's turn: a start that came first may have renewed it meanwhile.
      await asRemoval(entry.dir, async () => {
        if (await this.#sweepOne(entry, now)) removed++
      })
    }
    if (removed > 0) log.info({ removed }, 'expired workspaces removed')
    return removed
  }

  /** Keeps, renews or removes one workspace; true when it was removed. */
  async #sweepOne (entry: CachedWorkspace, now: number): Promise<boolean> {
    const { cache, layout, log, remove } = this.#options
    if (!cache.holds(entry)) return false
    if (entry.users > 0) {
      await this.#keepHeld(entry)
      return false
    }
    if (entry.expiresAt > now) return false
    const meta = await layout().read(entry.tenant, entry.id)
    if (meta === null || !sameWorkspace(meta, entry)) {
      // Removed elsewhere (and maybe made again): nothing of it to remove by its name, which another
      // workspace may have now; what this instance kept of it goes. (Unreadable metadata waits.)
      if (meta === null && await layout().hasMeta(entry.tenant, entry.id)) return false
      if (entry.users === 0) await this.#forgetRemoved(entry)
      return false
    }
    if (meta.expiresAt > now) {
      entry.expiresAt = meta.expiresAt
      return false
    }
    if (!cache.holds(entry) || entry.users > 0) return false
    cache.delete(entry.tenant, entry.id)
    await remove(entry).catch((error: unknown) => {
      log.error({ err: error, workspace: entry.id }, 'could not remove an expired workspace')
    })
    return true
  }

  /**
   * A workspace held here (a process runs in it) may be held for longer
   * than its TTL: its expiry on disk moves on at every sweep, so that the
   * other instances' sweeps keep it too. When another instance removed it
   * meanwhile (its metadata is gone, or is a newer workspace's), what runs
   * here in it ends.
   */
  async #keepHeld (entry: CachedWorkspace): Promise<void> {
    const { layout } = this.#options
    const meta = await layout().read(entry.tenant, entry.id)
    // Its directory gone is a removal too: a renewal of ours written late may have brought the metadata back
    // (one that cannot be looked at, EIO on a network volume, is not taken for gone).
    const gone = meta === null ? !await layout().hasMeta(entry.tenant, entry.id) : !sameWorkspace(meta, entry) || !await directoryExists(entry.dir).catch(() => true)
    if (!gone) {
      this.renew(entry, this.#options.holdMs)
      return
    }
    await this.#forgetRemoved(entry)
  }

  /** A workspace another instance removed: forgotten here, and what ran or was kept here of it goes (once: a lookup may have come first). */
  async #forgetRemoved (entry: CachedWorkspace): Promise<void> {
    const { cache, log, removedElsewhere } = this.#options
    if (!cache.holds(entry)) return
    cache.forget(entry)
    await removedElsewhere(entry).catch((error: unknown) => log.error({ err: error, workspace: entry.id }, 'could not end what ran in a workspace removed elsewhere'))
  }
}
