/**
 * The pass-throughs an upload's bytes go through before node-tar reads
 * them (archive-extract.ts): a count that fails past a limit, and a check
 * that the tar inside is not compressed again.
 */
import { Transform } from 'node:stream'
import { ToolError } from '../errors.ts'

/** A pass-through that fails with `tooLarge()` once more than `maxBytes` have gone through it. */
export function countedBytes (maxBytes: number, tooLarge: () => ToolError): Transform {
  let total = 0
  return new Transform({
    transform (chunk: Buffer, _encoding, callback) {
      total += chunk.length
      callback(total > maxBytes ? tooLarge() : null, chunk)
    },
  })
}

/**
 * Refuses a tar stream that is compressed again: node-tar would inflate an
 * inner gzip or zstd layer itself, uncounted and in one synchronous step per chunk.
 */
export function compressedOnce (): Transform {
  let head: Buffer | undefined = Buffer.alloc(0)
  return new Transform({
    transform (chunk: Buffer, _encoding, callback) {
      if (head === undefined) return callback(null, chunk)
      head = Buffer.concat([head, chunk])
      if (head.length < MAGIC_BYTES) return callback()
      const first = head
      head = undefined
      callback(isCompressed(first) ? new ToolError('BadRequest', 'the archive is compressed more than once; send a tar compressed once with gzip') : null, first)
    },
    flush (callback) { callback(null, head) },
  })
}

const MAGIC_BYTES = 4
const GZIP_MAGIC = Buffer.from([0x1f, 0x8b])
const ZSTD_MAGIC = Buffer.from([0x28, 0xb5, 0x2f, 0xfd])
const isCompressed = (head: Buffer): boolean => head.subarray(0, 2).equals(GZIP_MAGIC) || head.subarray(0, 4).equals(ZSTD_MAGIC)
