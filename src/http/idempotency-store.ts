/**
 * The answers of requests sent with an Idempotency-Key, kept under the
 * workspace root so that every instance sharing it (a ReadWriteMany volume)
 * agrees on them:
 *
 *   <root>/idempotency/<tenant>/<sha256 of the key>.json          the record
 *   <root>/idempotency/<tenant>/<...>.json.<generation>.replace   who replaced a stale record
 *
 * A record is claimed with an exclusive create (one instance wins), kept
 * fresh while its request runs (its mtime is touched: the heartbeat), and
 * completed by an atomic rename of the whole answer over it. A record past
 * its expiry, or still "running" with no heartbeat for a while (its instance
 * died), is stale: the next request replaces it, and only one request can,
 * because it first claims the `.replace` marker named after that record's
 * generation with another exclusive create.
 *
 * It stores HTTP answers (status, headers, body) and knows nothing of
 * workspaces: it only borrows their root and their directory naming.
 */
import { createHash, randomUUID } from 'node:crypto'
import { type FileHandle, mkdir, open, readdir, rm, stat, utimes, writeFile } from 'node:fs/promises'
import path from 'node:path'
import type { Logger } from 'pino'
import { directoryNameOf } from '../workspaces/ids.ts'
import { loadOnce } from '../load-once.ts'
import { makePrivateDirectory } from '../workspaces/meta.ts'
import { errnoOf, type FoundRecord, generationOf, type KeyRecord, type RecordBase, RECORD_MODE, readRecord, type StoredAnswer, writeAtomically } from './idempotency-records.ts'
import { RecordBytes } from './idempotency-usage.ts'

/** A claim this instance holds: its request runs, and must `complete` or `release` it. */
export interface Ticket {
  readonly file: string
  readonly record: RecordBase & { state: 'running' }
  /** Bytes set aside for its answer (`reserve`), counted until it is stored or released. */
  reserved: number
  /** Its answer, when writing it failed (a full volume): written again at each heartbeat, the claim held meanwhile. */
  unstored?: StoredAnswer
}

export type ClaimResult =
  | { kind: 'claimed', ticket: Ticket }
  | { kind: 'replay', answer: StoredAnswer }
  | { kind: 'running' }
  | { kind: 'reused' }

export interface IdempotencyStoreOptions {
  /** The workspace root; records go under `<root>/idempotency`. */
  root: string
  ttlSeconds: number
  log: Logger
  /** How often held claims are touched, and unstored answers written again (default HEARTBEAT_MS). */
  heartbeatMs?: number
}

/** A running request's record is touched this often... */
const HEARTBEAT_MS = 10_000
/** ...and a running record untouched this long was left by an instance that died: it may be taken over. */
export const ABANDONED_AFTER_MS = 60_000
/** A `.replace` marker (or a temp file) is kept this long: far beyond the moment between reading a stale record and replacing it. */
const MARKER_KEEP_MS = 10 * 60_000
/** Rounds of read-and-claim before a key whose record keeps changing counts as taken by a running request. */
const CLAIM_ROUNDS = 3

