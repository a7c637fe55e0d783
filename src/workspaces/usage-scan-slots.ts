/**
 * The slots the usage scans (usage.ts) run in: a few at once per instance,
 * shared by turns between tenants.
 */
import path from 'node:path'

/** Scans under way at once in this instance; more wait for a slot. */
const MAX_CONCURRENT_SCANS = 2
/** How long a scan keeps its slot while other scans wait, before it lets them go first. */
const SCAN_TURN_MS = 50

/** Awaited by a walk before it lists each directory: where a scan gives its slot to others for a turn. */
export type ScanPause = () => Promise<void>

interface ScanWaiter {
  owner: string
  /** Its slot is granted (counted as its owner's already). */
  go: () => void
}

/**
 * The scan slots, shared by turns. A walk of a huge workspace takes
 * seconds: held whole, two of them would make every other workspace's
 * scan, and the write waiting for it, wait that long. So a scan that has
 * held its slot for SCAN_TURN_MS while others wait gives it up between two
 * directories and waits for its next turn. A slot given up goes to the
 * waiting scan whose owner holds the fewest slots, the longest waiting of
 * them: one tenant's walks delay another tenant's scan by a turn, however
 * many of them there are.
 */
class ScanSlots {
  #free: number
  readonly #waiting: ScanWaiter[] = []
  /** Slots held, by owner. */
  readonly #held = new Map<string, number>()

  constructor (slots: number) {
    this.#free = slots
  }

  async run<T> (owner: string, task: (pause: ScanPause) => Promise<T>): Promise<T> {
    await this.#take(owner)
    let turnBegan = performance.now()
    const pause: ScanPause = async () => {
      if (this.#waiting.length === 0 || performance.now() - turnBegan < SCAN_TURN_MS) return
      this.#give(owner)
      await this.#take(owner)
      turnBegan = performance.now()
    }
    try {
      return await task(pause)
    } finally {
      this.#give(owner)
    }
  }

  async #take (owner: string): Promise<void> {
    if (this.#free > 0) {
      this.#free--
      this.#count(owner, 1)
      return
    }
    await new Promise<void>((resolve) => this.#waiting.push({ owner, go: resolve }))
  }

  #give (owner: string): void {
    // Chosen while the slot still counts as its owner's: another owner's scan holding as few goes first.
    let next: ScanWaiter | undefined
    let fewest = Infinity
    for (const waiter of this.#waiting) {
      const held = this.#held.get(waiter.owner) ?? 0
      if (held < fewest) {
        next = waiter
        fewest = held
      }
    }
    this.#count(owner, -1)
    if (!next) {
      this.#free++
      return
    }
    this.#waiting.splice(this.#waiting.indexOf(next), 1)
    this.#count(next.owner, 1)
    next.go()
  }

  #count (owner: string, change: number): void {
    const held = (this.#held.get(owner) ?? 0) + change
    if (held === 0) this.#held.delete(owner)
    else this.#held.set(owner, held)
  }
}

const slots = new ScanSlots(MAX_CONCURRENT_SCANS)

/**
 * Runs the scan of the workspace at `dir` in a slot, by turns. Its owner
 * is the directory that holds the workspace, which a tenant's persistent
 * workspaces share; the ephemeral workspaces of every tenant share theirs,
 * and so take turns among themselves in the order they came.
 */
export function runScan<T> (dir: string, scan: (pause: ScanPause) => Promise<T>): Promise<T> {
  return slots.run(path.dirname(dir), scan)
}
