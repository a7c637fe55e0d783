/**
 * An idempotency record as a file: what it holds, written whole by an
 * atomic rename and read with its mtime from one open file (the store's
 * heartbeat is that mtime).
 */
import { open } from 'node:fs/promises'
import { replaceFile } from '../replace-file.ts'

export const errnoOf = (error: unknown): string | undefined => (error as NodeJS.ErrnoException).code

/** What a request answered, as the client got it. */
export interface StoredAnswer {
  status: number
  headers: Record<string, string>
  body: string
  /** A digest of the first caller's allowed tools (records made before it was kept have none). */
  scope?: string
  /** The tools the request called, as the registry named them then (a name it did not know, as sent). */
  tools?: string[]
}

export interface RecordBase {
  /** The method, path and body of the request that claimed the key (a digest). */
  fingerprint: string
  /** Names this claim; a replacement of a stale record claims a marker named after it. */
  generation: string
  createdAt: number
  expiresAt: number
}

export type KeyRecord = (RecordBase & { state: 'running' }) | (RecordBase & { state: 'done', answer: StoredAnswer })

/** A record holds a whole answer: for the service's user alone (its directory is private too). */
export const RECORD_MODE = 0o600

/** Writes `record` whole in place of `file`; answers its size. */
export async function writeAtomically (file: string, record: KeyRecord): Promise<number> {
  const text = JSON.stringify(record)
  await replaceFile(file, text, RECORD_MODE)
  return Buffer.byteLength(text)
}

/** A record as read: `record` is null when the file holds no valid record (a claim half-written, or damaged). */
export interface FoundRecord {
  record: KeyRecord | null
  mtimeMs: number
}

/** The generation a replacement of `found` claims its marker for. */
export const generationOf = (found: FoundRecord): string => found.record?.generation ?? `unreadable-${found.mtimeMs}`

export async function readRecord (file: string): Promise<FoundRecord | 'absent'> {
  let handle
  try {
    handle = await open(file, 'r')
  } catch (error) {
    if (errnoOf(error) === 'ENOENT') return 'absent'
    throw error
  }
  try {
    // One open file for both: the content and the mtime are of the same record even if a rename replaces it meanwhile.
    const [text, { mtimeMs }] = await Promise.all([handle.readFile('utf8'), handle.stat()])
    return { record: parseRecord(text), mtimeMs }
  } finally {
    await handle.close()
  }
}

function parseRecord (text: string): KeyRecord | null {
  try {
    const record = JSON.parse(text) as KeyRecord
    const valid = typeof record.fingerprint === 'string' && typeof record.generation === 'string' && Number.isFinite(record.expiresAt) &&
      (record.state === 'running' || (record.state === 'done' && typeof record.answer?.body === 'string'))
    return valid ? record : null
  } catch {
    return null
  }
}