export class IdempotencyStore {
  readonly dir: string
  readonly #ttlMs: number
  readonly #heartbeatMs: number
  readonly #log: Logger
  /** The claims this instance holds, touched on every heartbeat. */
  readonly #held = new Set<Ticket>()
  /** Tenant directories known to exist: a claim then needs no mkdir. */
  readonly #madeDirs = new Set<string>()
  /** The store's directory, made private by the first claim (tried again by the next after a failure). */
  readonly #madePrivate = loadOnce(async () => {
    const notPrivate = await makePrivateDirectory(this.dir)
    if (notPrivate) this.#log.warn({ err: notPrivate, dir: this.dir }, 'could not make the idempotency records\' directory private (0700): other users of the host may read stored answers')
  })

  /** What each tenant's records hold: the bound on what a tenant may make the service keep. */
  readonly #bytes = new RecordBytes()
  #heartbeat: NodeJS.Timeout | undefined
  #sweeper: NodeJS.Timeout | undefined

  constructor (options: IdempotencyStoreOptions) {
    this.dir = path.join(options.root, 'idempotency')
    this.#ttlMs = options.ttlSeconds * 1000
    this.#heartbeatMs = options.heartbeatMs ?? HEARTBEAT_MS
    this.#log = options.log
  }

  /** Starts the heartbeat and the sweep of expired records, a first one at once (which counts what each tenant holds); neither keeps the process alive. */
  start (): void {
    this.#heartbeat = setInterval(() => { void this.#touchHeld() }, this.#heartbeatMs).unref()
    const sweep = (): void => {
      this.sweep().catch((error: unknown) => { this.#log.warn({ err: error }, 'idempotency sweep failed') })
    }
    sweep()
    this.#sweeper = setInterval(sweep, Math.min(this.#ttlMs, MARKER_KEEP_MS)).unref()
  }

  /** The bytes the records of `tenant` hold, as last counted (every sweep), with what this instance stored and set aside since. */
  storedBytes (tenant: string): number {
    return this.#bytes.of(this.#tenantDir(tenant))
  }

  /** Sets `bytes` aside for the answer of a claim, so that the claims running together count against the bound. */
  reserve (ticket: Ticket, bytes: number): void {
    ticket.reserved += bytes
    this.#bytes.reserve(path.dirname(ticket.file), bytes)
  }

  stop (): void {
    clearInterval(this.#heartbeat)
    clearInterval(this.#sweeper)
  }

  /**
   * Claims `key` of `tenant` for a request with `fingerprint`, or says what
   * became of the request that claimed it first: its answer to replay, still
   * running, or another request (reused).
   */
  async claim (tenant: string, key: string, fingerprint: string): Promise<ClaimResult> {
    const tenantDir = this.#tenantDir(tenant)
    const file = path.join(tenantDir, `${createHash('sha256').update(key).digest('hex')}.json`)
    const now = Date.now()
    const record = { state: 'running' as const, fingerprint, generation: randomUUID(), createdAt: now, expiresAt: now + this.#ttlMs }
    for (let round = 0; round < CLAIM_ROUNDS; round++) {
      if (await this.#create(tenantDir, file, record)) return this.#hold({ file, record, reserved: 0 })
      const found = await readRecord(file)
      if (found === 'absent') continue
      if (this.#isStale(found)) {
        if (await this.#replace(file, generationOf(found), record)) return this.#hold({ file, record, reserved: 0 })
        continue
      }
      // Unreadable and recent: a claim being written this very moment.
      if (found.record === null) return { kind: 'running' }
      if (found.record.fingerprint !== fingerprint) return { kind: 'reused' }
      return found.record.state === 'done' ? { kind: 'replay', answer: found.record.answer } : { kind: 'running' }
    }
    // Another request is replacing the record right now: it runs, this one waits its turn.
    return { kind: 'running' }
  }

  /**
   * Stores the answer of a claimed request, for every later request with its
   * key. When it cannot be written, the claim stays held and the answer is
   * written again at each heartbeat until its TTL: a retry meanwhile is told
   * the request still runs, and is never run a second time.
   */
  async complete (ticket: Ticket, answer: StoredAnswer): Promise<void> {
    try {
      const bytes = await writeAtomically(ticket.file, { ...ticket.record, state: 'done', answer })
      this.#held.delete(ticket)
      this.#bytes.stored(path.dirname(ticket.file), bytes)
      this.#unreserve(ticket)
    } catch (error) {
      ticket.unstored = answer
      throw error
    }
  }

  /** Gives a claimed key up (its request did not run): the next request with it runs. */
  async release (ticket: Ticket): Promise<void> {
    this.#held.delete(ticket)
    this.#unreserve(ticket)
    const found = await readRecord(ticket.file)
    // Only our own claim: after a takeover the record is another request's.
    if (found !== 'absent' && found.record?.generation === ticket.record.generation) await rm(ticket.file, { force: true })
  }

  /**
   * Removes expired and abandoned records, and old markers and temp files.
   * Only records untouched for the TTL or the abandonment bound (whichever is
   * shorter) are read, so a sweep is mostly a stat per record; one that
   * expired sooner is removed by a later sweep, and ignored meanwhile.
   */
  async sweep (): Promise<void> {
    const now = Date.now()
    for (const tenant of await readdir(this.dir).catch(() => [] as string[])) {
      const tenantDir = path.join(this.dir, tenant)
      const mark = this.#bytes.mark(tenantDir)
      let kept = 0
      for (const name of await readdir(tenantDir).catch(() => [] as string[])) {
        const file = path.join(tenantDir, name)
        const info = await stat(file).catch(() => null)
        if (!info) continue
        const age = now - info.mtimeMs
        if (!name.endsWith('.json')) {
          if (age > MARKER_KEEP_MS) await rm(file, { force: true })
          continue
        }
        if (age > Math.min(this.#ttlMs, ABANDONED_AFTER_MS)) {
          const found = await readRecord(file)
          // Between this read and the removal another instance could replace the record; the window is a few
          // microseconds, after the old record's own expiry, and costs at most one more run of a new request.
          if (found !== 'absent' && this.#isStale(found)) {
            await rm(file, { force: true })
            continue
          }
        }
        kept += info.size
      }
      this.#bytes.recount(tenantDir, kept, mark)
    }
  }

  /**
   * A finished record past its expiry, or a running (or unreadable) one whose
   * heartbeat stopped: its instance died. A running one never expires while
   * its request runs: a repeat meanwhile is still a Conflict.
   */
  #isStale ({ record, mtimeMs }: FoundRecord): boolean {
    if (record?.state === 'done') return Date.now() > record.expiresAt
    return Date.now() - mtimeMs > ABANDONED_AFTER_MS
  }

  #tenantDir (tenant: string): string {
    return path.join(this.dir, directoryNameOf(tenant))
  }

  #unreserve (ticket: Ticket): void {
    this.#bytes.reserve(path.dirname(ticket.file), -ticket.reserved)
    ticket.reserved = 0
  }

  #hold (ticket: Ticket): ClaimResult {
    this.#held.add(ticket)
    return { kind: 'claimed', ticket }
  }

  /**
   * The records hold whole answers (files read, commands' output): the
   * store's directory is made private as the tenants' workspaces are, under
   * a root an operator made open too; once, by the first claim.
   */
  async #makeTenantDir (tenantDir: string): Promise<void> {
    await this.#madePrivate()
    await mkdir(tenantDir, { recursive: true, mode: 0o700 })
  }

  /** The exclusive create of a claim: false when a record exists. One made but not written (a full volume) goes again. */
  async #create (tenantDir: string, file: string, record: KeyRecord): Promise<boolean> {
    if (!this.#madeDirs.has(tenantDir)) {
      await this.#makeTenantDir(tenantDir)
      this.#madeDirs.add(tenantDir)
    }
    let handle: FileHandle
    try {
      handle = await open(file, 'wx', RECORD_MODE)
    } catch (error) {
      if (errnoOf(error) === 'EEXIST') return false
      if (errnoOf(error) !== 'ENOENT') throw error
      // The directory went (removed by hand): make it again, once.
      this.#madeDirs.delete(tenantDir)
      await this.#makeTenantDir(tenantDir)
      this.#madeDirs.add(tenantDir)
      return this.#create(tenantDir, file, record)
    }
    try {
      await handle.writeFile(JSON.stringify(record))
    } catch (error) {
      // Left empty, it would read as a claim being written, and answer "still running" until abandoned.
      await rm(file, { force: true })
      throw error
    } finally {
      await handle.close()
    }
    return true
  }

  /** Replaces the stale record of `generation` by `record`; false when another request replaces it. */
  async #replace (file: string, generation: string, record: KeyRecord): Promise<boolean> {
    const marker = `${file}.${generation}.replace`
    try {
      await writeFile(marker, '', { flag: 'wx' })
    } catch (error) {
      if (errnoOf(error) === 'EEXIST') return false
      throw error
    }
    try {
      await writeAtomically(file, record)
    } catch (error) {
      // Not replaced (a full volume): the marker goes, so that a later request may replace the record.
      await rm(marker, { force: true })
      throw error
    }
    return true
  }

  async #touchHeld (): Promise<void> {
    const now = new Date()
    for (const ticket of this.#held) {
      if (ticket.unstored !== undefined) {
        // Past its TTL the answer would be gone anyway: the key is given up, and its next request runs.
        if (now.getTime() > ticket.record.expiresAt) {
          await this.release(ticket).catch(() => {})
          continue
        }
        if (await this.complete(ticket, ticket.unstored).then(() => true, () => false)) continue
      }
      await utimes(ticket.file, now, now).catch((error: unknown) => {
        this.#log.warn({ err: error }, 'could not renew an idempotency record')
      })
    }
  }
}
