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
import { constants } from 'node:fs'
import { type FileHandle, mkdir, open } from 'node:fs/promises'
import path from 'node:path'
import { ToolError } from '../errors.ts'

const DIRECTORY_FLAGS = constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW

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
 * directories are made on the way.
 */
export async function openContainedDirectory (workspaceDir: string, relativeDir: string, userPath: string, options: { create?: boolean } = {}): Promise<ContainedDirectory> {
  let current: FileHandle = await open(workspaceDir, DIRECTORY_FLAGS)
  try {
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

/** The directory part and the name of a canonical absolute path inside the workspace. */
export function splitInWorkspace (workspaceDir: string, absolute: string): { relativeDir: string, name: string } {
  const relative = path.relative(workspaceDir, absolute)
  return { relativeDir: path.dirname(relative), name: path.basename(relative) }
}
