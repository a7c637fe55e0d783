/**
 * Removing a directory tree without ever following a symlink — not even one
 * a sandboxed command swaps in while the removal runs.
 *
 * `fs.rm({ recursive })` works by path: it lists `dir/sub`, then unlinks
 * `dir/sub/<name>`. A command still running in the workspace can turn `sub`
 * into a symlink between the two, and the unlinks land wherever it points
 * (another tenant's workspace, anything the service may delete). Here every
 * step goes through a descriptor of a directory opened with O_NOFOLLOW
 * (`/proc/self/fd/N/<name>`, as in contained-fs.ts): a swapped-in symlink is
 * unlinked as a link, never entered.
 */
import { constants } from 'node:fs'
import { open, readdir, rmdir, unlink } from 'node:fs/promises'

const DIRECTORY_FLAGS = constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW
/** Rounds of listing a directory again (entries moved in while it was emptied). */
const EMPTYING_ROUNDS = 5
/** Each level holds one descriptor open; a tree deeper than this is left (and logged by the caller). */
const MAX_DEPTH = 1000

const codeOf = (error: unknown): string | undefined => (error as NodeJS.ErrnoException).code

/** Removes `target` (a directory, a file or a link) and everything under it; nothing there is fine. */
export async function removeTree (target: string): Promise<void> {
  // Usually a workspace, so a directory first.
  await removeDirectory(target, 0)
}

/** An entry of unknown kind: a file or a symlink goes in one step (unlink never follows a link). */
async function removeEntry (at: string, depth: number): Promise<void> {
  try {
    await unlink(at)
    return
  } catch (error) {
    const code = codeOf(error)
    if (code === 'ENOENT') return
    if (code !== 'EISDIR' && code !== 'EPERM') throw error
  }
  await removeDirectory(at, depth)
}

/**
 * A directory: one rmdir when it is empty, else emptied through a descriptor
 * and removed. Each hand-over between the two kinds (an entry swapped while
 * looked at) counts as a level, so a swapping loop cannot keep it going.
 */
async function removeDirectory (at: string, depth: number): Promise<void> {
  if (depth >= MAX_DEPTH) throw new Error(`directory tree deeper than ${MAX_DEPTH} levels`)
  try {
    await rmdir(at)
    return
  } catch (error) {
    const code = codeOf(error)
    if (code === 'ENOENT') return
    if (code === 'ENOTDIR') return removeEntry(at, depth + 1)
    if (code !== 'ENOTEMPTY' && code !== 'EEXIST') throw error
  }
  let handle
  try {
    handle = await open(at, DIRECTORY_FLAGS)
  } catch (error) {
    const code = codeOf(error)
    if (code === 'ENOENT') return
    // Swapped for a symlink (or a file) since: remove that instead, as what it is now.
    if (code === 'ELOOP' || code === 'ENOTDIR') return removeEntry(at, depth + 1)
    throw error
  }
  try {
    await emptyDirectory(handle.fd, depth)
  } finally {
    await handle.close()
  }
  await removeDirectory(at, depth + 1)
}

/** Removes every entry of the open directory `fd`, listing it again while entries keep appearing. */
async function emptyDirectory (fd: number, depth: number): Promise<void> {
  for (let round = 0; round < EMPTYING_ROUNDS; round++) {
    const names = await readdir(`/proc/self/fd/${fd}`)
    if (names.length === 0) return
    for (const name of names) await removeEntry(`/proc/self/fd/${fd}/${name}`, depth + 1)
  }
}
