/**
 * The service's own records (workspace metadata, process records,
 * idempotency answers, the instances' key) are made and replaced whole:
 * written to a temp file beside the record, then linked or renamed into
 * place, so a reader, on this instance or another sharing the volume, sees
 * no record, the old one or the new, never half of one. A write that fails
 * (a full volume) leaves no temp file behind.
 */
import { randomUUID } from 'node:crypto'
import { link, rename, rm, writeFile } from 'node:fs/promises'

/**
 * Makes `file` unless it exists: false when it does (made here or by another
 * instance). Linked into place, which fails when the name exists; on a volume
 * without hard links (some SMB and FUSE mounts), written in place, exclusively.
 */
export async function createFileOnce (file: string, text: string, mode?: number): Promise<boolean> {
  const options = mode === undefined ? {} : { mode }
  const temp = `${file}.${randomUUID()}.tmp`
  try {
    await writeFile(temp, text, options)
    await link(temp, file)
    return true
  } catch (error) {
    const { code } = error as NodeJS.ErrnoException
    if (code === 'EEXIST') return false
    if (code === 'EPERM' || code === 'ENOTSUP' || code === 'EOPNOTSUPP' || code === 'ENOSYS') return await createInPlace(file, text, options)
    throw error
  } finally {
    await rm(temp, { force: true })
  }
}

async function createInPlace (file: string, text: string, options: { mode?: number }): Promise<boolean> {
  try {
    await writeFile(file, text, { ...options, flag: 'wx' })
    return true
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EEXIST') return false
    throw error
  }
}

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
