/**
 * Ephemeral workspaces: a fresh, empty directory for a call or batch without
 * `workspace` (or an MCP session), removed when its lease is released. They
 * live under one root that belongs to this instance alone: it is emptied at
 * start, which forgets whatever a crash left behind.
 */
import { randomUUID } from 'node:crypto'
import { mkdir, realpath, rm } from 'node:fs/promises'
import path from 'node:path'
import type { Logger } from 'pino'
import { removeTree } from './remove-tree.ts'

/** A workspace held by a running call; `release` once the call is done. */
export interface WorkspaceLease {
  id: string | null
  dir: string
  release: () => Promise<void>
}

export class EphemeralWorkspaces {
  readonly #log: Logger
  #root = ''

  constructor (log: Logger) {
    this.#log = log
  }

  /** The canonical root (after `init`). */
  get root (): string {
    return this.#root
  }

  /** Makes `root` (emptied first) the home of this instance's ephemeral workspaces. */
  async init (root: string): Promise<void> {
    await rm(root, { recursive: true, force: true })
    await mkdir(root, { recursive: true, mode: 0o700 })
    this.#root = await realpath(root)
  }

  /** A fresh, empty workspace that disappears on release. */
  async lease (): Promise<WorkspaceLease> {
    const dir = path.join(this.#root, randomUUID())
    await mkdir(dir)
    let released = false
    return {
      id: null,
      dir,
      release: async () => {
        if (released) return
        released = true
        // Never by path: what ran there may have left symlinks, or be swapping them still.
        await removeTree(dir).catch((error: unknown) => {
          this.#log.error({ err: error, dir }, 'could not remove an ephemeral workspace')
        })
      },
    }
  }
}
