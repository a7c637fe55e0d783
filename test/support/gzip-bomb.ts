/** A real gzip bomb, built as a stream: a .tar.gz of one huge file of zeros, never held whole. */
import { createWriteStream } from 'node:fs'
import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { constants, createGzip } from 'node:zlib'
import { Header } from 'tar'

/** Writes to `file` a .tar.gz holding `zeros.bin` of `size` zero bytes; a few MB for gigabytes. */
export async function writeGzipBomb (file: string, size: number): Promise<void> {
  async function * tar (): AsyncGenerator<Buffer> {
    const header = Buffer.alloc(512)
    new Header({ path: 'zeros.bin', type: 'File', size, mode: 0o644, mtime: new Date() }).encode(header)
    yield header
    const zeros = Buffer.alloc(1024 * 1024)
    for (let left = size; left > 0; left -= zeros.length) yield left >= zeros.length ? zeros : zeros.subarray(0, left)
    yield Buffer.alloc((512 - (size % 512)) % 512 + 1024)
  }
  // Run-length matches only: the same ratio as the best level on zeros, several times faster to make.
  await pipeline(Readable.from(tar()), createGzip({ level: 9, strategy: constants.Z_RLE }), createWriteStream(file))
}
