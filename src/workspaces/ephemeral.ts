/**
 * Ephemeral workspaces: a fresh, empty directory for a call or batch without
 * `workspace` (or an MCP session), removed when its lease is released. They
 * live under one root that belongs to this instance alone: it is emptied at
 * start, which forgets whatever a crash left behind, and `sweep` removes
 * again what a release could not (a command may still have been adding to
 * it), so nothing is left for ever.
 */
import { randomUUID } from 'node:crypto'
import { mkdir, readdir, realpath, rename, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import type { Logger } from 'pino'
import { ConfigError } from '../config.ts'
import { foundProcess } from '../sandbox/process-tree.ts'
import { readTextIfPresent } from './read-if-present.ts'
import { removeTree } from './remove-tree.ts'
import { forgetUsage, startUsage } from './usage.ts'

/**
 * The root's owner, `{host, pid, startedAt, instance}`: a second instance
 * given the same root (the default, `<root>/ephemeral`, on a shared root)
 * would empty it under the first as it starts. One on this host that is
 * still running is refused at start. One elsewhere, which no process table
 * shows, is told of in the log by the first instance's next sweep; from
 * then on each removes only what it made (a sweep takes only the names of
 * its own instance), so that only the start emptied the other's.
 */
const OWNER_FILE = '.owner'

interface Owner { host: string, pid: number, startedAt: string, instance: string }

/** A workspace held by a running call; `release` once the call is done. */
export interface WorkspaceLease {
  id: string | null
  dir: string
  release: () => Promise<void>
  /** An ephemeral workspace that outlives the call (an MCP session's): processes may run in it. */
  keepsProcesses?: boolean
}

export class EphemeralWorkspaces {
  readonly #log: Logger
  #root = ''
  /** Workspaces leased and not yet removed, by name: a sweep leaves them alone. */
  readonly #busy = new Set<string>()
  readonly #owner: Owner = { host: os.hostname(), pid: process.pid, startedAt: foundProcess(process.pid)?.startedAt ?? '', instance: randomUUID() }
  /** What the names of this instance's workspaces begin with: a sweep removes only those. */
  readonly #prefix = `${this.#owner.instance.slice(0, 8)}-`
  /** Another instance's taking of the root has been logged. */
  #toldOfOther = false

  constructor (log: Logger) {
    this.#log = log
  }

  /** The canonical root (after `init`). */
  get root (): string {
    return this.#root
  }

  /** Makes `root` (emptied first) the home of this instance's ephemeral workspaces; ConfigError when another instance here runs in it. */
  async init (root: string): Promise<void> {
    await mkdir(root, { recursive: true, mode: 0o700 })
    this.#root = await realpath(root)
    const owner = await this.#readOwner()
    // The same process still running (its pid and start time), not one that took its pid since.
    const running = owner !== undefined && owner.host === this.#owner.host && owner.pid !== process.pid && owner.startedAt !== '' && foundProcess(owner.pid)?.startedAt === owner.startedAt
    if (running) {
      throw new ConfigError(`workspaces.ephemeral_root ${this.#root} is in use by another running instance (pid ${owner?.pid}): give each instance its own, as it is emptied at start`)
    }
    await this.#writeOwner()
    // Whatever an instance before left: what a crash or a cut removal left behind.
    await this.#remove((name) => !name.startsWith(OWNER_FILE))
  }

  async #writeOwner (): Promise<void> {
    const temp = path.join(this.#root, `${OWNER_FILE}.${this.#owner.instance}`)
    await writeFile(temp, JSON.stringify(this.#owner), { mode: 0o600 })
    await rename(temp, path.join(this.#root, OWNER_FILE))
  }

  /** A fresh, empty workspace that disappears on release. */
  async lease (): Promise<WorkspaceLease> {
    const name = `${this.#prefix}${randomUUID()}`
    const dir = path.join(this.#root, name)
    this.#busy.add(name)
    try {
      // Private, as the tenants' directory is: a command may leave a setuid program in it.
      await mkdir(dir, { mode: 0o700 })
    } catch (error) {
      this.#busy.delete(name)
      throw error
    }
    startUsage(dir)
    let released = false
    return {
      id: null,
      dir,
      release: async () => {
        if (released) return
        released = true
        forgetUsage(dir)
        await this.#removeOne(name)
        this.#busy.delete(name)
      },
    }
  }

  /**
   * A directory of the service's own under the ephemeral root (private to
   * this instance, hidden from every sandbox like the workspaces), made empty
   * and left alone by sweeps until the next start empties the root.
   */
  async serviceDir (name: string): Promise<string> {
    this.#busy.add(name)
    const dir = path.join(this.#root, name)
    await removeTree(dir).catch(() => {})
    await mkdir(dir, { mode: 0o700 })
    return dir
  }

  /** Removes this instance's workspaces that no lease holds (leftovers of failed removals), and says so if another instance has taken the root. */
  async sweep (): Promise<void> {
    const owner = await this.#readOwner().catch(() => this.#owner)
    if (owner === undefined) {
      // Removed or spoilt (by hand, by a cleaner of the temp directory): this instance's again.
      this.#log.warn({ dir: this.#root }, 'the record of the ephemeral root\'s owner was missing or unreadable; written again')
      await this.#writeOwner().catch(() => {})
    } else if (owner.instance !== this.#owner.instance && !this.#toldOfOther) {
      this.#toldOfOther = true
      this.#log.error({ dir: this.#root, owner }, 'another instance has taken workspaces.ephemeral_root (it emptied it as it started): give each instance its own')
    }
    await this.#remove((name) => name.startsWith(this.#prefix))
  }

  /** Removes the entries `chosen` names that no lease holds. */
  async #remove (chosen: (name: string) => boolean): Promise<void> {
    const names = await readdir(this.#root).catch(() => [] as string[])
    for (const name of names) {
      if (this.#busy.has(name) || !chosen(name)) continue
      this.#busy.add(name)
      await this.#removeOne(name)
      this.#busy.delete(name)
    }
  }

  async #readOwner (): Promise<Owner | undefined> {
    const text = await readTextIfPresent(path.join(this.#root, OWNER_FILE))
    try {
      const owner = JSON.parse(text ?? '') as Partial<Owner>
      if (typeof owner.host === 'string' && Number.isInteger(owner.pid) && typeof owner.startedAt === 'string' && typeof owner.instance === 'string') return owner as Owner
    } catch {}
    return undefined
  }

  /** Never by path: what ran there may have left symlinks, or be swapping them still. Failures wait for the next sweep. */
  async #removeOne (name: string): Promise<void> {
    await removeTree(path.join(this.#root, name)).catch((error: unknown) => {
      this.#log.error({ err: error, dir: path.join(this.#root, name) }, 'could not remove an ephemeral workspace yet; it is tried again on the next sweep')
    })
  }
}
