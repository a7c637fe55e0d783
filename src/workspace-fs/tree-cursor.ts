/**
 * Walking a directory tree of any depth and any path length, never through a
 * symlink, holding two descriptors whatever the depth: the root's and the
 * current directory's.
 *
 * Every step is relative to a descriptor (`/proc/self/fd/N/<name>`, as in
 * contained-fs.ts), so no path the kernel resolves is longer than one name,
 * and every directory is opened with O_NOFOLLOW: a symlink a command swaps in
 * is never entered. Going down opens the child by name. Going up opens `..`
 * and keeps it only when it is the very directory (device and inode) entered
 * before; when the current directory has moved meanwhile, the way down from
 * the root is walked again by names, as far as it still leads to the same
 * directories. So the walk never leaves the root's tree, and a tree moved
 * under it costs a walk down, not a wrong turn.
 *
 * A walk that removes (`unlock`) first gives every directory it opens back
 * to its owner (mode 0700): a command running as the service's user may
 * have taken the permissions away (`chmod 000`), which would otherwise stop
 * the removal of its workspace for good. A walk that only reads passes such
 * a directory by.
 */
import { constants } from 'node:fs'
import { chmod, type FileHandle, open } from 'node:fs/promises'

const DIRECTORY_FLAGS = constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW
/** Linux's O_PATH (Node does not name it): a descriptor that needs no permission on the directory itself. */
const O_PATH = 0o10000000
const OWNER_ONLY = 0o700

interface Identity {
  dev: bigint
  ino: bigint
}

/** A directory entry's name: as a string, or as the bytes the directory holds. */
export type EntryName = string | Buffer

/** A directory below the root: the name it was entered by, and what it was. */
interface Level extends Identity {
  name: EntryName
}

export class TreeCursor {
  readonly #root: FileHandle
  readonly #rootIdentity: Identity
  #current: FileHandle
  readonly #levels: Level[] = []
  readonly #unlock: boolean

  private constructor (root: FileHandle, identity: Identity, unlock: boolean) {
    this.#root = root
    this.#rootIdentity = identity
    this.#current = root
    this.#unlock = unlock
  }

  /**
   * A walk starting at the directory `root`; null when `root` is not a
   * directory (gone, a file, a symlink). With `unlock`, every directory
   * opened is made the owner's again (for a removal).
   */
  static async open (root: string, options: { unlock?: boolean } = {}): Promise<TreeCursor | null> {
    const unlock = options.unlock ?? false
    const handle = await openDirectory(root, unlock)
    if (!handle) return null
    try {
      return new TreeCursor(handle, await identityOf(handle), unlock)
    } catch (error) {
      await handle.close()
      throw error
    }
  }

  /** How many levels below the root the walk is. */
  get depth (): number {
    return this.#levels.length
  }

  /** The current directory, as a path resolved through its descriptor. */
  get here (): string {
    return `/proc/self/fd/${this.#current.fd}`
  }

  /**
   * An entry of the current directory, as a path resolved through its
   * descriptor. A name read as bytes (`readdir`'s `encoding: 'buffer'`) gives
   * a path of bytes: a name that is not UTF-8 is reached as it is.
   */
  at (name: string): string
  at (name: Buffer): Buffer
  at (name: EntryName): string | Buffer
  at (name: EntryName): string | Buffer {
    return typeof name === 'string' ? `${this.here}/${name}` : Buffer.concat([Buffer.from(`${this.here}/`), name])
  }

  /** Steps into the subdirectory `name`; false when it is not a directory (any more). */
  async enter (name: EntryName): Promise<boolean> {
    const handle = await openDirectory(this.at(name), this.#unlock)
    if (!handle) return false
    try {
      this.#levels.push({ name, ...await identityOf(handle) })
    } catch (error) {
      await handle.close()
      throw error
    }
    await this.#moveTo(handle)
    return true
  }

  /**
   * Steps up to the parent and answers the depth reached: one less, or less
   * still when the way down no longer leads where it led (levels that moved
   * away are dropped). Never above the root.
   */
  async leave (): Promise<number> {
    if (this.depth === 0) throw new Error('a tree walk cannot leave its root')
    this.#levels.pop()
    const parent = await openDirectory(`${this.here}/..`, false)
    if (parent) {
      const expected = this.#levels.at(-1) ?? this.#rootIdentity
      if (sameDirectory(await identityOf(parent).catch(() => null), expected)) {
        await this.#moveTo(parent)
        return this.depth
      }
      await parent.close()
    }
    await this.#walkDownAgain()
    return this.depth
  }

  async close (): Promise<void> {
    if (this.#current !== this.#root) await this.#current.close()
    await this.#root.close()
  }

  async #walkDownAgain (): Promise<void> {
    const levels = this.#levels.splice(0)
    await this.#moveTo(this.#root)
    for (const level of levels) {
      const handle = await openDirectory(this.at(level.name), this.#unlock)
      if (!handle) return
      if (!sameDirectory(await identityOf(handle).catch(() => null), level)) {
        await handle.close()
        return
      }
      this.#levels.push(level)
      await this.#moveTo(handle)
    }
  }

  async #moveTo (handle: FileHandle): Promise<void> {
    const previous = this.#current
    this.#current = handle
    if (previous !== this.#root && previous !== handle) await previous.close()
  }
}

const isNotADirectory = (code: string | undefined): boolean => code === 'ENOENT' || code === 'ELOOP' || code === 'ENOTDIR'

/**
 * Opens a directory without following a symlink at its name; null when it
 * is not a directory there, or (unless `unlock`) one its owner cannot read.
 */
async function openDirectory (at: string | Buffer, unlock: boolean): Promise<FileHandle | null> {
  let handle: FileHandle
  try {
    handle = await open(at, DIRECTORY_FLAGS)
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code
    if (isNotADirectory(code)) return null
    if (code !== 'EACCES') throw error
    return unlock ? openUnlocked(at) : null
  }
  // Listing it, and removing its entries, need read, write and search permission.
  if (unlock) await handle.chmod(OWNER_ONLY).catch(() => {})
  return handle
}

/**
 * A directory its owner cannot read: opened by O_PATH (which needs no
 * permission on it, and with O_NOFOLLOW and O_DIRECTORY is surely this
 * directory), given back to its owner through that descriptor, then opened
 * for reading through it: no name is looked up twice, so nothing can be
 * swapped in between.
 */
async function openUnlocked (at: string | Buffer): Promise<FileHandle | null> {
  let pathOnly: FileHandle
  try {
    pathOnly = await open(at, O_PATH | constants.O_DIRECTORY | constants.O_NOFOLLOW)
  } catch (error) {
    if (isNotADirectory((error as NodeJS.ErrnoException).code)) return null
    throw error
  }
  try {
    await chmod(`/proc/self/fd/${pathOnly.fd}`, OWNER_ONLY)
    // Without O_NOFOLLOW: this last step is the descriptor's own link to the directory, which is what to open.
    return await open(`/proc/self/fd/${pathOnly.fd}`, constants.O_RDONLY | constants.O_DIRECTORY)
  } finally {
    await pathOnly.close()
  }
}

async function identityOf (handle: FileHandle): Promise<Identity> {
  const { dev, ino } = await handle.stat({ bigint: true })
  return { dev, ino }
}

function sameDirectory (found: Identity | null, expected: Identity): boolean {
  return found !== null && found.dev === expected.dev && found.ino === expected.ino
}
