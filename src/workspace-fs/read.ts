/**
 * Contained reads: opening an existing workspace file so that no symlink
 * swapped in after the check leads outside, refusing what is not a regular
 * file with one name, and reading a bounded prefix.
 */
import type { Stats } from 'node:fs'
import { type FileHandle, open } from 'node:fs/promises'
import path from 'node:path'
import { ToolError } from '../errors.ts'
import { fsError, shownPath } from './errors.ts'
import { closeQuietly, openContainedDirectory, openNoFollow, READ_FLAGS, splitInWorkspace } from './open.ts'
import { checkPathSyntax, refuseDirectoryName, resolveInWorkspace } from './paths.ts'

/** Resolves a path that must exist: FileNotFound otherwise. */
export async function existingPath (workspaceDir: string, userPath: string): Promise<string> {
  const resolved = await resolveInWorkspace(workspaceDir, userPath)
  if (!resolved.exists) throw new ToolError('FileNotFound', `${shownPath(userPath)} does not exist`)
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

/**
 * Only a regular file with no other names may be read: its other hard links may lie outside the
 * workspace. A path that names a directory (`a.txt/`, `a.txt/.`) names no file, as the kernel has it
 * (ENOTDIR): the path was resolved without the ending, and would otherwise read the file.
 */
function checkReadable (stat: Stats, userPath: string): Stats {
  if (stat.isDirectory()) throw new ToolError('InvalidArgs', `${shownPath(userPath)} is a directory`)
  refuseDirectoryName(userPath)
  if (!stat.isFile()) throw new ToolError('InvalidArgs', `${shownPath(userPath)} is not a regular file`)
  if (stat.nlink > 1) throw new ToolError('InvalidPath', `${shownPath(userPath)} has other hard links, which may lie outside the workspace`)
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
 * Bytes of the workspace file `userPath` as text. Bytes that are not UTF-8
 * are refused: shown as U+FFFD, they would be written back so by an agent
 * that edits what it read. With `cut`, the bytes are a prefix that may end
 * inside a character, which is left out. A byte order mark stays in the
 * text, so that it is written back.
 */
export function utf8Text (bytes: Uint8Array, userPath: string, cut = false): string {
  // A decoder a call: one that streams keeps a cut character for its next call.
  return utf8Pieces(userPath)(bytes, cut)
}

/**
 * The same for a file read in pieces: each call decodes the next piece
 * (`more`: a character it ends inside is kept for the next call), and the
 * bytes of all of them together must be UTF-8.
 */
export function utf8Pieces (userPath: string): (bytes: Uint8Array, more: boolean) => string {
  const decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true })
  return (bytes, more) => {
    try {
      return decoder.decode(bytes, { stream: more })
    } catch (error) {
      if (error instanceof TypeError) throw new ToolError('InvalidArgs', `${shownPath(userPath)} is not UTF-8 text; use exec_shell for it (iconv, xxd)`)
      throw error
    }
  }
}
