/**
 * Small reads off the thread pool's round trips. Reading a file through
 * fs.promises takes four thread-pool round trips (open, fstat, read, close),
 * and each costs the event loop a thread wake-up and a completion; on a
 * virtual machine that is most of a small read's cost. A reader thread does
 * the four calls in one go and answers once, and under load the reads of a
 * turn of the event loop go out together. Requests and texts pass through
 * memory shared with the thread (file-reader-channel.ts), not messages.
 * Like the thread pool, the readers block only themselves: a stuck read (a
 * hung network filesystem) holds one reader, and new reads go to the reader
 * with the fewest waiting.
 *
 * Anything unusual is the caller's to handle the ordinary way: a failed
 * open, or a reader that died, answers `opened: false`.
 */
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { Worker } from 'node:worker_threads'
import { answerBytes, Channel, fits, type ReadResult, readAnswers, type Request, requestBytes, SEQUENCE, writeRequests } from './file-reader-channel.ts'

export type { ReadResult } from './file-reader-channel.ts'

const THREAD_FILE = fileURLToPath(new URL(`./file-reader-thread${path.extname(fileURLToPath(import.meta.url))}`, import.meta.url))
const NOT_OPENED: ReadResult = { opened: false }
/** A reader with work that has answered nothing for this long is stalled (a hung filesystem): new reads avoid it. */
const STALLED_MS = 500
/** After a reader could not start or died, no new one for this long: a broken thread file must not cost a start per read. */
const RESTART_BACKOFF_MS = 1000

export interface FileReadersOptions {
  /** Reader threads (default 2). */
  size?: number
  /** See STALLED_MS (tests shorten it). */
  stalledMs?: number
  /** The thread's code (tests give a broken one). */
  threadFile?: string
}

interface Waiting extends Request {
  resolve: (result: ReadResult) => void
  /** Its room in the request and answer areas, measured once. */
  requestBytes: number
  answerBytes: number
}

class Reader {
  readonly #worker: Worker
  readonly #channel = new Channel()
  readonly #stalledMs: number
  /** Reads not sent yet: they go in the next batch, once the thread has answered the one in flight. */
  #queue: Waiting[] = []
  #inFlight: Waiting[] = []
  #sendScheduled = false
  #alive = true
  /** When it last answered, or took work while idle. */
  #progressAt = 0

  constructor (threadFile: string, stalledMs: number) {
    this.#stalledMs = stalledMs
    // A reader keeps little: a small young generation keeps its memory (and the cost of every fork of the service) small.
    this.#worker = new Worker(threadFile, { workerData: { memory: this.#channel.memory }, resourceLimits: { maxYoungGenerationSizeMb: 4 } })
    this.#worker.unref()
    this.#worker.on('message', (inMessage: string[] | 0) => this.#answered(inMessage === 0 ? [] : inMessage))
    this.#worker.on('error', () => this.#fail())
    this.#worker.on('exit', () => this.#fail())
  }

