/**
 * Contained writes: a temporary file in the (walked, descriptor-held)
 * directory, renamed into place, so a failure leaves the old content and
 * readers never see half a file; with a room check, the check and the write
 * it admits run alone among the workspace's writes in this instance, and the
 * write's delta (files, bytes) is handed to the workspace's usage. Every
 * write of a file runs alone among this instance's writes and edits of that
 * file (`withFileLock`), so an edit never writes back over a newer write.
 */
import { randomUUID } from 'node:crypto'
import type { Stats } from 'node:fs'
import { lstat, open, rename, rm } from 'node:fs/promises'
import { ToolError } from '../errors.ts'
import { fsError, shownPath } from './errors.ts'
import { runExclusively } from './keyed-mutex.ts'
import { openContainedDirectory, READ_FLAGS, splitInWorkspace } from './open.ts'
import { refuseDirectoryName, resolveInWorkspace } from './paths.ts'
import { readPrefix } from './read.ts'

/** What a write asks before it grows the workspace (its byte quota), and tells once it landed (its usage). */
export interface RoomCheck {
  /** Throws PayloadTooLarge when the workspace cannot grow by `bytes` (negative: it shrinks). */
  ensureRoom: (bytes: number) => Promise<void>
  /** The write landed in `directory` (relative to the workspace): `files` more regular files, `bytes` more bytes (either may be negative). */
  landed: (files: number, bytes: number, directory?: string) => void
}

/**
 * Runs `task`, which reads or writes the file at `absolute`, alone among
 * this instance's tasks on that file: an edit's read and its write back
 * are one step for every other writer.
 */
export function withFileLock<T> (absolute: string, task: () => Promise<T>): Promise<T> {
  return runExclusively(absolute, task)
}

/**
 * write_file's and omega's write: the caller's path made or replaced with
 * `content` (parents made on the way), under the file's lock. A path that
 * names a directory (the workspace, `dir/`, `dir/.`) is InvalidArgs.
 */
export async function writeWorkspaceFile (workspaceDir: string, userPath: string, content: string, quota: RoomCheck | undefined): Promise<void> {
  const { absolute } = await resolveInWorkspace(workspaceDir, userPath)
  if (absolute === workspaceDir) throw new ToolError('InvalidArgs', `${JSON.stringify(userPath)} names the workspace itself, not a file`)
  refuseDirectoryName(userPath)
  await withFileLock(absolute, () => writeContained(workspaceDir, absolute, userPath, content, { createParents: true, quota }))
}

/**
 * Text to be written as UTF-8. A lone surrogate (half a UTF-16 character,
 * which a JSON string can carry) has no UTF-8 form: written, it would become
 * U+FFFD unseen, so it is refused.
 */
export function ensureWritableText (text: string, userPath: string): void {
  if (!text.isWellFormed()) throw new ToolError('InvalidArgs', `the text to write to ${shownPath(userPath)} holds a lone surrogate (half of a UTF-16 pair), which has no UTF-8 form`)
}

/**
 * The file an edit read was replaced or changed before the edit's text went in (an archive upload, a
 * write by another instance, a command): nothing was written, and the edit is made again on what is there.
 */
export class FileChanged extends ToolError {
  constructor (userPath: string) {
    super('Conflict', `${shownPath(userPath)} kept changing while it was being edited; nothing was written`)
  }
}

interface WriteOptions {
  createParents?: boolean
  quota?: RoomCheck | undefined
  /** The file as an edit read it: the write goes in only over that same file, unchanged (FileChanged). */
  unchangedSince?: ReadVersion
}

/** A file as an edit read it: its stat, its bytes, and when (Date.now()) they were read. */
export interface ReadVersion {
  stats: Stats
  bytes: Buffer
  readAt: number
}

/**
 * How close to its read a file's last change may be for its times not to
 * tell a later change apart (git's "racy" files): file systems stamp times
 * by the tick of a coarse clock (milliseconds on ext4 before Linux 6.13, a
 * second on ext2/ext3, two on FAT), so a rewrite of the same size within the
 * same tick leaves inode, size and times as they were. Such a file's bytes
 * are compared too.
 */
const RACY_MS = 2000

/**
 * Writes a file atomically and race-free (the caller holds its `withFileLock`): a temporary file in the (walked,
 * descriptor-held) directory, then a rename within it. A failure leaves the
 * old content; readers never see half a file; an existing symlink at the
 * target is replaced, never followed. With `createParents`, missing
 * directories are made on the way.
 */
