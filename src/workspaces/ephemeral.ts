/**
 * Ephemeral workspaces: a fresh, empty directory for a call or batch without
 * `workspace` (or an MCP session), removed when its lease is released. They
 * live under one root that belongs to this instance alone: it is emptied at
 * start, which forgets whatever a crash left behind, and `sweep` removes
 * again what a release could not (a command may still have been adding to
 * it), so nothing is left for ever.
 */
import { randomUUID } from 'node:crypto'
import { mkdir, readdir, realpath } from 'node:fs/promises'
import path from 'node:path'
import type { Logger } from 'pino'
import { removeTree } from './remove-tree.ts'
import { forgetUsage, startUsage } from './usage.ts'

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

  constructor (log: Logger) {
    this.#log = log
  }

  /** The canonical root (after `init`). */
  get root (): string {
    return this.#root
  }

  /** Makes `root` (emptied first) the home of this instance's ephemeral workspaces. */
  async init (root: string): Promise<void> {
    await mkdir(root, { recursive: true, mode: 0o700 })
    this.#root = await realpath(root)
    await this.sweep()
  }

  /** A fresh, empty workspace that disappears on release. */
  async lease (): Promise<WorkspaceLease> {
    const name = randomUUID()
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
        await this.#remove(name)
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

  /** Removes every workspace under the root that no lease holds (leftovers of failed removals, or of a crash). */
  async sweep (): Promise<void> {
    const names = await readdir(this.#root).catch(() => [] as string[])
    for (const name of names) {
      if (this.#busy.has(name)) continue
      this.#busy.add(name)
      await this.#remove(name)
      this.#busy.delete(name)
    }
  }

  /** Never by path: what ran there may have left symlinks, or be swapping them still. Failures wait for the next sweep. */
  async #remove (name: string): Promise<void> {
    await removeTree(path.join(this.#root, name)).catch((error: unknown) => {
      this.#log.error({ err: error, dir: path.join(this.#root, name) }, 'could not remove an ephemeral workspace yet; it is tried again on the next sweep')
    })
  }
}
