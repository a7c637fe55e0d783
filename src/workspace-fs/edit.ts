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

/**
 * Where `needle` (not empty) first occurs in `text` (-1: nowhere), and how
 * many times without overlapping, found in time linear in both (Knuth,
 * Morris and Pratt): `indexOf` compares the needle again at almost every
 * position of a text such as a long run of one letter, and a caller's
 * needle of a few kilobytes against a file of megabytes would hold the
 * event loop, and every other call, for seconds to hours.
 */
export function occurrencesOf (text: string, needle: string): { first: number, count: number } {
  // fallback[i]: the length of the longest proper prefix of needle[0..i] that is also its suffix.
  const fallback = new Int32Array(needle.length)
  for (let i = 1, length = 0; i < needle.length;) {
    if (needle.charCodeAt(i) === needle.charCodeAt(length)) fallback[i++] = ++length
    else if (length > 0) length = fallback[length - 1] ?? 0
    else fallback[i++] = 0
  }
  let first = -1
  let count = 0
  for (let i = 0, matched = 0; i < text.length;) {
    if (text.charCodeAt(i) === needle.charCodeAt(matched)) {
      i++
      if (++matched < needle.length) continue
      if (first === -1) first = i - needle.length
      count++
      // Not overlapping: the next occurrence starts after this one.
      matched = 0
    } else if (matched > 0) {
      matched = fallback[matched - 1] ?? 0
    } else {
      i++
    }
  }
  return { first, count }
}

/** `text` with `needle` at `at` replaced. */
export function replaceAt (text: string, at: number, needle: string, replacement: string): string {
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
