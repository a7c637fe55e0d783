/**
 * Filesystem helpers shared by the file and memory tools: contained opening
 * (no symlink swapped in after the check), atomic writes (never a
 * half-written file), bounded reads, and errno → ToolError.
 */
import { randomUUID } from 'node:crypto'
import { constants, type Stats } from 'node:fs'
import { type FileHandle, open, realpath, rename, rm, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { ToolError } from '../errors.ts'
import { isInside, resolveInWorkspace } from '../core/paths.ts'

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
 * Opens a resolved file for reading without following a final symlink, then
 * checks what was really opened: a link swapped in between the check and the
 * open cannot lead outside the workspace.
 */
export async function openContained (workspaceDir: string, absolute: string, userPath: string): Promise<{ handle: FileHandle, stat: Stats }> {
  let handle: FileHandle
  try {
    handle = await open(absolute, constants.O_RDONLY | constants.O_NOFOLLOW)
  } catch (error) {
    throw fsError(error, userPath)
  }
  try {
    const opened = await realpath(`/proc/self/fd/${handle.fd}`).catch(() => absolute)
    if (!isInside(workspaceDir, opened)) throw new ToolError('InvalidPath', `${userPath} resolves outside the workspace`)
    const stat = await handle.stat()
    if (stat.isDirectory()) throw new ToolError('InvalidArgs', `${userPath} is a directory`)
    if (!stat.isFile()) throw new ToolError('InvalidArgs', `${userPath} is not a regular file`)
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
 * Writes a file atomically: a temporary file beside it, then a rename. A
 * failure leaves the old content in place; readers never see half a file.
 */
export async function writeAtomically (absolute: string, content: string | Buffer): Promise<void> {
  const temp = path.join(path.dirname(absolute), `.${path.basename(absolute)}.${randomUUID()}.toolport-tmp`)
  try {
    await writeFile(temp, content, { flag: 'wx', mode: 0o644 })
    await rename(temp, absolute)
  } catch (error) {
    await rm(temp, { force: true })
    throw error
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
