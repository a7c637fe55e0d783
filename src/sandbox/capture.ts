/**
 * Bounded capture of a process's output: keeps the first `max` bytes,
 * counts and drops the rest. The stream is still drained, so a command that
 * prints a gigabyte neither blocks nor grows memory past the cap.
 */
import type { Readable } from 'node:stream'

export class BoundedCapture {
  readonly #max: number
  readonly #chunks: Buffer[] = []
  #kept = 0
  #total = 0

  constructor (max: number) {
    this.#max = max
  }

  /** Starts consuming `stream`; resolves when it ends. */
  drain (stream: Readable | null | undefined): Promise<void> {
    if (!stream) return Promise.resolve()
    return new Promise((resolve) => {
      stream.on('data', (chunk: Buffer) => this.push(chunk))
      stream.once('end', resolve)
      stream.once('close', resolve)
      stream.once('error', () => resolve())
    })
  }

  push (chunk: Buffer): void {
    this.#total += chunk.length
    const room = this.#max - this.#kept
    if (room <= 0) return
    const piece = chunk.length <= room ? chunk : chunk.subarray(0, room)
    this.#chunks.push(piece)
    this.#kept += piece.length
  }

  get bytes (): number {
    return this.#total
  }

  get truncated (): boolean {
    return this.#total > this.#kept
  }

  /** The kept bytes as UTF-8, without a multi-byte character cut in half at the end. */
  text (): string {
    const kept = Buffer.concat(this.#chunks)
    return kept.subarray(0, this.truncated ? completeUtf8Length(kept) : kept.length).toString('utf8')
  }
}

/** The length of the longest prefix of `bytes` that does not end inside a UTF-8 sequence. */
export function completeUtf8Length (bytes: Buffer): number {
  for (let back = 1; back <= Math.min(4, bytes.length); back++) {
    const byte = bytes[bytes.length - back] as number
    if ((byte & 0xc0) === 0x80) continue // a continuation byte: look further back
    // A byte that starts no sequence (0xf8 and above) ends an invalid one: nothing is waiting for more.
    const needed = byte >= 0xf8 ? 1 : byte >= 0xf0 ? 4 : byte >= 0xe0 ? 3 : byte >= 0xc0 ? 2 : 1
    return needed > back ? bytes.length - back : bytes.length
  }
  return bytes.length
}
