/**
 * Counting a directory tree's regular files and bytes, without following
 * symlinks, at any depth and any path length (a TreeCursor walk: every step
 * relative to a descriptor). Every entry is counted: a figure that stopped
 * part way would be wrong without saying so.
 */
import type { Dirent } from 'node:fs'
import { lstat, readdir } from 'node:fs/promises'
import { TreeCursor } from '../workspace-fs/tree-cursor.ts'

/** What is left to count in one directory of the walk. */
interface Listing {
  entries: Dirent[]
  next: number
}

async function listingOf (cursor: TreeCursor): Promise<Listing> {
  // A directory that cannot be listed (gone meanwhile) holds nothing to count.
  return { entries: await readdir(cursor.here, { withFileTypes: true }).catch(() => []), next: 0 }
}

export async function directorySize (root: string): Promise<{ files: number, bytes: number }> {
  const total = { files: 0, bytes: 0 }
  const cursor = await TreeCursor.open(root)
  if (!cursor) return total
  try {
    const listings = [await listingOf(cursor)]
    for (;;) {
      const listing = listings[listings.length - 1] as Listing
      const entry = listing.entries[listing.next++]
      if (entry === undefined) {
        if (cursor.depth === 0) return total
        listings.length = await cursor.leave() + 1
      } else if (entry.isDirectory()) {
        if (await cursor.enter(entry.name)) listings.push(await listingOf(cursor))
      } else if (entry.isFile()) {
        // lstat: the entry may have become a link since it was listed.
        const stats = await lstat(cursor.at(entry.name)).catch(() => null)
        if (stats?.isFile()) {
          total.files++
          total.bytes += stats.size
        }
      }
    }
  } finally {
    await cursor.close()
  }
}
