/**
 * How the service and a reader thread (file-readers.ts,
 * file-reader-thread.ts) pass reads: through one SharedArrayBuffer per
 * reader. The service writes a batch of requests into it and wakes the
 * thread with Atomics.notify; the thread writes the answers, file text
 * included, back into it and says so with a one-number message. Structured
 * clone of the requests and answers cost each read more than the reading did.
 *
 * One batch is in flight per reader, so the two sides never write the same
 * bytes at once. A text too large for the answer area travels in the
 * message instead (a 128 MiB read is rare, and a copy then is no cost).
 *
 * Requests:  u32 count, then per request: f64 maxBytes, u8 inline, u32 path bytes, the path (UTF-8).
 * Answers:   per request: i32 status, i32 nlink, i32 length, then `length` bytes
 *            (the text of a file, the code of an error).
 */
import type { FileKind } from './contained-fs.ts'

/** An answer's status (plain numbers: Node runs the thread's file with types stripped, which allows no enum). */
export const NOT_OPENED = 0
export const FAILED = 1
const KINDS: readonly FileKind[] = ['file', 'directory', 'other']
/** The status of an opened file of `kind`. */
export const STATUS_OF = { file: 2, directory: 3, other: 4 } as const

/** `text` comes only for a regular file with one name: the caller refuses anything else. */
export type ReadResult =
  | { opened: false }
  | { opened: true, errorCode: string }
  | { opened: true, kind: FileKind, nlink: number, text?: string }

/** `length` of an answer without bytes: no text (not a one-name regular file), or its text is in the message. */
export const NO_TEXT = -1
export const TEXT_IN_MESSAGE = -2

const CONTROL_BYTES = 64
const REQUEST_BYTES = 64 * 1024
const ANSWER_BYTES = 4 * 1024 * 1024
const REQUEST_HEADER = 13
export const ANSWER_HEADER = 12
/** Error codes are short (EACCES, EIO); a longer one is cut here. */
export const MAX_CODE_BYTES = 32
/** The Int32 the service bumps for each batch, which the thread waits on. */
export const SEQUENCE = 0

/** A request's answer fits in the answer area with room for others when its text is at most this long. */
const INLINE_MAX_BYTES = ANSWER_BYTES / 8

/** What a reader's shared memory holds, viewed by either side. */
export class Channel {
  readonly control: Int32Array
  readonly requests: Buffer
  readonly answers: Buffer

  readonly memory: SharedArrayBuffer

  constructor (memory = new SharedArrayBuffer(CONTROL_BYTES + REQUEST_BYTES + ANSWER_BYTES)) {
    this.memory = memory
    this.control = new Int32Array(memory, 0, CONTROL_BYTES / 4)
    this.requests = Buffer.from(memory, CONTROL_BYTES, REQUEST_BYTES)
    this.answers = Buffer.from(memory, CONTROL_BYTES + REQUEST_BYTES, ANSWER_BYTES)
  }
}

export interface Request {
  path: string
  maxBytes: number
}

/** The space a request takes: in the request area (its path), and in the answer area (at most). */
export function requestBytes (request: Request): number {
  return REQUEST_HEADER + Buffer.byteLength(request.path)
}

export function answerBytes (request: Request): number {
  return ANSWER_HEADER + (isInline(request) ? Math.max(request.maxBytes, MAX_CODE_BYTES) : MAX_CODE_BYTES)
}

function isInline (request: Request): boolean {
  return request.maxBytes <= INLINE_MAX_BYTES
}

/** Whether a batch of requests taking these totals can be sent at once. */
export function fits (totalRequestBytes: number, totalAnswerBytes: number): boolean {
  return totalRequestBytes + 4 <= REQUEST_BYTES && totalAnswerBytes <= ANSWER_BYTES
}

/** Writes a batch into the request area (the caller checked that it `fits`). */
export function writeRequests (channel: Channel, batch: readonly Request[]): void {
  const area = channel.requests
  area.writeUInt32LE(batch.length, 0)
  let at = 4
  for (const request of batch) {
    area.writeDoubleLE(request.maxBytes, at)
    area[at + 8] = isInline(request) ? 1 : 0
    const pathBytes = area.write(request.path, at + REQUEST_HEADER, 'utf8')
    area.writeUInt32LE(pathBytes, at + 9)
    at += REQUEST_HEADER + pathBytes
  }
}

/** Calls `each` for every request of the batch in the request area, in order. */
export function forEachRequest (channel: Channel, each: (path: string, maxBytes: number, inline: boolean) => void): void {
  const area = channel.requests
  const count = area.readUInt32LE(0)
  let at = 4
  for (let i = 0; i < count; i++) {
    const maxBytes = area.readDoubleLE(at)
    const inline = area[at + 8] === 1
    const pathBytes = area.readUInt32LE(at + 9)
    const path = area.toString('utf8', at + REQUEST_HEADER, at + REQUEST_HEADER + pathBytes)
    at += REQUEST_HEADER + pathBytes
    each(path, maxBytes, inline)
  }
}

/** Writes an answer's header at `at`; answers where the next one starts. */
export function writeAnswerHeader (channel: Channel, at: number, status: number, nlink: number, length: number): number {
  channel.answers.writeInt32LE(status, at)
  channel.answers.writeInt32LE(nlink, at + 4)
  channel.answers.writeInt32LE(length, at + 8)
  return at + ANSWER_HEADER + Math.max(length, 0)
}

/** The answers to `count` requests, in order; `inMessage` holds the texts that came in the message. */
export function readAnswers (channel: Channel, count: number, inMessage: readonly string[]): ReadResult[] {
  const area = channel.answers
  const results: ReadResult[] = []
  let at = 0
  let nextInMessage = 0
  for (let i = 0; i < count; i++) {
    const status = area.readInt32LE(at)
    const nlink = area.readInt32LE(at + 4)
    const length = area.readInt32LE(at + 8)
    const start = at + ANSWER_HEADER
    at = start + Math.max(length, 0)
    if (status === NOT_OPENED) results.push({ opened: false })
    else if (status === FAILED) results.push({ opened: true, errorCode: area.toString('latin1', start, at) })
    else {
      const kind = KINDS[status - STATUS_OF.file] ?? 'other'
      if (length >= 0) results.push({ opened: true, kind, nlink, text: area.toString('utf8', start, at) })
      else if (length === TEXT_IN_MESSAGE) results.push({ opened: true, kind, nlink, text: inMessage[nextInMessage++] ?? '' })
      else results.push({ opened: true, kind, nlink })
    }
  }
  return results
}
