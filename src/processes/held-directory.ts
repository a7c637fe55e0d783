/**
 * The workspace directory a process start holds open: the sandbox binds
 * that very directory, whatever its path names by the time the command
 * starts (another instance may delete the workspace and make the id again
 * meanwhile).
 */
import { constants } from 'node:fs'
import { type FileHandle, open } from 'node:fs/promises'
import { ToolError } from '../errors.ts'

/** Linux's O_PATH (node:fs does not name it). */
const O_PATH = 0o10000000

/**
 * The directory, held open as a path (O_PATH: it needs no read permission,
 * which a command may have taken from it). Gone is a deletion of workspace
 * `id` (null: an ephemeral one); any other failure (no descriptor left) is
 * not.
 */
export async function holdDirectory (dir: string, id: string | null): Promise<FileHandle> {
  try {
    return await open(dir, O_PATH | constants.O_DIRECTORY)
  } catch (error) {
    const { code } = error as NodeJS.ErrnoException
    if (code === 'ENOENT' || code === 'ENOTDIR') throw deletedWhileStarting(id)
    throw error
  }
}

/** A start whose workspace `id` another instance deleted (and maybe made again) meanwhile. */
export function deletedWhileStarting (id: string | null): ToolError {
  if (id === null) return new ToolError('ExecutionFailed', 'the workspace went while the process started')
  return new ToolError('NotFound', `workspace ${id} was deleted while the process started; start it again to make the workspace anew`)
}