  get alive (): boolean { return this.#alive }
  get waiting (): number { return this.#queue.length + this.#inFlight.length }
  stalled (now: number): boolean { return this.waiting > 0 && now - this.#progressAt > this.#stalledMs }

  read (request: Request): Promise<ReadResult> {
    if (!this.#alive) return Promise.resolve(NOT_OPENED)
    const sizes = { requestBytes: requestBytes(request), answerBytes: answerBytes(request) }
    // A path too long for the request area is left to the ordinary path.
    if (!fits(sizes.requestBytes, sizes.answerBytes)) return Promise.resolve(NOT_OPENED)
    return new Promise((resolve) => {
      // A reader holds the process open only while someone waits for it.
      if (this.waiting === 0) {
        this.#worker.ref()
        this.#progressAt = performance.now()
      }
      this.#queue.push({ ...request, ...sizes, resolve })
      // The reads of this turn of the event loop go together: one wake-up for many reads.
      if (this.#inFlight.length === 0 && !this.#sendScheduled) {
        this.#sendScheduled = true
        setImmediate(this.#send)
      }
    })
  }

  terminate (): Promise<number> {
    return this.#worker.terminate()
  }

  /** Sends as many waiting reads as the channel holds, as one batch. */
  readonly #send = (): void => {
    this.#sendScheduled = false
    if (!this.#alive || this.#inFlight.length > 0 || this.#queue.length === 0) return
    let requestTotal = 0
    let answerTotal = 0
    let count = 0
    for (const request of this.#queue) {
      requestTotal += request.requestBytes
      answerTotal += request.answerBytes
      if (!fits(requestTotal, answerTotal)) break
      count++
    }
    this.#inFlight = this.#queue.slice(0, count)
    this.#queue = this.#queue.slice(count)
    writeRequests(this.#channel, this.#inFlight)
    Atomics.add(this.#channel.control, SEQUENCE, 1)
    Atomics.notify(this.#channel.control, SEQUENCE)
  }

  #answered (inMessage: readonly string[]): void {
    this.#progressAt = performance.now()
    const batch = this.#inFlight
    this.#inFlight = []
    const results = readAnswers(this.#channel, batch.length, inMessage)
    // The next batch first: the thread can work on it while these answers are handled.
    this.#send()
    if (this.waiting === 0) this.#worker.unref()
    for (let i = 0; i < batch.length; i++) batch[i]?.resolve(results[i] ?? NOT_OPENED)
  }

  /** A dead reader's waiting reads go the ordinary way. */
  #fail (): void {
    this.#alive = false
    const waiting = [...this.#inFlight, ...this.#queue]
    this.#inFlight = []
    this.#queue = []
    for (const read of waiting) read.resolve(NOT_OPENED)
  }
}

export class FileReaders {
  readonly #size: number
  readonly #stalledMs: number
  readonly #threadFile: string
  #readers: Reader[] = []
  #failedAt = Number.NEGATIVE_INFINITY

  constructor (options: FileReadersOptions = {}) {
    this.#size = options.size ?? 2
    this.#stalledMs = options.stalledMs ?? STALLED_MS
    this.#threadFile = options.threadFile ?? THREAD_FILE
  }

  /** Starts the threads ahead of the first read (a thread takes some milliseconds to start). */
  warm (): void {
    this.#live()
  }

  /**
   * The first `maxBytes` of the file at `absolute`, decoded as UTF-8, once it
   * is known to be a readable regular file: from the reader with the fewest
   * waiting that is not stalled. With none (all stalled, or none could
   * start), `opened: false` at once, and the caller reads the ordinary way.
   */
  read (absolute: string, maxBytes: number): Promise<ReadResult> {
    const now = performance.now()
    let chosen: Reader | undefined
    for (const reader of this.#live()) {
      if (!reader.stalled(now) && (chosen === undefined || reader.waiting < chosen.waiting)) chosen = reader
    }
    return chosen ? chosen.read({ path: absolute, maxBytes }) : Promise.resolve(NOT_OPENED)
  }

  async close (): Promise<void> {
    const readers = this.#readers
    this.#readers = []
    await Promise.all(readers.map((reader) => reader.terminate()))
  }

  #live (): Reader[] {
    if (this.#readers.length < this.#size || this.#readers.some((reader) => !reader.alive)) {
      const before = this.#readers.length
      this.#readers = this.#readers.filter((reader) => reader.alive)
      if (this.#readers.length < before) this.#failedAt = performance.now()
      if (performance.now() - this.#failedAt >= RESTART_BACKOFF_MS) this.#start()
    }
    return this.#readers
  }

  #start (): void {
    try {
      while (this.#readers.length < this.#size) this.#readers.push(new Reader(this.#threadFile, this.#stalledMs))
    } catch {
      // No thread could be made (ERR_WORKER_INIT_FAILED): reads go the ordinary way for a while.
      this.#failedAt = performance.now()
    }
  }
}

/** The process's readers, shared by every app it builds. */
export const fileReaders = new FileReaders()
