/**
 * Each workspace's usage (its regular files and their bytes) as a running
 * figure, so that no request walks the workspace to learn it.
 *
 * - The file tools (write, edit, memory append, omega's write and edit)
 *   report their own deltas, under the workspace's quota lock: the figure
 *   stays exact through them.
 * - A call that may change the tree freely (a process, an executable, an
 *   MCP tool) or an archive upload makes the figure stale, and a scan brings
 *   it up to date, off the request path: when the call ends, in the
 *   background, a few at once per instance (usage-scan-slots.ts). The
 *   figure is kept per directory, each directory watched (usage-watch.ts),
 *   so a scan lists again only the directories the call changed; a full
 *   walk is the fallback when the watches cannot tell every change, and the
 *   way to count a workspace the first time and every MAX_FIGURE_AGE_MS.
 * - A scan runs under the quota lock, so no file-tool write lands while it
 *   counts and the figure it leaves is the tree's.
 *
 * The figure is this instance's: writes by another instance sharing the
 * root are seen by the next scan here, which a figure older than
 * MAX_FIGURE_AGE_MS gets when the workspace is next used.
 */
import { withQuotaLock } from '../workspace-fs/write.ts'
import type { TreeSize } from './directory-size.ts'
import { runScan, type ScanPause } from './usage-scan-slots.ts'
import { WatchedTree } from './usage-watch.ts'

/** A figure older than this is scanned again (in the background) when its workspace is next used. */
export const MAX_FIGURE_AGE_MS = 60_000

export class WorkspaceUsage {
  readonly dir: string
  #figure: TreeSize
  /** Bumped whenever the tree may have changed outside the file tools' accounting. */
  #generation: number
  /** The generation the last finished scan started at: the figure holds every change up to it. */
  #scanned: number
  /** When that scan started (or the figure was known), for MAX_FIGURE_AGE_MS. */
  #scannedAt = Date.now()
  /** Calls that may change the tree freely, running now. */
  #changing = 0
  /** The background scan under way or waiting for its turn. */
  #refreshing: Promise<void> | undefined
  /** The figure has been counted (or was known) at least once. */
  #known: boolean
  /** The figure per directory, watched; undefined before the first full scan and while watches cannot be set up. */
  #tree: WatchedTree | undefined
  /** When watches last could not be set up: tried again after MAX_FIGURE_AGE_MS. */
  #unwatchedAt = -Infinity
  /** The next scan lists everything (a figure grown old: another instance may have written). */
  #fullScanDue = false
  #forgotten = false
  /** Scans that listed every directory. */
  #fullScans = 0

  /** `known`: the figure is known already (a workspace just made empty); otherwise the first use scans. */
  constructor (dir: string, known?: TreeSize) {
    this.dir = dir
    this.#figure = known ? { ...known } : { files: 0, bytes: 0 }
    this.#generation = known ? 0 : 1
    this.#scanned = 0
    this.#known = known !== undefined
  }

