/**
 * A process's output: stdout and stderr in arrival order as one stream of
 * bytes, of which the last `capacity` are kept in one circular buffer (it
 * grows with the output up to `capacity`, so a quiet process holds little).
 * The cursor is the count of bytes produced; what lies before the oldest
 * byte kept is reported as dropped.
 *
 * Each stream's bytes come in whole UTF-8 characters (`append` holds back a
 * character cut between two writes until the rest comes, or the stream
 * ends), so a chunk never splits one; a read cut by `maxBytes` ends on a
 * character boundary too. Bytes that are not UTF-8 are kept as they came
 * and read as U+FFFD.
 */
import { completeUtf8Length } from '../sandbox/capture.ts'

export type StreamName = 'stdout' | 'stderr'

export interface OutputChunk {
  stream: StreamName
  /** The cursor at the chunk's first byte. */
  offset: number
  data: string
}

export interface OutputRead {
  chunks: OutputChunk[]
  /** The cursor to read from next. */
  next: number
  /** Bytes after the cursor asked for that are no longer kept. */
  dropped: number
}

const INITIAL_BYTES = 4096

const isContinuation = (byte: number): boolean => (byte & 0xc0) === 0x80
/** A UTF-8 character is a lead byte and at most three continuation bytes. */
const MAX_CONTINUATION_BYTES = 3

/**
 * The well-formed sequence a lead byte starts (Unicode's table 3-7): its
 * length and the range of its second byte, which rules out overlong forms,
 * surrogates and code points past U+10FFFF; undefined for a byte that
 * starts none (it decodes alone, as U+FFFD).
 */
function sequenceOf (lead: number): { length: number, low: number, high: number } | undefined {
  if (lead >= 0xc2 && lead <= 0xdf) return { length: 2, low: 0x80, high: 0xbf }
  if (lead === 0xe0) return { length: 3, low: 0xa0, high: 0xbf }
  if (lead === 0xed) return { length: 3, low: 0x80, high: 0x9f }
  if (lead >= 0xe1 && lead <= 0xef) return { length: 3, low: 0x80, high: 0xbf }
  if (lead === 0xf0) return { length: 4, low: 0x90, high: 0xbf }
  if (lead >= 0xf1 && lead <= 0xf3) return { length: 4, low: 0x80, high: 0xbf }
  if (lead === 0xf4) return { length: 4, low: 0x80, high: 0x8f }
  return undefined
}

export class OutputRing {
  readonly #capacity: number
  #buffer: Buffer
  /** The cursor of the oldest byte kept. */
  #start = 0
  /** The cursor after the newest byte: all bytes produced. */
  #end = 0
  /** Where each run of one stream starts (cursor), oldest first; the first may start before #start. */
  #runs: Array<{ at: number, stream: StreamName }> = []
  /** A character's first bytes, per stream, waiting for the rest. */
  readonly #pending: Record<StreamName, Buffer | undefined> = { stdout: undefined, stderr: undefined }

  constructor (capacity: number) {
    this.#capacity = capacity
    this.#buffer = Buffer.alloc(Math.min(capacity, INITIAL_BYTES))
  }

  /** All bytes produced so far (the cursor after the newest). */
  get end (): number {
    return this.#end
  }

  /** The cursor of the oldest byte kept. */
  get start (): number {
    return this.#start
  }

  /** The memory its buffer takes. */
  get heldBytes (): number {
    return this.#buffer.length
  }

  /** Adds what a stream wrote; an incomplete character at its end waits for the next write. */
  append (stream: StreamName, bytes: Buffer): void {
    const held = this.#pending[stream]
    const whole = held ? Buffer.concat([held, bytes]) : bytes
    const complete = completeUtf8Length(whole)
    this.#pending[stream] = complete < whole.length ? Buffer.from(whole.subarray(complete)) : undefined
    if (complete > 0) this.#store(stream, whole.subarray(0, complete))
  }

  /** The stream ended: a character it left incomplete is kept as it is (it reads as U+FFFD). */
  endStream (stream: StreamName): void {
    const held = this.#pending[stream]
    this.#pending[stream] = undefined
    if (held) this.#store(stream, held)
  }

