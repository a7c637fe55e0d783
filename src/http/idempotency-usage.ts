/**
 * What each tenant's idempotency records hold, by tenant directory, so that
 * what a tenant may make the service keep is bounded without a request ever
 * listing a directory: the bytes the last sweep counted and this instance
 * has stored since, and the bytes set aside for the answers of claims still
 * running. A sweep adds what this instance stored while it walked (counted
 * once more rather than lost).
 */
export class RecordBytes {
  readonly #counted = new Map<string, number>()
  /** All this instance has written, ever: what a sweep adds for the writes made while it walked. */
  readonly #written = new Map<string, number>()
  readonly #reserved = new Map<string, number>()

  /** The bytes counted in `dir`, with what claims have set aside there. */
  of (dir: string): number {
    return (this.#counted.get(dir) ?? 0) + (this.#reserved.get(dir) ?? 0)
  }

  /** Sets `bytes` aside in `dir` (negative: gives them back). */
  reserve (dir: string, bytes: number): void {
    add(this.#reserved, dir, bytes)
  }

  /** A record of `bytes` was written in `dir`. */
  stored (dir: string, bytes: number): void {
    add(this.#counted, dir, bytes)
    add(this.#written, dir, bytes)
  }

  /** A sweep begins walking `dir`: the mark to give `recount` when it has. */
  mark (dir: string): number {
    return this.#written.get(dir) ?? 0
  }

  /** A sweep found `kept` bytes in `dir`, having begun at `mark`. */
  recount (dir: string, kept: number, mark: number): void {
    this.#counted.set(dir, kept + this.mark(dir) - mark)
  }
}

function add (counts: Map<string, number>, key: string, bytes: number): void {
  counts.set(key, (counts.get(key) ?? 0) + bytes)
}
