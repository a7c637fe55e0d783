/**
 * One directory in a WatchedTree (usage-watch.ts): what the tree keeps of
 * it, and what one listing of it finds.
 */
import { type FSWatcher, lstatSync, type Stats, statSync } from 'node:fs'
import { readdir, stat } from 'node:fs/promises'
import { setImmediate as nextTurn } from 'node:timers/promises'
import type { TreeCursor } from '../workspace-fs/tree-cursor.ts'

/** Entries whose sizes are asked in one event-loop turn (as in directory-size.ts). */
const ENTRIES_PER_TURN = 256

/**
 * A directory as it was seen: its inode, and when it was made (a directory removed and made again
 * often gets the inode back at once; the birth time tells them apart where the filesystem keeps one).
 */
export interface Identity {
  dev: number
  ino: number
  born: number
}

export interface DirectoryNode {
  /** Its name's bytes, one character a byte (`nameOf`): a name that is not UTF-8 is kept as it is. */
  readonly name: string
  readonly parent: DirectoryNode | undefined
  identity: Identity | undefined
  /** Regular files directly in this directory, and their bytes. */
  files: number
  bytes: number
  readonly children: Map<string, DirectoryNode>
  watcher: FSWatcher | undefined
  /** Its watch reported something since it was set: it may be the watch of a directory removed since. */
  heard: boolean
  /** Listed at least once (its children are known). */
  listed: boolean
  /** The inodes of its regular files that have other hard links. */
  linkedInodes: Set<number> | undefined
  /** Dropped from the tree. */
  gone: boolean
}

/** What one listing of a directory found. */
export interface Listing {
  /** Regular files directly in it, and their bytes. */
  files: number
  bytes: number
  /** The inodes of those files that have other hard links. */
  links: Set<number>
  /** Its subdirectories, by name (`nameOf`). */
  subdirectories: Map<string, Identity>
}

/** A directory entry's name, read as bytes, as the tree keeps it: one character a byte (latin1 maps each byte to one). */
export function nameOf (bytes: Buffer): string {
  return bytes.toString('latin1')
}

/** The bytes of a name the tree keeps. */
export function bytesOfName (name: string): Buffer {
  return Buffer.from(name, 'latin1')
}

export function newNode (name: string, parent: DirectoryNode | undefined): DirectoryNode {
  return { name, parent, identity: undefined, files: 0, bytes: 0, children: new Map(), watcher: undefined, heard: false, listed: false, linkedInodes: undefined, gone: false }
}

export function depthOf (node: DirectoryNode): number {
  let depth = 0
  for (let at = node.parent; at; at = at.parent) depth++
  return depth
}

/** The names from the root down to `node`. */
export function namesTo (node: DirectoryNode): string[] {
  const names: string[] = []
  for (let at: DirectoryNode | undefined = node; at?.parent; at = at.parent) names.unshift(at.name)
  return names
}

/** Lists the directory the cursor is in (an unreadable one lists as empty). */
export async function listDirectory (cursor: TreeCursor): Promise<Listing> {
  const entries = await readdir(cursor.here, { withFileTypes: true, encoding: 'buffer' }).catch(() => [])
  const listing: Listing = { files: 0, bytes: 0, links: new Set(), subdirectories: new Map() }
  for (let start = 0; start < entries.length; start += ENTRIES_PER_TURN) {
    if (start > 0) await nextTurn()
    for (const entry of entries.slice(start, start + ENTRIES_PER_TURN)) {
      if (!entry.isFile() && !entry.isDirectory()) continue
      // lstat: the entry may have changed since it was listed.
      const stats = lstatOrNull(cursor.at(entry.name))
      if (stats?.isFile()) {
        listing.files++
        listing.bytes += stats.size
        if (stats.nlink > 1) listing.links.add(stats.ino)
      } else if (stats?.isDirectory()) {
        listing.subdirectories.set(nameOf(entry.name), identityOfStats(stats))
      }
    }
  }
  return listing
}

export function identityOf (at: string): Identity | undefined {
  try {
    return identityOfStats(statSync(at))
  } catch {
    return undefined
  }
}

/** identityOf, off the event loop (a shared volume may take its time to answer). */
export async function identityAt (at: string): Promise<Identity | undefined> {
  return stat(at).then(identityOfStats, () => undefined)
}

export function identityOfStats ({ dev, ino, birthtimeMs }: { dev: number, ino: number, birthtimeMs: number }): Identity {
  return { dev, ino, born: birthtimeMs }
}

export function sameIdentity (found: Identity | undefined, expected: Identity | undefined): boolean {
  return found !== undefined && expected !== undefined && found.dev === expected.dev && found.ino === expected.ino && found.born === expected.born
}

function lstatOrNull (at: string | Buffer): Stats | null {
  try {
    return lstatSync(at, { throwIfNoEntry: false, bigint: false }) ?? null
  } catch {
    return null
  }
}
