/**
 * Filesystem helpers shared by the file and memory tools: contained opening
 * (no symlink swapped in after the check), atomic writes (never a
 * half-written file), bounded reads, and errno → ToolError.
 */
import { randomUUID } from 'node:crypto'
import { constants, type Stats } from 'node:fs'
import { type FileHandle, lstat, open, rename, rm, writeFile } from 'node:fs/promises'
import { ToolError } from '../errors.ts'
import { openContainedDirectory, splitInWorkspace } from '../core/contained-fs.ts'
import { resolveInWorkspace } from '../core/paths.ts'
import type { WorkspaceQuota } from '../core/quotas.ts'

/** Maps a Node filesystem error to the contract's codes; other errors pass through. */
export function fsError (error: unknown, userPath: string): unknown {
  const code = (error as NodeJS.ErrnoException)?.code
  switch (code) {
    case 'ENOENT': return new ToolError('FileNotFound', `${userPath} does not exist`)
    case 'EISDIR': return new ToolError('InvalidArgs', `${userPath} is a directory`)
    case 'ENOTDIR': return new ToolError('FileNotFound', `${userPath}: a parent is not a directory`)
    case 'EACCES': case 'EPERM': return new ToolError('PermissionDenied', `${userPath}: permission denied`)
    case 'ELOOP': return new ToolError('InvalidPath', `${userPath} is a symbolic link`)
    case 'ENAMETOOLONG': return new ToolError('InvalidPath', `${userPath} is too long`)
    case 'ENOSPC': case 'EDQUOT': return new ToolError('ExecutionFailed', 'no space left for the workspace')
    default: return error
  }
}

/** Resolves a path that must exist: FileNotFound otherwise. */
export async function existingPath (workspaceDir: string, userPath: string): Promise<string> {
  const resolved = await resolveInWorkspace(workspaceDir, userPath)
  if (!resolved.exists) throw new ToolError('FileNotFound', `${userPath} does not exist`)
  return resolved.absolute
}

/**
 * Opens a resolved file for reading, race-free: its directory is walked by
 * descriptor and the file opened with O_NOFOLLOW, so a symlink swapped in
 * after the check cannot lead outside. A file with other hard links is
 * refused: its other names may be outside the workspace.
 */
export async function openContained (workspaceDir: string, absolute: string, userPath: string): Promise<{ handle: FileHandle, stat: Stats }> {
  const { relativeDir, name } = splitInWorkspace(workspaceDir, absolute)
  let handle: FileHandle
  try {
    const dir = await openContainedDirectory(workspaceDir, relativeDir, userPath)
    try {
      handle = await open(dir.at(name), constants.O_RDONLY | constants.O_NOFOLLOW)
    } finally {
      await dir.close()
    }
  } catch (error) {
    throw fsError(error, userPath)
  }
  try {
    const stat = await handle.stat()
    if (stat.isDirectory()) throw new ToolError('InvalidArgs', `${userPath} is a directory`)
    if (!stat.isFile()) throw new ToolError('InvalidArgs', `${userPath} is not a regular file`)
    if (stat.nlink > 1) throw new ToolError('InvalidPath', `${userPath} has other hard links, which may lie outside the workspace`)
    return { handle, stat }
  } catch (error) {
    await handle.close()
    throw error
  }
}

/** Reads at most `maxBytes` from the start of an open file. */
export async function readPrefix (handle: FileHandle, maxBytes: number): Promise<Buffer> {
  const buffer = Buffer.alloc(maxBytes)
  let filled = 0
  while (filled < maxBytes) {
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
  // One quota check and write at a time per workspace, so two writes cannot both fit the last bytes.
  return serialised(`${workspaceDir}\u0000quota`, async () => {
    await quota.ensureRoom(Buffer.byteLength(content) - await sizeOf(absolute))
    await writeInPlace(workspaceDir, absolute, userPath, content, options)
  })
}

/** The size of the regular file at `absolute`, 0 when there is none (what a write replaces). */
export async function sizeOf (absolute: string): Promise<number> {
  const info = await lstat(absolute).catch(() => null)
  return info?.isFile() ? info.size : 0
}

async function writeInPlace (workspaceDir: string, absolute: string, userPath: string, content: string | Buffer, options: { createParents?: boolean }): Promise<void> {
  const { relativeDir, name } = splitInWorkspace(workspaceDir, absolute)
  const temp = `.${name.slice(0, 100)}.${randomUUID()}.toolport-tmp`
  let dir
  try {
    dir = await openContainedDirectory(workspaceDir, relativeDir, userPath, { create: options.createParents })
  } catch (error) {
    throw fsError(error, userPath)
  }
  try {
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
