/**
 * A workspace's usage kept per directory (the regular files directly in
 * each, and their bytes), with an inotify watch on every directory
 * (usage-inotify.ts), so that after a call that may have changed the tree
 * only the directories it changed are listed again, not the whole tree.
 * Memory grows with the directories, not the files.
 *
 * - A catch-up first waits for a marker (usage-marker.ts) that proves every
 *   event of the change has arrived.
 * - A directory is watched before it is listed: a change made after the
 *   listing began is reported, one made before is in the listing.
 * - Where the events cannot be trusted, the caller falls back to listing
 *   everything (`scanAll`): a watch that cannot be set up (the kernel's
 *   max_user_watches, or this instance's `watchLimit`), a watch
 *   that failed, a marker that did not arrive, or so many events since the
 *   change began that the kernel's queue may have overflowed.
 * - Directories are entered through descriptors (TreeCursor), never through
 *   a symlink, and watched through the descriptor: a directory swapped for a
 *   link cannot move a watch outside the workspace.
 * - A directory holding a file with other hard links is listed again at
 *   every catch-up: a write through another link reports the other directory.
 *   A hard link new since the last listing may have a partner in a directory
 *   nothing reported (a new link reports only its own directory), so a
 *   catch-up that finds one answers false and the caller lists everything.
 */
import { TreeCursor } from '../workspace-fs/tree-cursor.ts'
import type { TreeSize } from './directory-size.ts'
import { bytesOfName, type DirectoryNode, depthOf, identityOf, listDirectory, nameOf, namesTo, newNode, sameIdentity } from './usage-directory.ts'
import { eventCount, mayHaveOverflowed, unwatchDirectory, watchDirectory } from './usage-inotify.ts'
import { eventsDelivered } from './usage-marker.ts'
import type { ScanPause } from './usage-scan-slots.ts'

export { watchedDirectoryCount, watchLimit } from './usage-inotify.ts'

export class WatchedTree {
  readonly #root: string
  #top: DirectoryNode | undefined
  #dirty = new Set<DirectoryNode>()
  #linked = new Set<DirectoryNode>()
  /** Deltas of writes into directories the tree does not know yet (made by the write): the next catch-up lists them. */
  #unplaced: TreeSize = { files: 0, bytes: 0 }
  #total: TreeSize = { files: 0, bytes: 0 }
  #directories = 0
  /** A watch could not be set up or failed: the events no longer tell every change. */
  #broken = false
  #closed = false
  /** `eventCount()` when the oldest change not yet caught up with began. */
  #changeBegan: number | undefined
  /** A listing found a hard link it did not know: its partner's directory may hold a change no event reported. */
  #newLinks = false

  constructor (root: string) {
    this.#root = root
  }

