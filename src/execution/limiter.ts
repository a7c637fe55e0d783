/**
 * A concurrency limiter: at most `maxConcurrent` holders, a bounded queue of
 * waiters, and a maximum queue wait. Beyond those, `acquire` rejects with a
 * ToolError (Overloaded by default; spawn's own limit uses ExecutionFailed).
 *
 * Fair between owners (tenants): a slot given back goes to the waiter whose
 * owner holds the fewest slots (the longest waiting of them first), and a full
 * queue makes room for a newcomer by refusing the newest waiter of the owner
 * with the most queued, when that owner has more queued than the newcomer's.
 * One owner alone (or none) is served first come, first served.
 */
import { abortReason, type ErrorCode, ToolError } from '../errors.ts'

export interface LimiterOptions {
  name: string
  maxConcurrent: number
  maxQueue: number
  queueTimeoutMs: number
  /** The code of the rejection (Overloaded for the service limiter). */
  rejectCode?: ErrorCode
}

export type Release = () => void

interface Waiter {
  owner: string | undefined
  /** When its queue wait runs out (performance.now() milliseconds). */
  deadline: number
  grant: (release: Release) => void
  fail: (error: ToolError) => void
}

export class Limiter {
  readonly options: Required<LimiterOptions>
  #running = 0
  /** Arrival order: the head waited longest (its deadline is the nearest). */
  readonly #queue: Waiter[] = []
  /** Slots held, by owner. */
  readonly #held = new Map<string, number>()
  #closed = false
  /** One timer for the whole queue, due at its head's deadline (see #expire). */
  #timer: NodeJS.Timeout | undefined

  constructor (options: LimiterOptions) {
    this.options = { rejectCode: 'Overloaded', ...options }
  }

  get inFlight (): number {
    return this.#running
  }

  get queued (): number {
    return this.#queue.length
  }

