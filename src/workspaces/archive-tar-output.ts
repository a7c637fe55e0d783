/**
 * The bytes of a tar stream gathered in one buffer per download, written on
 * (to gzip) whenever it is full, and filled again only once gzip has taken
 * them: headers, file bodies (read straight into it) and padding alike.
 *
 * Why one buffer: a fresh buffer per chunk would be garbage as soon as gzip
 * compressed it, but V8 frees such buffers late (by the external memory
 * they hold, not by their number), so a large download would grow the
 * process by tens of MiB of buffers waiting to be collected. Gathering also
 * writes a workspace of many small files to gzip in a few large chunks, not
 * three small ones per file.
 */
import type { FileHandle } from 'node:fs/promises'
import type { Writable } from 'node:stream'
import type { HeaderData } from 'tar'

const BLOCK = 512
/** The buffer of one download: the largest chunk written to gzip, and the most of a file read at once. */
export const TAR_BUFFER_BYTES = 64 * 1024

/** The longest path a ustar header holds: a 155-byte prefix, a slash, a 100-byte name. */
const USTAR_PATH_BYTES = 256

/**
 * The name in the header of an entry whose path only its pax record holds:
 * the start of its last component (no slash, so never `..` or a path
 * elsewhere for a reader that ignores pax records), a directory's slash kept.
 */
function standInFor (entryPath: string): string {
  const directory = entryPath.endsWith('/')
  const trimmed = directory ? entryPath.slice(0, -1) : entryPath
  const last = trimmed.slice(trimmed.lastIndexOf('/') + 1)
  return Array.from(last.slice(0, 48)).slice(0, 24).join('') + (directory ? '/' : '')
}

export class TarOutput {
  readonly #into: Writable
  readonly #tar: typeof import('tar')
  readonly #buffer = Buffer.alloc(TAR_BUFFER_BYTES)
  #filled = 0
  /** Where a header is encoded before it is copied in (it may need a pax record first). */
  readonly #header = Buffer.alloc(BLOCK)

  constructor (into: Writable, tar: typeof import('tar')) {
    this.#into = into
    this.#tar = tar
  }

  /** An entry's header block, after a pax record when a field (a long name, say) does not fit in it. */
  async header (data: HeaderData): Promise<void> {
    const block = this.#header.fill(0)
    // A path longer than a header's name and prefix together can only be in the pax record, and node-tar
    // would look for a split of it one directory at a time, each step on the whole path: a workspace
    // thousands of directories deep took seconds a header, on the event loop. The header gets a stand-in.
    const fits = data.path === undefined || Buffer.byteLength(data.path) <= USTAR_PATH_BYTES
    const needsPax = new this.#tar.Header(fits ? data : { ...data, path: standInFor(data.path as string) }).encode(block)
    if (needsPax || !fits) {
      await this.#copy(new this.#tar.Pax({ path: data.path, linkpath: data.linkpath, size: data.size, mtime: data.mtime }).encode())
    }
    await this.#copy(block)
  }

  /**
   * A file's body: exactly `size` bytes read from `handle`, then zeros
   * should the file end early (shrunk, or a read failed), then the padding
   * to a whole block: the stream stays a valid archive whatever the file does.
   */
  async body (handle: FileHandle, size: number): Promise<void> {
    let position = 0
    while (position < size) {
      const free = await this.#free(size - position)
      const bytesRead = await handle.read(free, 0, free.length, position).then((read) => read.bytesRead, () => 0)
      if (bytesRead === 0) break
      this.#filled += bytesRead
      position += bytesRead
    }
    await this.zeros(size - position + (BLOCK - (size % BLOCK)) % BLOCK)
  }

  async zeros (length: number): Promise<void> {
    for (let left = length; left > 0;) {
      const free = await this.#free(left)
      free.fill(0)
      this.#filled += free.length
      left -= free.length
    }
  }

  /** Writes on what is gathered, resolving once it has been taken. */
  async flush (): Promise<void> {
    if (this.#filled === 0) return
    await written(this.#into, this.#buffer.subarray(0, this.#filled))
    this.#filled = 0
  }

  async #copy (bytes: Buffer): Promise<void> {
    for (let at = 0; at < bytes.length;) {
      const free = await this.#free(bytes.length - at)
      at += bytes.copy(free, 0, at)
      this.#filled += free.length
    }
  }

  /** The free part of the buffer, at most `most` bytes, writing on what is gathered first when it is full. */
  async #free (most: number): Promise<Buffer> {
    if (this.#filled === this.#buffer.length) await this.flush()
    return this.#buffer.subarray(this.#filled, this.#filled + Math.min(most, this.#buffer.length - this.#filled))
  }
}

/** Resolves once `into` has taken `chunk` (gzip: compressed it), rejects when `into` fails or closes first. */
async function written (into: Writable, chunk: Buffer): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    const closed = (): void => { reject(Object.assign(new Error('the archive stream closed early'), { code: 'ERR_STREAM_PREMATURE_CLOSE' })) }
    into.once('close', closed)
    into.write(chunk, (error) => {
      into.off('close', closed)
      if (error) reject(error)
      else resolve()
    })
  })
}