export async function writeContained (workspaceDir: string, absolute: string, userPath: string, content: string | Buffer, options: WriteOptions = {}): Promise<void> {
  if (typeof content === 'string') ensureWritableText(content, userPath)
  const { quota } = options
  if (!quota) return writeInPlace(workspaceDir, absolute, userPath, content, options)
  // The replaced file is measured in the walked directory, never by a path a swap could redirect.
  const size = Buffer.byteLength(content)
  return withQuotaLock(workspaceDir, () => writeInPlace(workspaceDir, absolute, userPath, content, options, {
    before: (replaced) => quota.ensureRoom(size - (replaced?.size ?? 0)),
    // A file replaces a regular file (same count) or a symlink or nothing (one more).
    after: (replaced) => quota.landed(replaced ? 0 : 1, size - (replaced?.size ?? 0), splitInWorkspace(workspaceDir, absolute).relativeDir),
  }))
}

/**
 * Whether the file at `at` is still the one read: a file renamed over it is
 * another inode, a write changes its size or times; and where the times
 * cannot tell (RACY_MS), its bytes are the ones read.
 */
async function unchanged (at: string, read: ReadVersion): Promise<boolean> {
  const now = await lstat(at)
  const before = read.stats
  if (now.ino !== before.ino || now.dev !== before.dev || now.size !== before.size || now.mtimeMs !== before.mtimeMs || now.ctimeMs !== before.ctimeMs) return false
  if (before.mtimeMs < read.readAt - RACY_MS) return true
  const handle = await open(at, READ_FLAGS)
  try {
    return (await readPrefix(handle, read.bytes.length + 1)).equals(read.bytes)
  } finally {
    await handle.close()
  }
}

/** A regular file a write replaces, as measured in the walked directory (null: none, or not a regular file). */
type Replaced = { size: number } | null

interface WriteHooks {
  before: (replaced: Replaced) => Promise<void>
  after: (replaced: Replaced) => void
}

/**
 * Runs a quota check and the write it admits alone among the workspace's
 * writes in this instance, so two writes cannot both fit the last bytes.
 */
export function withQuotaLock<T> (workspaceDir: string, task: () => Promise<T>): Promise<T> {
  return runExclusively(`${workspaceDir}\u0000quota`, task)
}

async function writeInPlace (workspaceDir: string, absolute: string, userPath: string, content: string | Buffer, options: WriteOptions, hooks?: WriteHooks): Promise<void> {
  const { relativeDir, name } = splitInWorkspace(workspaceDir, absolute)
  // Short whatever the name: a name of 255 bytes has no room for more.
  const temp = `.toolport-${randomUUID()}.tmp`
  let dir
  // A write into directories still to be made replaces nothing: its room is asked for before they are made,
  // so that a refused write leaves no directory behind.
  let admitted = false
  try {
    dir = await openContainedDirectory(workspaceDir, relativeDir, userPath).catch(async (error: unknown) => {
      if (!options.createParents || (error as NodeJS.ErrnoException).code !== 'ENOENT') throw error
      await hooks?.before(null)
      admitted = true
      return openContainedDirectory(workspaceDir, relativeDir, userPath, { create: true })
    })
  } catch (error) {
    throw fsError(error, userPath)
  }
  try {
    const existing = await lstat(dir.at(name)).catch(() => null)
    const replaced: Replaced = existing?.isFile() ? { size: existing.size } : null
    if (!admitted) await hooks?.before(replaced)
    const file = await open(dir.at(temp), 'wx', 0o644)
    try {
      await file.writeFile(content)
      // A file written anew keeps its permissions (an executable script stays executable, a private file
      // private); through the descriptor, as nothing swapped in at the temporary name is ever followed.
      if (existing?.isFile()) await file.chmod(existing.mode & 0o777)
    } finally {
      await file.close()
    }
    // Last look: this instance's writes of the file wait for the edit, but an upload, another instance or a command need not.
    // Gone meanwhile: FileNotFound (thrown by lstat), as an edit after the deletion would answer.
    if (options.unchangedSince && !await unchanged(dir.at(name), options.unchangedSince)) throw new FileChanged(userPath)
    await rename(dir.at(temp), dir.at(name))
    hooks?.after(replaced)
  } catch (error) {
    await rm(dir.at(temp), { force: true })
    throw fsError(error, userPath)
  } finally {
    await dir.close()
  }
}