  /** Waits for a slot for `owner`; resolves to the function that gives it back (call it once). */
  acquire (signal?: AbortSignal, owner?: string): Promise<Release> {
    if (this.#closed) return Promise.reject(this.#rejection('the service is shutting down'))
    // Cancelled already (its client gone, its token revoked on the way here): no 'abort' will come to end a wait.
    if (signal?.aborted) return Promise.reject(abortReason(signal) ?? new ToolError('ExecutionFailed', 'the call was cancelled'))
    if (this.#running < this.options.maxConcurrent) {
      this.#running++
      return Promise.resolve(this.#releaser(owner))
    }
    if (this.#queue.length >= this.options.maxQueue) {
      const crowding = this.#crowding(owner)
      if (crowding === undefined) return Promise.reject(this.#rejection(this.#fullMessage()))
      crowding.fail(this.#rejection(this.#fullMessage()))
    }
    return this.#wait(signal, owner)
  }

  /** The newest waiter of the owner with the most queued, when that owner has more than one more queued than `owner`. */
  #crowding (owner: string | undefined): Waiter | undefined {
    const queued = new Map<string | undefined, number>()
    for (const waiter of this.#queue) queued.set(waiter.owner, (queued.get(waiter.owner) ?? 0) + 1)
    let most: string | undefined
    let mostQueued = 0
    for (const [each, count] of queued) {
      if (count > mostQueued) {
        most = each
        mostQueued = count
      }
    }
    // Refused, that owner still has as many queued as the newcomer's will.
    if (mostQueued <= (queued.get(owner) ?? 0) + 1) return undefined
    return this.#queue.findLast((waiter) => waiter.owner === most)
  }

  /** Refuses every queued and future request (shutdown); holders finish normally. */
  close (): void {
    this.#closed = true
    for (const waiter of this.#queue.splice(0)) waiter.fail(this.#rejection('the service is shutting down'))
  }

  #wait (signal: AbortSignal | undefined, owner: string | undefined): Promise<Release> {
    return new Promise<Release>((resolve, reject) => {
      const cleanup = (): void => {
        signal?.removeEventListener('abort', onAbort)
        const index = this.#queue.indexOf(waiter)
        if (index >= 0) this.#queue.splice(index, 1)
        if (this.#queue.length === 0) this.#disarm()
      }
      const waiter: Waiter = {
        owner,
        deadline: performance.now() + this.options.queueTimeoutMs,
        grant: (release) => { cleanup(); resolve(release) },
        fail: (error) => { cleanup(); reject(error) },
      }
      const onAbort = (): void => waiter.fail(abortReason(signal) ?? new ToolError('ExecutionFailed', 'the call was cancelled while queued'))
      signal?.addEventListener('abort', onAbort, { once: true })
      this.#queue.push(waiter)
      this.#arm()
    })
  }

  /**
   * Every waiter waits as long, and the queue is FIFO, so the head always
   * has the nearest deadline: one timer serves the whole queue instead of a
   * timer per waiter (set and cleared on every busy call).
   */
  #arm (): void {
    const head = this.#queue[0]
    if (this.#timer !== undefined || head === undefined) return
    this.#timer = setTimeout(() => this.#expire(), Math.max(0, head.deadline - performance.now()))
  }

  #disarm (): void {
    clearTimeout(this.#timer)
    this.#timer = undefined
  }

  /** Fails the waiters whose wait has run out, then waits for the next one's deadline. */
  #expire (): void {
    this.#timer = undefined
    // Timers may fire a fraction of a millisecond early.
    const now = performance.now() + 1
    for (let head = this.#queue[0]; head !== undefined && head.deadline <= now; head = this.#queue[0]) {
      head.fail(this.#rejection(`waited ${this.options.queueTimeoutMs} ms in the ${this.options.name} queue without getting a slot`))
    }
    this.#arm()
  }

  #releaser (owner: string | undefined): Release {
    if (owner !== undefined) this.#held.set(owner, (this.#held.get(owner) ?? 0) + 1)
    let released = false
    return () => {
      if (released) return
      released = true
      // Chosen while the slot still counts as its owner's: another owner's waiter holding as few goes first.
      const next = this.#next()
      if (owner !== undefined) {
        const held = (this.#held.get(owner) ?? 1) - 1
        if (held === 0) this.#held.delete(owner)
        else this.#held.set(owner, held)
      }
      // The slot passes straight to the next waiter: #running stays the same.
      if (next) next.grant(this.#releaser(next.owner))
      else this.#running--
    }
  }

  /** The waiter whose owner holds the fewest slots, the longest waiting of them. */
  #next (): Waiter | undefined {
    let chosen: Waiter | undefined
    let fewest = Infinity
    for (const waiter of this.#queue) {
      const held = waiter.owner === undefined ? 0 : this.#held.get(waiter.owner) ?? 0
      if (held < fewest) {
        chosen = waiter
        fewest = held
        if (held === 0) break
      }
    }
    return chosen
  }

  #fullMessage (): string {
    const { name, maxConcurrent, maxQueue } = this.options
    return maxQueue === 0
      ? `${name} concurrency limit of ${maxConcurrent} reached`
      : `${name} concurrency limit of ${maxConcurrent} reached and its queue of ${maxQueue} is full`
  }

  #rejection (message: string): ToolError {
    const retryAfterSeconds = this.options.rejectCode === 'Overloaded'
      ? Math.max(1, Math.ceil(this.options.queueTimeoutMs / 1000))
      : undefined
    return new ToolError(this.options.rejectCode, message, retryAfterSeconds === undefined ? {} : { retryAfterSeconds })
  }
}

/** `run` over every item, at most `width` at a time, results in item order. */
export async function mapWithConcurrency<T, R> (items: readonly T[], width: number, run: (item: T, index: number) => Promise<R>): Promise<R[]> {
  const results = new Array<R>(items.length)
  let next = 0
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const index = next++
      results[index] = await run(items[index] as T, index)
    }
  }
  await Promise.all(Array.from({ length: Math.min(width, items.length) }, worker))
  return results
}
