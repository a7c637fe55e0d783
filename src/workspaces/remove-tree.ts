/**
 * Removing a directory tree of any depth and any path length without ever
 * following a symlink — not even one a sandboxed command swaps in while the
 * removal runs.
 *
 * `fs.rm({ recursive })` works by path: it lists `dir/sub`, then unlinks
 * `dir/sub/<name>`. A command still running in the workspace can turn `sub`
 * into a symlink between the two, and the unlinks land wherever it points
 * (another tenant's workspace, anything the service may delete); and a path
 * longer than PATH_MAX cannot be named at all. Here the walk is a TreeCursor:
 * every step is relative to a directory opened with O_NOFOLLOW, so a
 * swapped-in symlink is unlinked as a link, never entered, and two
 * descriptors do for any depth.
 *
 * The work is bounded, so a command that keeps adding entries (or keeps
 * swapping a name between a file and a directory) cannot keep a removal
 * going for ever: it fails, and the caller tries again later, from where
 * this attempt stopped.
 */
import { readdir, rmdir, unlink } from 'node:fs/promises'
import { TreeCursor } from '../workspace-fs/tree-cursor.ts'

/** Times one name may turn from a directory into something else (and back) before the removal gives up. */
const KIND_CHANGES = 3
/** Times one directory is listed again (entries made while it was emptied) before the removal gives up. */
const LISTING_ROUNDS = 5
/** Entries one removal handles at most; a tree past it is finished by the next attempt. */
const MAX_STEPS = 10_000_000

const codeOf = (error: unknown): string | undefined => (error as NodeJS.ErrnoException).code

/** Removes `target` (a directory, a file or a link) and everything under it; nothing there is fine. */
export async function removeTree (target: string): Promise<void> {
  for (let attempt = 0; attempt < KIND_CHANGES; attempt++) {
    if (await removeEntry(target) === 'gone') return
    const cursor = await TreeCursor.open(target, { unlock: true })
    // Not a directory any more: the next attempt removes it as what it is now.
    if (!cursor) continue
    try {
      await emptyTree(cursor)
    } finally {
      await cursor.close()
    }
  }
  throw new Error('a directory kept changing while it was removed')
}

/** Removes a file, a link or an empty directory in one step; a directory with entries is left to the walk. */
async function removeEntry (at: string | Buffer): Promise<'gone' | 'not empty'> {
  for (let attempt = 0; attempt < KIND_CHANGES; attempt++) {
    try {
      // unlink never follows a link, and on Linux refuses a directory with EISDIR.
      await unlink(at)
      return 'gone'
    } catch (error) {
      const code = codeOf(error)
      if (code === 'ENOENT') return 'gone'
      if (code !== 'EISDIR') throw error
    }
    try {
      await rmdir(at)
      return 'gone'
    } catch (error) {
      const code = codeOf(error)
      if (code === 'ENOENT') return 'gone'
      if (code === 'ENOTEMPTY' || code === 'EEXIST') return 'not empty'
      // Swapped for a file or a link since the unlink: try again as that.
      if (code !== 'ENOTDIR') throw error
    }
  }
  throw new Error('an entry kept changing between a file and a directory while it was removed')
}

/** What is left to do in one directory of the walk: names as bytes, so that a name that is not UTF-8 is removed too. */
interface Listing {
  names: Buffer[]
  next: number
  rounds: number
}

async function listingOf (cursor: TreeCursor): Promise<Listing> {
  return { names: await readdir(cursor.here, { encoding: 'buffer' }), next: 0, rounds: 1 }
}

/** Empties the cursor's root, depth first; one listing per level is kept, not one descriptor. */
async function emptyTree (cursor: TreeCursor): Promise<void> {
  const listings = [await listingOf(cursor)]
  let steps = 0
  for (;;) {
    const listing = listings[listings.length - 1] as Listing
    const name = listing.names[listing.next++]
    if (name !== undefined) {
      if (++steps > MAX_STEPS) throw new Error(`more than ${MAX_STEPS} entries in one removal`)
      if (await removeEntry(cursor.at(name)) === 'gone') continue
      if (await cursor.enter(name)) {
        // Back here once it is empty, to remove it.
        listing.next--
        listings.push(await listingOf(cursor))
      }
      continue
    }
    // Every listed name is handled: list again, for entries made meanwhile.
    const names = await readdir(cursor.here, { encoding: 'buffer' })
    if (names.length > 0) {
      if (++listing.rounds > LISTING_ROUNDS) throw new Error('entries kept appearing in a directory while it was removed')
      listing.names = names
      listing.next = 0
      continue
    }
    if (cursor.depth === 0) return
    listings.length = await cursor.leave() + 1
  }
}
