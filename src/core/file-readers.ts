/**
 * Small reads off the thread pool's round trips. Reading a file through
 * fs.promises takes four thread-pool round trips (open, fstat, read, close),
 * and each costs the event loop a thread wake-up and a completion; on a
 * virtual machine that is most of a small read's cost. A reader thread does
 * the four calls in one go and answers once, and under load the reads of a
 * turn of the event loop go out in one message and come back in one.
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

export interface ReadRequest {
  id: number
  /** Absolute path, opened without following a symlink at its last component. */
  path: string
  /** Read at most this many bytes from the start. */
  maxBytes: number
}

/** `text` comes only for a regular file with one name: the caller refuses anything else. */
export type ReadResult =
  | { opened: false }
  | { opened: true, errorCode: string }
  | { opened: true, kind: 'file' | 'directory' | 'other', nlink: number, text?: string }

export type ReadAnswer = ReadResult & { id: number }

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

class Reader {
  readonly #worker: Worker
  readonly #stalledMs: number
  readonly #pending = new Map<number, (answer: ReadResult) => void>()
  /** Requests of this turn of the event loop, sent together: one message (and one wake-up) for many reads. */
  #batch: ReadRequest[] = []
  #alive = true
  /** When it last answered, or took work while idle. */
  #progressAt = 0

  constructor (threadFile: string, stalledMs: number) {
    this.#stalledMs = stalledMs
    // A reader keeps little: a small young generation keeps its memory (and the cost of every fork of the service) small.
    this.#worker = new Worker(threadFile, { resourceLimits: { maxYoungGenerationSizeMb: 4 } })
    this.#worker.unref()
    this.#worker.on('message', (answers: ReadAnswer[]) => {
      this.#progressAt = performance.now()
      for (const answer of answers) this.#settle(answer.id, answer)
    })
    this.#worker.on('error', () => this.#fail())
    this.#worker.on('exit', () => this.#fail())
  }

  get alive (): boolean { return this.#alive }
  get waiting (): number { return this.#pending.size }
  stalled (now: number): boolean { return this.#pending.size > 0 && now - this.#progressAt > this.#stalledMs }

  read (request: ReadRequest): Promise<ReadResult> {
    if (!this.#alive) return Promise.resolve(NOT_OPENED)
    return new Promise((resolve) => {
      // A reader holds the process open only while someone waits for it.
      if (this.#pending.size === 0) {
        this.#worker.ref()
        this.#progressAt = performance.now()
      }
      this.#pending.set(request.id, resolve)
      if (this.#batch.push(request) === 1) setImmediate(this.#send)
    })
  }

  readonly #send = (): void => {
    const batch = this.#batch
    this.#batch = []
    if (this.#alive) this.#worker.postMessage(batch)
  }

  terminate (): Promise<number> {
    return this.#worker.terminate()
  }

  #settle (id: number, answer: ReadResult): void {
    const resolve = this.#pending.get(id)
    this.#pending.delete(id)
    if (this.#pending.size === 0) this.#worker.unref()
    resolve?.(answer)
  }

  /** A dead reader's waiting reads go the ordinary way. */
  #fail (): void {
    this.#alive = false
    for (const id of [...this.#pending.keys()]) this.#settle(id, NOT_OPENED)
  }
}

export class FileReaders {
  readonly #size: number
  readonly #stalledMs: number
  readonly #threadFile: string
  #readers: Reader[] = []
  #nextId = 0
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
    return chosen ? chosen.read({ id: this.#nextId++, path: absolute, maxBytes }) : Promise.resolve(NOT_OPENED)
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
