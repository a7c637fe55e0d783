/**
 * Deleted workspaces on their way out.
 *
 * A deletion renames the workspace directory into `<root>/trash/<uuid>`: one
 * atomic step, so the id is free at once and a workspace made again with it
 * starts empty, whatever the old tree holds and however long removing it
 * takes. The tree is then removed from the trash, off the request path.
 * Whatever is still there (a removal that failed, or one a crash or restart
 * interrupted) is removed again by the next `empty()`: at start and on every
 * sweep, so nothing stays for ever.
 *
 * The trash sits beside the tenants' directories: on the same filesystem (a
 * rename cannot cross one) and, like the metadata, out of every tool's reach.
 * Instances sharing the root share the trash; two removing one tree at once
 * only find each other's entries gone.
 */
import { randomUUID } from 'node:crypto'
import { mkdir, readdir, rename } from 'node:fs/promises'
import path from 'node:path'
import type { Logger } from 'pino'
import { removeTree } from './remove-tree.ts'

/** Moves `dir` into the trash directory `trashDir`; false when there was no `dir`. */
export async function moveToTrash (dir: string, trashDir: string): Promise<boolean> {
  await mkdir(trashDir, { recursive: true, mode: 0o700 })
  try {
    await rename(dir, path.join(trashDir, randomUUID()))
    return true
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return false
    throw error
  }
}

export class WorkspaceTrash {
  readonly #dir: string
  readonly #log: Logger
  /** Removals under way here, by trash entry: another `empty()` waits for them instead of starting its own. */
  readonly #removing = new Map<string, Promise<void>>()

  constructor (dir: string, log: Logger) {
    this.#dir = dir
    this.#log = log
  }

  /**
   * Moves into the trash the entries of `dir` named `<start ms>-…` that
   * started more than `maxAgeMs` ago: staged uploads a crash or restart
   * abandoned. Never rejects.
   */
  async collectAbandoned (dir: string, maxAgeMs: number, now = Date.now()): Promise<void> {
    for (const name of await readdir(dir).catch(() => [] as string[])) {
      const started = Number.parseInt(name, 10)
      if (!Number.isFinite(started) || now - started < maxAgeMs) continue
      await moveToTrash(path.join(dir, name), this.#dir).catch((error: unknown) => {
        this.#log.warn({ err: error, entry: name }, 'could not move an abandoned upload to the trash')
      })
    }
  }

  /** Removes what is in the trash; what cannot be removed now is logged and left for the next time. Never rejects. */
  async empty (): Promise<void> {
    const names = await readdir(this.#dir).catch(() => [] as string[])
    for (const name of names) await (this.#removing.get(name) ?? this.#remove(name))
  }

  async #remove (name: string): Promise<void> {
    const removal = removeTree(path.join(this.#dir, name)).catch((error: unknown) => {
      this.#log.error({ err: error, entry: name }, 'could not remove a deleted workspace yet; it is tried again on the next sweep')
    }).finally(() => this.#removing.delete(name))
    this.#removing.set(name, removal)
    return removal
  }
}
