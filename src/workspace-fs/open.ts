/**
 * Race-free filesystem access inside a workspace.
 *
 * resolveInWorkspace checks a path, but a symlink swapped in between that
 * check and the use (a sandboxed command can make one at any moment) would
 * redirect the use. So the use walks the path again, one component at a
 * time, each opened with O_NOFOLLOW relative to the directory opened before
 * it — through `/proc/self/fd/N/<name>`, which resolves against the open
 * directory whatever its path has become. That is `openat` for Node: once the
 * walk holds a directory, no later rename or symlink can move it outside.
 */
import { constants, type Stats } from 'node:fs'
import { type FileHandle, mkdir, open } from 'node:fs/promises'
import path from 'node:path'
import { ToolError } from '../errors.ts'

const DIRECTORY_FLAGS = constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW
/**
 * A file opened for reading: never through a symlink at its own name, and
 * never blocking — a FIFO a command left in the workspace would otherwise
 * hold a thread-pool thread until someone writes to it. For regular files
 * O_NONBLOCK changes nothing.
 */
export const READ_FLAGS = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK

/** An open directory inside the workspace; `at(name)` names an entry of it, immune to path swaps. */
export interface ContainedDirectory {
  at: (name: string) => string
  close: () => Promise<void>
}

function swapped (userPath: string): ToolError {
  return new ToolError('InvalidPath', `${userPath} changed into a symbolic link while in use`)
}

/**
 * Opens the directory `relativeDir` (relative, canonical, inside the
 * workspace) by walking it component by component. With `create`, missing
 * directories are made on the way. `checkRoot` is given the workspace
 * directory as opened, and throws when it is not the one expected: the walk
 * then goes on from that very directory, so a workspace deleted and made
 * again at the path is never written into instead.
 */
export async function openContainedDirectory (workspaceDir: string, relativeDir: string, userPath: string, options: { create?: boolean, checkRoot?: (root: Stats) => void } = {}): Promise<ContainedDirectory> {
  let current: FileHandle = await open(workspaceDir, DIRECTORY_FLAGS)
  try {
    options.checkRoot?.(await current.stat())
    for (const name of relativeDir.split(path.sep).filter((part) => part !== '' && part !== '.')) {
      const next = `/proc/self/fd/${current.fd}/${name}`
      let handle: FileHandle
      try {
        handle = await open(next, DIRECTORY_FLAGS)
      } catch (error) {
        const code = (error as NodeJS.ErrnoException).code
        if (code === 'ELOOP') throw swapped(userPath)
        if (code !== 'ENOENT' || !options.create) throw error
        await mkdir(next).catch((mkdirError: NodeJS.ErrnoException) => { if (mkdirError.code !== 'EEXIST') throw mkdirError })
        handle = await open(next, DIRECTORY_FLAGS).catch((reopenError: NodeJS.ErrnoException) => {
          throw reopenError.code === 'ELOOP' ? swapped(userPath) : reopenError
        })
      }
      await current.close()
      current = handle
    }
  } catch (error) {
    await current.close()
    throw error
  }
  const fd = current.fd
  return { at: (name) => `/proc/self/fd/${fd}/${name}`, close: () => current.close() }
}

/**
 * The shortcut past the walk, for a name right inside the workspace: the
 * workspace directory itself is canonical and out of every tool's reach, and
 * O_NOFOLLOW refuses a symlink at the name, so one open is as safe as the
 * walk. Deeper paths always take the walk: a directory on the way may be a
 * symlink to anywhere, and even opening (then refusing) a file outside — a
 * device, say — must not happen.
 *
 * Resolves to undefined — and the caller takes the walk, with its precise
 * errors — whenever the shortcut does not apply or fails.
 */
export async function openNoFollow (workspaceDir: string, absolute: string, flags = READ_FLAGS): Promise<FileHandle | undefined> {
  if (!isDirectName(workspaceDir, absolute)) return undefined
  try {
    return await open(absolute, flags)
  } catch {
    return undefined
  }
}

/** Whether `absolute` names an entry right in the workspace directory (where openNoFollow's shortcut applies). */
export function isDirectName (workspaceDir: string, absolute: string): boolean {
  return absolute.startsWith(workspaceDir + path.sep) && absolute.length > workspaceDir.length + 1 && !absolute.includes(path.sep, workspaceDir.length + 1)
}

/**
 * Closes a descriptor without waiting for it: a read is complete once its
 * bytes are in memory, and the answer need not wait for the close.
 */
export function closeQuietly (handle: FileHandle): void {
  handle.close().catch(() => {})
}

/** The directory part and the name of a canonical absolute path inside the workspace. */
export function splitInWorkspace (workspaceDir: string, absolute: string): { relativeDir: string, name: string } {
  const relative = path.relative(workspaceDir, absolute)
  return { relativeDir: path.dirname(relative), name: path.basename(relative) }
}
