/**
 * Metadata files a crash left empty or cut short (they are written without
 * fsync): once such a file has stayed the same for a while, by this
 * instance's own clock (a network volume's file times come from its
 * server's), its record is written again, so that the workspace can be used,
 * deleted and expire rather than be lost for good. A file that changes
 * meanwhile may be a record being written in place (a volume without hard
 * links), and is left to its writer.
 *
 * The record written again is marked `recovered`: its creation time and
 * incarnation are made up (from the file's time), so an instance that
 * knows the workspace's own takes it for the same workspace (meta.ts
 * `sameWorkspace`) and, renewing it, writes its own back.
 */
import { randomUUID } from 'node:crypto'
import type { Stats } from 'node:fs'
import { rename, rm, stat, writeFile } from 'node:fs/promises'
import type { WorkspaceMeta } from './meta.ts'
import { absentOrThrow } from './read-if-present.ts'

/** How long a file that holds no record must stay unchanged before it is taken for a crash's leftover. */
export const CRASH_LEFT_AFTER_MS = 10_000

/** A file as far as a change to it shows: its inode, size and time. */
const identityOf = (info: Stats): string => `${info.ino}:${info.size}:${info.mtimeMs}`

export class CrashLeftRecords {
  readonly #afterMs: number
  readonly #ttlSeconds: number
  /** Files seen holding no record: what each was, and when this instance first saw it so. */
  readonly #seen = new Map<string, { identity: string, seenAt: number }>()

  constructor (ttlSeconds: number, afterMs = CRASH_LEFT_AFTER_MS) {
    this.#ttlSeconds = ttlSeconds
    this.#afterMs = afterMs
  }

  /** `file` holds a record (again): nothing to watch. */
  forget (file: string): void {
    this.#seen.delete(file)
  }

  /** The record written again for `file` of `tenant`'s `id`, or null while it may still be a record being written. */
  async recover (file: string, tenant: string, id: string): Promise<WorkspaceMeta | null> {
    const info = await stat(file).catch(absentOrThrow(null))
    if (info === null) return null
    const seen = this.#seen.get(file)
    if (seen?.identity !== identityOf(info)) {
      this.#seen.set(file, { identity: identityOf(info), seenAt: Date.now() })
      return null
    }
    if (Date.now() - seen.seenAt < this.#afterMs) return null
    const createdAt = Math.floor(info.mtimeMs)
    // The same record whichever instance writes it.
    const incarnation = `recovered-${createdAt}`
    const meta: WorkspaceMeta = { tenant, id, createdAt, expiresAt: createdAt + this.#ttlSeconds * 1000, ttlSeconds: this.#ttlSeconds, incarnation, recovered: true }
    const temp = `${file}.${randomUUID()}.tmp`
    try {
      await writeFile(temp, JSON.stringify(meta))
      // Only over the file as it was seen: another instance may have written or removed it since.
      const now = await stat(file).catch(absentOrThrow(null))
      if (now === null || identityOf(now) !== seen.identity) return null
      await rename(temp, file)
    } finally {
      await rm(temp, { force: true })
    }
    this.#seen.delete(file)
    return meta
  }
}
