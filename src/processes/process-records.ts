/**
 * Which instance runs each process of a persistent workspace, kept on the
 * shared workspace root so that every instance can find out: one small file
 * per process, `<root>/tenants/<tenant>/processes/<workspace>/<id>.json`
 * (and an empty `running/<id>` beside it while it runs on an instance with
 * an address), written before the process starts and removed when it is
 * forgotten (or with its workspace). A record whose instance no longer knows the process
 * stands for a `lost` one.
 */
import { randomUUID } from 'node:crypto'
import { access, mkdir, rename, rm, rmdir, stat, utimes, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { replaceFile } from '../replace-file.ts'
import { WorkspaceLayout } from '../workspaces/meta.ts'
import { listIfPresent, readTextIfPresent } from '../workspaces/read-if-present.ts'

export interface ProcessRecord {
  id: string
  workspace: string
  command: string
  started_at: string
  /** Set by its instance when it has ended: a running process's workspace has its network on that instance. */
  ended_at: string | null
  /** The `server.advertise_url` of the instance that runs it; null when that instance has none. */
  owner: string | null
  /** That instance's random id for this run of it: an instance restarted at the same address, or anything else there, is not it. */
  instance: string
}

/** The form of the ids the process table gives: anything else names no process (and never a path). */
const PROCESS_ID = /^p_[0-9a-f]{12}$/

/** The subdirectory of markers, one per process running with an address (named by its id). */
const RUNNING = 'running'
/** A home lock unchanged this long was left by an instance that died holding it: it is taken over. */
const HOME_LOCK_STALE_MS = 10_000
const HOME_LOCK_POLL_MS = 20

export function isProcessId (id: string): boolean {
  return PROCESS_ID.test(id)
}

export class ProcessRecords {
  readonly #root: () => string
  #layout: WorkspaceLayout | undefined
  readonly #staleLockMs: number

  /** `root`: the canonical workspace root, known once the store has started; `staleLockMs`: HOME_LOCK_STALE_MS. */
  constructor (root: () => string, options: { staleLockMs?: number } = {}) {
    this.#root = root
    this.#staleLockMs = options.staleLockMs ?? HOME_LOCK_STALE_MS
  }

  /**
   * Writes a record whole (a reader never sees half of one). `update`: only
   * over the record as it is (a removed workspace's are not brought back,
   * also not into a workspace made again under its id).
   */
  async write (tenant: string, record: ProcessRecord, options: { update?: boolean } = {}): Promise<void> {
    const dir = this.#dir(tenant, record.workspace)
    const file = path.join(dir, `${record.id}.json`)
    if (options.update !== true) await mkdir(path.join(dir, RUNNING), { recursive: true })
    else if (!await access(file).then(() => true, () => false)) return
    await replaceFile(file, JSON.stringify(record))
    // Running elsewhere, as far as any other instance should know: a marker it finds without reading every record.
    const marker = path.join(dir, RUNNING, record.id)
    if (record.ended_at === null && record.owner !== null) await writeFile(marker, '')
    else await rm(marker, { force: true })
  }

  /**
   * Holds the workspace's home lock until the answer is called: while one
   * instance looks for where the workspace's processes run and starts one
   * there or here (its record written), no other does. Two first starts
   * through two instances then end on one, in one network. Waits while
   * another holds it. The holder touches it five times in HOME_LOCK_STALE_MS
   * (so a long hold is never taken for a dead one); one that has not changed
   * for that long by this instance's own clock (never compared with
   * another's) was left by an instance that died holding it, and is taken
   * over. Where it cannot be made at all (the
   * volume refuses), the start goes on without it, as one did before.
   */
  async holdHome (tenant: string, workspace: string, signal?: AbortSignal): Promise<() => Promise<void>> {
    this.#layout ??= new WorkspaceLayout(this.#root())
    const lock = this.#layout.homeLock(tenant, workspace)
    await mkdir(path.dirname(lock), { recursive: true }).catch(() => {})
    let seen: { ino: number, mtimeMs: number, since: number } | undefined
    for (;;) {
      signal?.throwIfAborted()
      const made = await mkdir(lock).then(() => true, (error: NodeJS.ErrnoException) => error.code === 'EEXIST' ? false : undefined)
      if (made === undefined) return async () => {}
      if (made) return await heldLock(lock, this.#staleLockMs / 5)
      const found = await stat(lock).catch(() => undefined)
      if (found !== undefined && (seen?.ino !== found.ino || seen.mtimeMs !== found.mtimeMs)) seen = { ino: found.ino, mtimeMs: found.mtimeMs, since: Date.now() }
      if (found !== undefined && seen !== undefined && Date.now() - seen.since > this.#staleLockMs) {
        await takeOver(lock, seen.ino)
        seen = undefined
      } else {
        await sleep(HOME_LOCK_POLL_MS, undefined, { signal }).catch(() => signal?.throwIfAborted())
      }
    }
  }

  /** The records of the workspace's processes that run on some instance that has an address, as their markers say. */
  async running (tenant: string, workspace: string): Promise<ProcessRecord[]> {
    const ids = await listIfPresent(path.join(this.#dir(tenant, workspace), RUNNING))
    const records = await Promise.all(ids.map((id) => this.read(tenant, workspace, id)))
    return records.filter((record): record is ProcessRecord => record !== null && record.ended_at === null)
  }

  /** The record of process `id`, or null when there is none (or `id` is not a process id); a read that failed otherwise is thrown. */
  async read (tenant: string, workspace: string, id: string): Promise<ProcessRecord | null> {
    if (!isProcessId(id)) return null
    return parseRecord(await readTextIfPresent(path.join(this.#dir(tenant, workspace), `${id}.json`)))
  }

  /** Every readable record of the workspace. */
  async list (tenant: string, workspace: string): Promise<ProcessRecord[]> {
    const dir = this.#dir(tenant, workspace)
    const names = await listIfPresent(dir)
    const ids = names.filter((name) => name.endsWith('.json')).map((name) => name.slice(0, -'.json'.length))
    const records = await Promise.all(ids.map((id) => this.read(tenant, workspace, id)))
    return records.filter((record) => record !== null)
  }

  async remove (tenant: string, workspace: string, id: string): Promise<void> {
    if (!isProcessId(id)) return
    await rm(path.join(this.#dir(tenant, workspace), `${id}.json`), { force: true })
    await rm(path.join(this.#dir(tenant, workspace), RUNNING, id), { force: true })
  }

  #dir (tenant: string, workspace: string): string {
    this.#layout ??= new WorkspaceLayout(this.#root())
    return this.#layout.processesDir(tenant, workspace)
  }
}

function parseRecord (text: string | null): ProcessRecord | null {
  if (text === null) return null
  try {
    const record = JSON.parse(text) as ProcessRecord
    const valid = typeof record.id === 'string' && isProcessId(record.id) && typeof record.workspace === 'string' &&
      typeof record.command === 'string' && typeof record.started_at === 'string' &&
      (record.ended_at === null || typeof record.ended_at === 'string') &&
      (record.owner === null || typeof record.owner === 'string') && typeof record.instance === 'string'
    return valid ? record : null
  } catch {
    return null
  }
}

/** The lock just made at `lock`, touched every `touchMs` while it is held; the answer lets it go, if it is still this one. */
async function heldLock (lock: string, touchMs: number): Promise<() => Promise<void>> {
  const ino = (await stat(lock).catch(() => undefined))?.ino
  const touch = setInterval(() => {
    const now = new Date()
    utimes(lock, now, now).catch(() => {})
  }, touchMs).unref()
  return async () => {
    clearInterval(touch)
    // Not one another instance took over meanwhile (this one stalled past HOME_LOCK_STALE_MS).
    if (ino !== undefined && (await stat(lock).catch(() => undefined))?.ino === ino) await rmdir(lock).catch(() => {})
  }
}

/**
 * Removes the stale lock `ino` at `lock`: renamed aside first, so that of
 * several instances taking it over at once one moves it; one that moved a
 * lock made meanwhile (another inode) puts it back.
 */
async function takeOver (lock: string, ino: number): Promise<void> {
  const aside = `${lock}.${randomUUID()}.stale`
  if (!await rename(lock, aside).then(() => true, () => false)) return
  const moved = await stat(aside).catch(() => undefined)
  if (moved?.ino === ino) await rmdir(aside).catch(() => {})
  else await rename(aside, lock).catch(async () => { await rmdir(aside).catch(() => {}) })
}
