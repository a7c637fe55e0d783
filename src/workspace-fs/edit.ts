/**
 * The edit procedure every editing tool shares (edit_file, omega's edit): the
 * file is read whole, changed by the tool's own rule, and written back
 * atomically within the workspace's quota, alone among this instance's
 * writes and edits of that file, so none loses another's change; and only
 * over the file as it was read, so that a change made meanwhile by what
 * does not wait for those (an archive upload, another instance, a command)
 * is not lost either: the edit is then made again on the file there now.
 */
import { ToolError } from '../errors.ts'
import { existingPath, openContained, readPrefix, utf8Text } from './read.ts'
import { FileChanged, type RoomCheck, withFileLock, writeContained } from './write.ts'

/** Reads of a file that keeps changing under an edit before it gives up (Conflict). */
const EDIT_ATTEMPTS = 5

/** Files larger than this are not loaded for an edit. */
export const MAX_EDIT_BYTES = 16 * 1024 * 1024

/** Non-overlapping occurrences of `needle` (not empty) in `text`. */
export function countOccurrences (text: string, needle: string): number {
  let count = 0
  for (let at = text.indexOf(needle); at !== -1; at = text.indexOf(needle, at + needle.length)) count++
  return count
}

/** `text` with the first occurrence of `needle` replaced (`needle` must occur). */
export function replaceFirst (text: string, needle: string, replacement: string): string {
  const at = text.indexOf(needle)
  return text.slice(0, at) + replacement + text.slice(at + needle.length)
}

/**
 * Applies `edit` to the text of the workspace file `userPath` and writes the
 * new text back; `edit` throws to refuse, and the file stays as it was.
 */
export async function editFile<T> (workspaceDir: string, userPath: string, quota: RoomCheck | undefined, edit: (text: string) => { text: string, result: T }): Promise<T> {
  const absolute = await existingPath(workspaceDir, userPath)
  return withFileLock(absolute, async () => {
    for (let attempt = 1; ; attempt++) {
      const { handle, stat } = await openContained(workspaceDir, absolute, userPath)
      let bytes: Buffer
      try {
        if (stat.size > MAX_EDIT_BYTES) throw new ToolError('InvalidArgs', `${userPath} is larger than ${MAX_EDIT_BYTES} bytes; edit it with exec_shell instead`)
        bytes = await readPrefix(handle, stat.size)
      } finally {
        await handle.close()
      }
      const read = { stats: stat, bytes, readAt: Date.now() }
      const edited = edit(utf8Text(bytes, userPath))
      try {
        await writeContained(workspaceDir, absolute, userPath, edited.text, { quota, unchangedSince: read })
        return edited.result
      } catch (error) {
        // Changed since it was read: the edit is made again on what is there now, as if it came after.
        if (!(error instanceof FileChanged) || attempt === EDIT_ATTEMPTS) throw error
      }
    }
  })
}
