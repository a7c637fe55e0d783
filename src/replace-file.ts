/**
 * The service's own records (workspace metadata, process records,
 * idempotency answers) are replaced whole: written to a temp file beside
 * the record, then renamed over it, so a reader, on this instance or
 * another sharing the volume, sees the old record or the new, never half of
 * one. A write that fails (a full volume) leaves no temp file behind.
 */
import { randomUUID } from 'node:crypto'
import { rename, rm, writeFile } from 'node:fs/promises'

export async function replaceFile (file: string, text: string, mode?: number): Promise<void> {
  const temp = `${file}.${randomUUID()}.tmp`
  try {
    await writeFile(temp, text, mode === undefined ? {} : { mode })
    await rename(temp, file)
  } catch (error) {
    await rm(temp, { force: true })
    throw error
  }
}