  /**
   * What came after cursor `after`, as chunks whose data (UTF-8, where a byte
   * that is not becomes U+FFFD, three bytes) is at most `maxBytes` long, and at
   * least one whole character when any is due.
   */
  read (after: number, maxBytes: number): OutputRead {
    // A cursor past what there is stays where it was asked for (`next` only grows): the bytes before it were not asked for.
    if (after > this.#end) return { chunks: [], next: after, dropped: 0 }
    const from = Math.max(Math.min(after, this.#end), this.#start)
    const dropped = from - Math.min(after, this.#end)
    // Bytes that are not UTF-8 take more room decoded: read fewer, in proportion, until the data fits.
    let budget = Math.max(1, maxBytes)
    let read: OutputRead | undefined
    for (;;) {
      const to = this.#boundaryBefore(from, Math.min(this.#end, from + budget))
      // No shorter cut is left (one character, larger decoded than maxBytes): it goes as it is.
      if (read !== undefined && to >= read.next) return read
      const chunks = this.#chunks(from, to)
      read = { chunks, next: to, dropped }
      const size = chunks.reduce((sum, chunk) => sum + Buffer.byteLength(chunk.data), 0)
      if (size <= maxBytes) return read
      budget = Math.max(1, Math.floor((to - from) * maxBytes / size))
    }
  }

  /**
   * `to` moved back to the start of a character it would cut, unless that
   * leaves nothing after `from`: then `to` is past the first character.
   */
  #boundaryBefore (from: number, to: number): number {
    if (to >= this.#end) return this.#end
    for (let back = 1; back <= MAX_CONTINUATION_BYTES && to - back >= from; back++) {
      const start = to - back
      if (isContinuation(this.#byteAt(start))) continue
      // The nearest byte that is not a continuation: `to` cuts the character it starts only if that runs past `to`.
      const cut = this.#characterLength(start) > back ? start : to
      return cut > from ? cut : from + this.#characterLength(from)
    }
    return to
  }

  /**
   * The bytes of the character at `cursor` as a decoder reads it: a lead
   * byte and the continuation bytes it announces when they all follow, else
   * one byte (read as U+FFFD).
   */
  #characterLength (cursor: number): number {
    const shape = sequenceOf(this.#byteAt(cursor))
    if (shape === undefined || cursor + shape.length > this.#end) return 1
    const second = this.#byteAt(cursor + 1)
    if (second < shape.low || second > shape.high) return 1
    for (let i = 2; i < shape.length; i++) {
      if (!isContinuation(this.#byteAt(cursor + i))) return 1
    }
    return shape.length
  }

  /** The kept bytes between two cursors, one chunk per run of one stream. */
  #chunks (from: number, to: number): OutputChunk[] {
    const chunks: OutputChunk[] = []
    for (let i = this.#runIndexAt(from), at = from; at < to; i++) {
      const run = this.#runs[i] as { at: number, stream: StreamName }
      const runEnd = Math.min(to, this.#runs[i + 1]?.at ?? this.#end)
      chunks.push({ stream: run.stream, offset: at, data: this.#slice(at, runEnd).toString('utf8') })
      at = runEnd
    }
    return chunks
  }

  #store (stream: StreamName, bytes: Buffer): void {
    if (this.#runs.at(-1)?.stream !== stream) this.#runs.push({ at: this.#end, stream })
    const startBefore = this.#start
    let kept = bytes
    if (bytes.length >= this.#capacity) {
      // Only the last `capacity` bytes of a write this large can stay: the ring starts afresh with them.
      if (this.#buffer.length < this.#capacity) this.#buffer = Buffer.alloc(this.#capacity)
      kept = bytes.subarray(bytes.length - this.#capacity)
      this.#end += bytes.length - kept.length
      this.#start = this.#end
    } else {
      this.#grow(this.#end - this.#start + kept.length)
    }
    for (let done = 0; done < kept.length;) {
      const at = (this.#end + done) % this.#buffer.length
      done += kept.copy(this.#buffer, at, done, Math.min(kept.length, done + this.#buffer.length - at))
    }
    this.#end += kept.length
    if (this.#end - this.#start > this.#buffer.length) this.#start = this.#end - this.#buffer.length
    // Where older bytes were let go, the oldest byte kept starts a character: a read never begins with the rest of one.
    if (this.#start > startBefore) {
      for (let skipped = 0; skipped < MAX_CONTINUATION_BYTES && this.#start < this.#end && isContinuation(this.#byteAt(this.#start)); skipped++) this.#start++
    }
    while (this.#runs.length > 1 && (this.#runs[1] as { at: number }).at <= this.#start) this.#runs.shift()
  }

  /** Makes room for `needed` bytes (up to capacity), keeping what is there at its cursor's place. */
  #grow (needed: number): void {
    const size = this.#buffer.length
    if (needed <= size || size >= this.#capacity) return
    const grown = Buffer.alloc(Math.min(this.#capacity, Math.max(needed, size * 2)))
    const kept = this.#slice(this.#start, this.#end)
    for (let done = 0; done < kept.length;) {
      const at = (this.#start + done) % grown.length
      done += kept.copy(grown, at, done, Math.min(kept.length, done + grown.length - at))
    }
    this.#buffer = grown
  }

  #byteAt (cursor: number): number {
    return this.#buffer[cursor % this.#buffer.length] as number
  }

  /** The kept bytes between two cursors, as one buffer. */
  #slice (from: number, to: number): Buffer {
    const size = this.#buffer.length
    const a = from % size
    const length = to - from
    if (a + length <= size) return this.#buffer.subarray(a, a + length)
    return Buffer.concat([this.#buffer.subarray(a), this.#buffer.subarray(0, length - (size - a))])
  }

  #runIndexAt (cursor: number): number {
    let i = 0
    while (i + 1 < this.#runs.length && (this.#runs[i + 1] as { at: number }).at <= cursor) i++
    return i
  }
}
