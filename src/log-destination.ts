/**
 * Where the service's log lines go: a file descriptor (stdout), written in
 * large batches off the event loop. pino's asynchronous destination
 * (sonic-boom) appends each line to one growing string, which V8 copies
 * whole on every line, so its batches must stay small, and every batch
 * costs a thread-pool round trip: together about 8 µs of each tool call's
 * completion line. Here lines are kept as they come and joined once per
 * batch.
 *
 * A batch goes out when 64 KiB wait, at least every 200 ms, and everything
 * at exit. When the descriptor stops taking lines (a stalled log pipe), at
 * most 16 MiB wait and later lines are dropped and counted, rather than
 * memory growing.
 */
import { write, writeSync } from 'node:fs'

export interface LogDestinationOptions {
  fd: number
  /** A batch is written once this many characters wait. */
  batchChars?: number
  /** Lines never wait longer than this. */
  flushMs?: number
  /** Beyond this many characters waiting (written or not), lines are dropped. */
  maxWaitingChars?: number
}

/** How long a full pipe (EAGAIN) is left before the write is tried again. */
const RETRY_MS = 10

export class LogDestination {
  readonly #fd: number
  readonly #batchChars: number
  readonly #maxWaitingChars: number
  #lines: string[] = []
  #queuedChars = 0
  #writingChars = 0
  #dropped = 0
  #flushCallbacks: Array<() => void> = []

  constructor (options: LogDestinationOptions) {
    this.#fd = options.fd
    this.#batchChars = options.batchChars ?? 64 * 1024
    this.#maxWaitingChars = options.maxWaitingChars ?? 16 * 1024 * 1024
    setInterval(() => { this.#writeBatch() }, options.flushMs ?? 200).unref()
    process.once('exit', () => { this.flushSync() })
  }

  /** Lines dropped because too many were waiting. */
  get dropped (): number { return this.#dropped }

  write (line: string): boolean {
    if (this.#queuedChars + this.#writingChars + line.length > this.#maxWaitingChars) {
      this.#dropped++
      return false
    }
    this.#lines.push(line)
    this.#queuedChars += line.length
    if (this.#queuedChars >= this.#batchChars) this.#writeBatch()
    return true
  }

  /** pino's `logger.flush(callback)`: the callback runs once every line written so far is out. */
  flush (callback?: (error?: Error) => void): void {
    if (callback) this.#flushCallbacks.push(callback)
    this.#writeBatch()
    this.#settleFlushes()
  }

  /** At exit: whatever waits, written now. */
  flushSync (): void {
    const text = this.#lines.join('')
    this.#lines = []
    this.#queuedChars = 0
    const data = Buffer.from(text)
    for (let offset = 0, attempts = 0; offset < data.length && attempts < 1000;) {
      try {
        offset += writeSync(this.#fd, data, offset)
      } catch (error) {
        // A full pipe is waited out a little; a closed one has lost these lines anyway.
        if ((error as NodeJS.ErrnoException).code !== 'EAGAIN') return
        attempts++
      }
    }
  }

  #writeBatch (): void {
    if (this.#writingChars > 0 || this.#lines.length === 0) return
    const text = this.#lines.join('')
    this.#lines = []
    this.#writingChars = this.#queuedChars
    this.#queuedChars = 0
    this.#writeOut(Buffer.from(text), 0)
  }

  #writeOut (data: Buffer, offset: number): void {
    write(this.#fd, data, offset, data.length - offset, null, (error, written) => {
      if (error?.code === 'EAGAIN') {
        setTimeout(() => { this.#writeOut(data, offset) }, RETRY_MS).unref()
        return
      }
      // Anything but a full pipe (stdout closed): the batch is lost, later lines are still tried.
      if (!error && offset + written < data.length) {
        this.#writeOut(data, offset + written)
        return
      }
      this.#writingChars = 0
      if (this.#queuedChars >= this.#batchChars || this.#flushCallbacks.length > 0) this.#writeBatch()
      this.#settleFlushes()
    })
  }

  #settleFlushes (): void {
    if (this.#writingChars > 0 || this.#lines.length > 0) return
    const callbacks = this.#flushCallbacks
    this.#flushCallbacks = []
    for (const callback of callbacks) callback()
  }
}
