/**
 * Filesystem helpers shared by the file and memory tools: contained opening
 * (no symlink swapped in after the check), atomic writes (never a
 * half-written file), bounded reads, and errno → ToolError.
 */
import { randomUUID } from 'node:crypto'
import type { Stats } from 'node:fs'
import { type FileHandle, lstat, open, rename, rm, writeFile } from 'node:fs/promises'
import { ToolError } from '../errors.ts'
import path from 'node:path'
import { closeQuietly, openContainedDirectory, openNoFollow, READ_FLAGS, splitInWorkspace } from '../core/contained-fs.ts'
import { checkPathSyntax, resolveInWorkspace } from '../core/paths.ts'
import type { WorkspaceQuota } from '../core/quotas.ts'

/**
 * A caller's path as messages show it: as is when it reads unambiguously
 * (so the seed's `file not found: a.txt` holds), quoted when it is empty or
 * has edge spaces, quotes or control characters (`"" is a directory`).
 */
export function quoted (userPath: string): string {
  return /^[^\s"\p{Cc}](?:[^"\p{Cc}]*[^\s"\p{Cc}])?$/u.test(userPath) ? userPath : JSON.stringify(userPath)
}

/** Maps a Node filesystem error to the contract's codes; other errors pass through. */
export function fsError (error: unknown, userPath: string): unknown {
  const shown = quoted(userPath)
  const code = (error as NodeJS.ErrnoException)?.code
  switch (code) {
    case 'ENOENT': return new ToolError('FileNotFound', `${shown} does not exist`)
    case 'EISDIR': return new ToolError('InvalidArgs', `${shown} is a directory`)
    case 'ENOTDIR': return new ToolError('FileNotFound', `${shown}: a parent is not a directory`)
    case 'EACCES': case 'EPERM': return new ToolError('PermissionDenied', `${shown}: permission denied`)
    case 'ELOOP': return new ToolError('InvalidPath', `${shown} is a symbolic link`)
    case 'ENAMETOOLONG': return new ToolError('InvalidPath', `${shown} is too long`)
    case 'ENOSPC': case 'EDQUOT': return new ToolError('ExecutionFailed', 'no space left for the workspace')
    default: return error
  }
}

/** Resolves a path that must exist: FileNotFound otherwise. */
export async function existingPath (workspaceDir: string, userPath: string): Promise<string> {
  const resolved = await resolveInWorkspace(workspaceDir, userPath)
  if (!resolved.exists) throw new ToolError('FileNotFound', `${quoted(userPath)} does not exist`)
  return resolved.absolute
}

/**
 * Opens an existing file of the workspace for reading, race-free. A name
 * right in the workspace that is not a symlink costs one open (see
 * openNoFollow); any other path (deeper, through a symlink, missing, an
 * escape attempt) takes the full resolution and walk, with their errors.
 * The file's type is not checked yet: `checkedStat` does that.
 */
export async function openForReading (workspaceDir: string, userPath: string): Promise<FileHandle> {
  checkPathSyntax(userPath)
  const direct = await openNoFollow(workspaceDir, path.resolve(workspaceDir, userPath))
  if (direct) return direct
  return openUnchecked(workspaceDir, await existingPath(workspaceDir, userPath), userPath)
}

/** Opens a resolved (canonical) path by descriptor, without a symlink at any step. */
async function openUnchecked (workspaceDir: string, absolute: string, userPath: string): Promise<FileHandle> {
  const direct = await openNoFollow(workspaceDir, absolute)
  if (direct) return direct
  const { relativeDir, name } = splitInWorkspace(workspaceDir, absolute)
  try {
    const dir = await openContainedDirectory(workspaceDir, relativeDir, userPath)
    try {
      return await open(dir.at(name), READ_FLAGS)
    } finally {
      await dir.close()
    }
  } catch (error) {
    throw fsError(error, userPath)
  }
}

/** Only a regular file with no other names may be read: its other hard links may lie outside the workspace. */
function checkReadable (stat: Stats, userPath: string): Stats {
  if (stat.isDirectory()) throw new ToolError('InvalidArgs', `${quoted(userPath)} is a directory`)
  if (!stat.isFile()) throw new ToolError('InvalidArgs', `${quoted(userPath)} is not a regular file`)
  if (stat.nlink > 1) throw new ToolError('InvalidPath', `${quoted(userPath)} has other hard links, which may lie outside the workspace`)
  return stat
}

/** The open file's stat, when it is a file that may be read (closes it and throws otherwise). */
export async function checkedStat (handle: FileHandle, userPath: string): Promise<Stats> {
  try {
    return checkReadable(await handle.stat(), userPath)
  } catch (error) {
    closeQuietly(handle)
    throw fsError(error, userPath)
  }
}

/**
 * Opens a resolved file for reading, race-free: by its path when nothing on
 * the way is a symlink, else its directory is walked by descriptor; either
 * way the file is opened with O_NOFOLLOW, so a symlink swapped in after the
 * check cannot lead outside. A file with other hard links is refused.
 */
export async function openContained (workspaceDir: string, absolute: string, userPath: string): Promise<{ handle: FileHandle, stat: Stats }> {
  const handle = await openUnchecked(workspaceDir, absolute, userPath)
  return { handle, stat: await checkedStat(handle, userPath) }
}

/**
 * Reads at most `maxBytes` from the start of an open file. With its `size`
 * known, it stops there instead of reading once more to find the end.
 */
export async function readPrefix (handle: FileHandle, maxBytes: number, size?: number, buffer = Buffer.allocUnsafe(maxBytes), alreadyRead = 0): Promise<Buffer> {
  const goal = size === undefined ? maxBytes : Math.min(maxBytes, size)
  let filled = alreadyRead
  while (filled < goal) {
    const { bytesRead } = await handle.read(buffer, filled, maxBytes - filled, filled)
    if (bytesRead === 0) break
    filled += bytesRead
  }
  return buffer.subarray(0, filled)
}

/**
 * Writes a file atomically and race-free: a temporary file in the (walked,
 * descriptor-held) directory, then a rename within it. A failure leaves the
 * old content; readers never see half a file; an existing symlink at the
 * target is replaced, never followed. With `createParents`, missing
 * directories are made on the way.
 */
export async function writeContained (workspaceDir: string, absolute: string, userPath: string, content: string | Buffer, options: { createParents?: boolean, quota?: WorkspaceQuota } = {}): Promise<void> {
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
  return serialised(`${workspaceDir}\u0000quota`, task)
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

/** Runs `task` after every earlier task queued on the same key (an in-process mutex per file). */
const queues = new Map<string, Promise<unknown>>()
export async function serialised<T> (key: string, task: () => Promise<T>): Promise<T> {
  const previous = queues.get(key) ?? Promise.resolve()
  const run = previous.then(task, task)
  const tail = run.catch(() => {})
  queues.set(key, tail)
  try {
    return await run
  } finally {
    if (queues.get(key) === tail) queues.delete(key)
  }
}
