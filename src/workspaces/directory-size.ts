/**
 * Counting a directory tree's regular files and bytes, without following
 * symlinks, at any depth and any path length (a TreeCursor walk: every step
 * relative to a descriptor). Every entry is counted: a figure that stopped
 * part way would be wrong without saying so.
 *
 * Each file's size is asked synchronously, a slice of entries per event-loop
 * turn: one promise and one thread-pool round trip per file cost several
 * times the lstat itself, and a slice is short enough that requests between
 * slices are not held up. The walk runs off the request path (usage.ts).
 */
import type { Dirent, Stats } from 'node:fs'
import { lstatSync } from 'node:fs'
import { readdir } from 'node:fs/promises'
import { setImmediate as nextTurn } from 'node:timers/promises'
import { TreeCursor } from '../workspace-fs/tree-cursor.ts'

/** Entries whose sizes are asked in one event-loop turn. */
const ENTRIES_PER_TURN = 256

export interface TreeSize {
  files: number
  bytes: number
}

/** The subdirectories left to walk in one directory of the walk. */
interface Listing {
  directories: Buffer[]
  next: number
}

/** Counts the regular files of the current directory into `total`; answers its subdirectories. */
async function countHere (cursor: TreeCursor, total: TreeSize): Promise<Listing> {
  // A directory that cannot be listed (gone meanwhile) holds nothing to count.
  // Names as bytes: a file whose name is not UTF-8 counts too.
  const entries: Array<Dirent<Buffer>> = await readdir(cursor.here, { withFileTypes: true, encoding: 'buffer' }).catch(() => [])
  const directories: Buffer[] = []
  for (let start = 0; start < entries.length; start += ENTRIES_PER_TURN) {
    if (start > 0) await nextTurn()
    for (const entry of entries.slice(start, start + ENTRIES_PER_TURN)) {
      if (entry.isDirectory()) directories.push(entry.name)
      if (!entry.isFile()) continue
      // lstat: the entry may have become a link since it was listed.
      const stats = lstatOrNull(cursor.at(entry.name))
      if (stats?.isFile()) {
        total.files++
        total.bytes += stats.size
      }
    }
  }
  return { directories, next: 0 }
}

function lstatOrNull (at: string | Buffer): Stats | null {
  try {
    return lstatSync(at, { throwIfNoEntry: false, bigint: false }) ?? null
  } catch {
    return null
  }
}

export async function directorySize (root: string): Promise<TreeSize> {
  const total = { files: 0, bytes: 0 }
  const cursor = await TreeCursor.open(root)
  if (!cursor) return total
  try {
    const listings = [await countHere(cursor, total)]
    for (;;) {
      const listing = listings[listings.length - 1] as Listing
      const name = listing.directories[listing.next++]
      if (name === undefined) {
        if (cursor.depth === 0) return total
        listings.length = await cursor.leave() + 1
      } else if (await cursor.enter(name)) {
        listings.push(await countHere(cursor, total))
      }
    }
  } finally {
    await cursor.close()
  }
}