  /** The figure: every directory's, plus deltas not yet placed. */
  get total (): TreeSize {
    return { files: this.#total.files + this.#unplaced.files, bytes: this.#total.bytes + this.#unplaced.bytes }
  }

  /** Every directory is watched: a catch-up can be trusted. */
  get watching (): boolean {
    return this.#top !== undefined && !this.#broken && !this.#closed
  }

  /** Directories in the tree (watched while `watching`). */
  get directories (): number {
    return this.#directories
  }

  /** A call that may change the tree begins: its events are counted from here. */
  changeBegins (): void {
    this.#changeBegan ??= eventCount()
  }

  /** A file tool's write landed in `directory` (relative to the root). Under the quota lock. */
  add (files: number, bytes: number, directory: string | undefined): void {
    const node = directory === undefined ? undefined : this.#find(directory)
    const into = node ? this.#total : this.#unplaced
    if (node) {
      node.files += files
      node.bytes += bytes
    }
    into.files += files
    into.bytes += bytes
  }

  /**
   * Lists again the directories whose events arrived since the last
   * catch-up (and the new ones below them). False when the events cannot be
   * trusted: the caller lists everything instead. Under the quota lock.
   */
  async catchUp (stillChanging: boolean, pause: ScanPause): Promise<boolean> {
    if (!this.watching) return false
    if (!await eventsDelivered()) return false
    if (this.#changeBegan !== undefined && mayHaveOverflowed(this.#changeBegan)) return false
    this.#changeBegan = stillChanging ? eventCount() : undefined
    if (!this.watching) return false
    const batch = [...this.#dirty, ...this.#linked]
    this.#dirty = new Set()
    this.#unplaced = { files: 0, bytes: 0 }
    this.#newLinks = false
    // Parents first: a parent's listing drops or replaces the children that moved.
    batch.sort((a, b) => depthOf(a) - depthOf(b))
    for (const node of batch) {
      if (node.gone) continue
      await this.#relist(node, pause)
    }
    return this.watching && !this.#newLinks
  }

  /**
   * Lists every directory (the first count, a figure grown old, or events
   * that cannot be trusted), watching each new one unless `watch` is false
   * or a watch cannot be set up (then `watching` is false afterwards and the
   * caller closes the tree). Under the quota lock.
   */
  async scanAll (options: { watch: boolean, pause: ScanPause }): Promise<TreeSize> {
    if (this.#broken || !options.watch) this.#dropAll()
    if (!options.watch) this.#broken = true
    this.#dirty = new Set()
    this.#unplaced = { files: 0, bytes: 0 }
    this.#changeBegan = undefined
    const cursor = await TreeCursor.open(this.#root)
    if (!cursor) {
      this.#dropAll()
      return this.total
    }
    try {
      if (!this.#top) {
        this.#top = newNode('', undefined)
        this.#directories++
      }
      await this.#enterHere(cursor, this.#top)
      await this.#walk(cursor, this.#top, true, options.pause)
    } finally {
      await cursor.close()
    }
    return this.total
  }

  /** Closes every watch (the workspace is gone, or falls back to full scans). */
  close (): void {
    this.#closed = true
    this.#dropAll()
  }

  #dropAll (): void {
    if (this.#top) this.#drop(this.#top)
    this.#top = undefined
    this.#total = { files: 0, bytes: 0 }
    this.#dirty = new Set()
    this.#linked = new Set()
  }

  #find (directory: string): DirectoryNode | undefined {
    let node = this.#top
    for (const name of directory.split('/')) {
      if (name === '' || name === '.') continue
      node = node?.children.get(nameOf(Buffer.from(name)))
    }
    return node?.listed ? node : undefined
  }

  /** Lists one directory again, reached from the root by its names; a directory that is not where it was sends its parent to be listed. */
  async #relist (node: DirectoryNode, pause: ScanPause): Promise<void> {
    const names = namesTo(node)
    const cursor = await TreeCursor.open(this.#root)
    if (!cursor) return this.#dropAll()
    try {
      for (const name of names) {
        if (!await cursor.enter(bytesOfName(name))) return this.#moved(node)
      }
      if (!sameIdentity(identityOf(cursor.here), node.identity)) return this.#moved(node)
      // A directory a walk that was cut short never reached is watched now.
      await this.#enterHere(cursor, node)
      await this.#walk(cursor, node, false, pause)
    } finally {
      await cursor.close()
    }
  }

  /** A directory is not where the tree has it: its parent is listed again (now, if already listed in this batch: at the next catch-up). */
  #moved (node: DirectoryNode): void {
    if (node.parent) this.#dirty.add(node.parent)
    else this.#dropAll()
  }

  /**
   * Sets the watch of the directory the cursor is in (before it is listed)
   * and records its identity. A watch that reported something is set again,
   * through the directory that is there now: one removed and made again may
   * have its old inode number (ext4 reuses them at once), so its identity
   * matches while the old watch hears nothing more; its removal was reported.
   */
  async #enterHere (cursor: TreeCursor, node: DirectoryNode): Promise<void> {
    node.identity ??= identityOf(cursor.here)
    if (node.watcher && node.heard) {
      unwatchDirectory(node.watcher)
      node.watcher = undefined
    }
    if (node.watcher || this.#broken || this.#closed) return
    node.heard = false
    node.watcher = watchDirectory(cursor.here, () => {
      if (node.gone) return
      node.heard = true
      this.#dirty.add(node)
    }, () => { this.#broken = true })
    if (!node.watcher) this.#broken = true
  }

  /**
   * Lists `start` (the cursor's directory), then every directory below it
   * the tree did not know (or all of them, with `deep`).
   */
  async #walk (cursor: TreeCursor, start: DirectoryNode, deep: boolean, pause: ScanPause): Promise<void> {
    const base = cursor.depth
    const stack = [{ node: start, toVisit: await this.#list(cursor, start, deep, pause) }]
    while (stack.length > 0) {
      const top = stack[stack.length - 1] as (typeof stack)[number]
      const child = top.toVisit.pop()
      if (child === undefined) {
        stack.pop()
        if (stack.length === 0) return
        if (await cursor.leave() !== base + stack.length - 1) {
          // The tree moved under the walk: what it did not reach is listed at the next catch-up.
          for (const { node, toVisit } of stack) for (const left of [node, ...toVisit]) this.#dirty.add(left)
          return
        }
        continue
      }
      if (child.gone) continue
      if (!await cursor.enter(bytesOfName(child.name))) {
        this.#dirty.add(top.node)
        continue
      }
      if (!sameIdentity(identityOf(cursor.here), child.identity)) {
        // Swapped since its parent was listed: the parent is listed again at the next catch-up.
        this.#dirty.add(top.node)
        await cursor.leave()
        continue
      }
      await this.#enterHere(cursor, child)
      stack.push({ node: child, toVisit: await this.#list(cursor, child, deep, pause) })
    }
  }

  /** Counts the directory's own files into its figure and reconciles its children; answers the children to walk into. */
  async #list (cursor: TreeCursor, node: DirectoryNode, deep: boolean, pause: ScanPause): Promise<DirectoryNode[]> {
    await pause()
    const listing = await listDirectory(cursor)
    this.#total.files += listing.files - node.files
    this.#total.bytes += listing.bytes - node.bytes
    node.files = listing.files
    node.bytes = listing.bytes
    for (const ino of listing.links) if (!node.linkedInodes?.has(ino)) this.#newLinks = true
    node.linkedInodes = listing.links.size > 0 ? listing.links : undefined
    if (node.linkedInodes) this.#linked.add(node)
    else this.#linked.delete(node)
    const toVisit: DirectoryNode[] = []
    for (const [name, child] of node.children) {
      const identity = listing.subdirectories.get(name)
      if (!identity || !sameIdentity(identity, child.identity)) {
        this.#drop(child)
        node.children.delete(name)
      } else if (deep || !child.listed) {
        toVisit.push(child)
      }
    }
    for (const [name, identity] of listing.subdirectories) {
      if (node.children.has(name)) continue
      const child = newNode(name, node)
      child.identity = identity
      node.children.set(name, child)
      this.#directories++
      toVisit.push(child)
    }
    node.listed = true
    return toVisit
  }

  /** Drops a directory and everything below it from the tree, closing their watches. */
  #drop (node: DirectoryNode): void {
    const pending = [node]
    for (let next = pending.pop(); next; next = pending.pop()) {
      next.gone = true
      if (next.watcher) {
        unwatchDirectory(next.watcher)
        next.watcher = undefined
      }
      this.#total.files -= next.files
      this.#total.bytes -= next.bytes
      this.#directories--
      this.#dirty.delete(next)
      this.#linked.delete(next)
      pending.push(...next.children.values())
    }
  }
}