  /** The running figure, as it is now. */
  get figure (): TreeSize {
    return { ...this.#figure }
  }

  /**
   * Something may have changed the tree since the last scan began (or it
   * was never scanned). A process still running after a scan began does
   * not make the figure stale again until it ends: a write meanwhile is
   * checked against that scan (docs/SECURITY.md, "Tenants and quotas").
   */
  get stale (): boolean {
    return this.#scanned < this.#generation
  }

  /** Calls that may change the tree freely are running now. */
  get changing (): boolean {
    return this.#changing > 0
  }

  /** Scans that listed every directory (the rest listed only what changed). */
  get fullScans (): number {
    return this.#fullScans
  }

  /** Every directory of the workspace is watched: a scan after a change lists only what changed. */
  get watched (): boolean {
    return this.#tree?.watching ?? false
  }

  /**
   * A file tool's write landed in `directory` (relative to the workspace;
   * undefined: somewhere): the workspace gained `files` files and `bytes`
   * bytes (either may be negative). Under the quota lock.
   */
  add (files: number, bytes: number, directory?: string): void {
    this.#figure.files += files
    this.#figure.bytes += bytes
    this.#tree?.add(files, bytes, directory)
  }

  /**
   * A call that may change the tree freely starts. The function answered
   * ends it; with `rescan`, a scan then starts in the background, so the
   * figure is up to date again by the time the next call needs it.
   */
  beginChange (): (options?: { rescan?: boolean }) => void {
    this.#changing++
    this.#generation++
    this.#tree?.changeBegins()
    let ended = false
    return ({ rescan = true } = {}) => {
      if (ended) return
      ended = true
      this.#changing--
      this.#generation++
      if (rescan) this.refreshInBackground()
    }
  }

  /** The tree changed in a way no delta describes (an archive moved in); a scan starts in the background. */
  changed (): void {
    this.#generation++
    this.#tree?.changeBegins()
    this.refreshInBackground()
  }

  refreshInBackground (): void {
    this.refresh().catch(() => {})
  }

  /**
   * Resolves once a scan that started after every change made before this
   * call has finished (at once when nothing changed). Takes the quota lock:
   * never call it holding that lock (use `scanHoldingLock`).
   */
  async refresh (): Promise<void> {
    const wanted = this.#generation
    while (this.#scanned < wanted) {
      this.#refreshing ??= withQuotaLock(this.dir, async () => {
        // A scan made meanwhile by a write holding the lock may have done the work already.
        if (this.#scanned < this.#generation) await this.scanHoldingLock()
      }).finally(() => { this.#refreshing = undefined })
      await this.#refreshing
    }
  }

  /**
   * Scans now, for a caller that holds the workspace's quota lock (a write
   * that needs the truth). The lock is always taken before a scan slot, so
   * a slot's holder never waits for a lock and no two waits can close a circle.
   */
  async scanHoldingLock (): Promise<void> {
    await runScan(this.dir, async (pause) => {
      const startedAt = this.#generation
      const tree = this.#fullScanDue ? undefined : this.#tree
      if (tree && await tree.catchUp(this.changing, pause)) {
        this.#figure = tree.total
      } else {
        this.#scannedAt = Date.now()
        this.#fullScanDue = false
        this.#fullScans++
        this.#figure = await this.#scanAll(pause)
      }
      this.#scanned = Math.max(this.#scanned, startedAt)
      this.#known = true
    })
  }

  /** Lists every directory, watching them unless watches could not be set up lately. */
  async #scanAll (pause: ScanPause): Promise<TreeSize> {
    const tree = this.#tree ?? new WatchedTree(this.dir)
    const mayWatch = !this.#forgotten && Date.now() - this.#unwatchedAt > MAX_FIGURE_AGE_MS
    const figure = await tree.scanAll({ watch: mayWatch, pause })
    if (tree.watching && !this.#forgotten) {
      this.#tree = tree
    } else {
      tree.close()
      this.#tree = undefined
      if (mayWatch && !this.#forgotten) this.#unwatchedAt = Date.now()
    }
    return figure
  }

  /** The workspace is gone: its watches are closed. */
  close (): void {
    this.#forgotten = true
    this.#tree?.close()
    this.#tree = undefined
  }

  /**
   * The figure to show (`GET /v1/workspaces/{id}`). When something changed
   * the tree since the last scan, a small workspace (at most `waitBelowFiles`
   * files at the last count, or never counted) waits for the scan, so it
   * answers exactly; a larger one answers the running figure at once while
   * the scan goes on in the background.
   */
  async current (waitBelowFiles: number): Promise<TreeSize> {
    if (this.stale) {
      const scan = this.refresh()
      if (!this.#known || this.#figure.files <= waitBelowFiles) await scan
      else scan.catch(() => {})
    } else {
      this.refreshIfOld()
    }
    return this.figure
  }

  /** Starts a background scan when the figure is older than MAX_FIGURE_AGE_MS (another instance may have written meanwhile). */
  refreshIfOld (): void {
    if (Date.now() - this.#scannedAt <= MAX_FIGURE_AGE_MS || this.#refreshing) return
    // Not marked stale: nothing here changed the tree, so no write need wait for this scan's result.
    this.#fullScanDue = true
    this.#refreshing = withQuotaLock(this.dir, () => this.scanHoldingLock())
      .catch(() => {})
      .finally(() => { this.#refreshing = undefined })
  }
}

/** The usage of every workspace this instance knows, by canonical directory. */
const usages = new Map<string, WorkspaceUsage>()

/** The usage of the workspace at `dir` (canonical), made (to be scanned on first need) when new. */
export function usageOf (dir: string): WorkspaceUsage {
  let usage = usages.get(dir)
  if (!usage) {
    usage = new WorkspaceUsage(dir)
    usages.set(dir, usage)
  }
  return usage
}

/** A workspace just made empty at `dir`: its figure is known without a scan. */
export function startUsage (dir: string): WorkspaceUsage {
  const usage = new WorkspaceUsage(dir, { files: 0, bytes: 0 })
  usages.get(dir)?.close()
  usages.set(dir, usage)
  return usage
}

/** The workspace at `dir` is gone (deleted, expired, released): a new one there starts afresh. */
export function forgetUsage (dir: string): void {
  usages.get(dir)?.close()
  usages.delete(dir)
}
