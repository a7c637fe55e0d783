/**
 * Contained writes: a temporary file in the (walked, descriptor-held)
 * directory, renamed into place, so a failure leaves the old content and
 * readers never see half a file; with a room check, the check and the write
 * it admits run alone among the workspace's writes in this instance.
 */
import { randomUUID } from 'node:crypto'
import { lstat, rename, rm, writeFile } from 'node:fs/promises'
import { fsError } from './errors.ts'
import { runExclusively } from './keyed-mutex.ts'
import { openContainedDirectory, splitInWorkspace } from './open.ts'

/** What a write asks before it grows the workspace (the workspace's byte quota). */
export interface RoomCheck {
  /** Throws PayloadTooLarge when the workspace cannot grow by `bytes` (negative: it shrinks). */
  ensureRoom: (bytes: number) => Promise<void>
}

/**
 * Writes a file atomically and race-free: a temporary file in the (walked,
 * descriptor-held) directory, then a rename within it. A failure leaves the
 * old content; readers never see half a file; an existing symlink at the
 * target is replaced, never followed. With `createParents`, missing
 * directories are made on the way.
 */
export async function writeContained (workspaceDir: string, absolute: string, userPath: string, content: string | Buffer, options: { createParents?: boolean, quota?: RoomCheck | undefined } = {}): Promise<void> {
  const { quota } = options
  if (!quota) return writeInPlace(workspaceDir, absolute, userPath, content, options)
  // The replaced file is measured in the walked directory, never by a path a swap could redirect.
  const ensureRoom = (replacedBytes: number) => quota.ensureRoom(Buffer.byteLength(content) - replacedBytes)
  return withQuotaLock(workspaceDir, () => writeInPlace(workspaceDir, absolute, userPath, content, options, ensureRoom))
}

/**
 * Runs a quota check and the write it admits alone among the workspace's
 * writes in this instance, so two writes cannot both fit the last bytes.
 */
export function withQuotaLock<T> (workspaceDir: string, task: () => Promise<T>): Promise<T> {
  return runExclusively(`${workspaceDir}\u0000quota`, task)
}

async function writeInPlace (workspaceDir: string, absolute: string, userPath: string, content: string | Buffer, options: { createParents?: boolean }, beforeWrite?: (replacedBytes: number) => Promise<void>): Promise<void> {
  const { relativeDir, name } = splitInWorkspace(workspaceDir, absolute)
  const temp = `.${name.slice(0, 100)}.${randomUUID()}.toolport-tmp`
  let dir
  try {
    dir = await openContainedDirectory(workspaceDir, relativeDir, userPath, { create: options.createParents })
  } catch (error) {
    throw fsError(error, userPath)
  }
  try {
    if (beforeWrite) {
      const existing = await lstat(dir.at(name)).catch(() => null)
      await beforeWrite(existing?.isFile() ? existing.size : 0)
    }
    await writeFile(dir.at(temp), content, { flag: 'wx', mode: 0o644 })
    await rename(dir.at(temp), dir.at(name))
  } catch (error) {
    await rm(dir.at(temp), { force: true })
    throw fsError(error, userPath)
  } finally {
    await dir.close()
  }
}
