/**
 * Proof that the events of a change have all arrived, before a WatchedTree
 * catches up with them.
 *
 * Every watch of this process shares one inotify descriptor, whose events
 * the kernel queues in order (usage-inotify.ts). So once the event of a
 * marker file made after a call ended has come back, every event of that
 * call has too.
 */
import { type FSWatcher, mkdtempSync, rmSync, watch } from 'node:fs'
import { unlink, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { countEvent } from './usage-inotify.ts'

/** How long a marker's event may take before the events are taken as lost (the caller then lists everything). */
const MARKER_TIMEOUT_MS = 2_000

class Markers {
  #dir: string | undefined
  #watcher: FSWatcher | undefined
  #next = 0
  readonly #waiting = new Map<string, () => void>()

  async delivered (): Promise<boolean> {
    try {
      this.#open()
    } catch {
      return false
    }
    const name = `m${this.#next++}`
    const file = path.join(this.#dir as string, name)
    let timer: NodeJS.Timeout | undefined
    const arrived = new Promise<boolean>((resolve) => {
      this.#waiting.set(name, () => resolve(true))
      timer = setTimeout(() => resolve(false), MARKER_TIMEOUT_MS)
    })
    try {
      await writeFile(file, '')
      return await arrived
    } catch {
      return false
    } finally {
      clearTimeout(timer)
      this.#waiting.delete(name)
      // Not awaited: the answer is known, and the marker's removal holds nothing up.
      unlink(file).catch(() => {})
    }
  }

  #open (): void {
    if (this.#watcher) return
    const dir = mkdtempSync(path.join(os.tmpdir(), 'toolport-usage-markers-'))
    try {
      this.#watcher = watch(dir, { persistent: false }, (_event, name) => {
        countEvent()
        if (name !== null) this.#waiting.get(name)?.()
      })
    } catch (error) {
      rmSync(dir, { recursive: true, force: true })
      throw error
    }
    this.#watcher.on('error', () => {
      this.#watcher?.close()
      this.#watcher = undefined
    })
    this.#dir = dir
    process.once('exit', () => rmSync(dir, { recursive: true, force: true }))
  }
}

const markers = new Markers()

/**
 * Resolves true once every event of a change made before the call has been
 * delivered (a marker made now has come back); false when the marker did
 * not arrive in time or could not be made.
 */
export async function eventsDelivered (): Promise<boolean> {
  return await markers.delivered()
}
