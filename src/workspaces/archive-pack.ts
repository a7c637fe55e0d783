/**
 * A workspace packed for download, as a gzipped tar stream.
 *
 * A command may still be running in the workspace while it is packed: it can
 * delete what the walk is about to read, swap a directory for a symlink,
 * grow or shrink a file, leave a FIFO or a socket, or nest directories until
 * their paths pass PATH_MAX. So the walk never uses a path longer than one
 * name: each directory is opened with O_NOFOLLOW and its children are reached
 * through it (a TreeCursor walk, `/proc/self/fd/N/<name>`), files are
 * opened with O_NOFOLLOW|O_NONBLOCK and checked with fstat, and whatever
 * vanishes or cannot be read is left out. Only regular files, directories and
 * symlinks go in. Headers come from node-tar (pax records for long names);
 * the body of a file is exactly the size its header states, cut or padded
 * with zeros if the file changed meanwhile, so the stream is always a valid
 * archive. Memory does not grow with the workspace: two descriptors, the
 * names of one directory per level of the walk, one chunk of a file at a time.
 */
import type { Stats } from 'node:fs'
import { type FileHandle, lstat, open, readdir, readlink, stat } from 'node:fs/promises'
import { pipeline, Readable } from 'node:stream'
import { createGzip } from 'node:zlib'
import type { Logger } from 'pino'
import { Header, type HeaderData, Pax } from 'tar'
import { READ_FLAGS } from '../workspace-fs/open.ts'
import { TreeCursor } from '../workspace-fs/tree-cursor.ts'

const BLOCK = 512
const CHUNK = 64 * 1024

/**
 * The workspace as a gzipped tar stream. An error in any part of it ends
 * this stream (and so the response carrying it), never the process.
 */
export function packWorkspace (workspaceDir: string, log?: Logger): Readable {
  const gzip = createGzip()
  pipeline(Readable.from(tarStream(workspaceDir), { objectMode: false }), gzip, (error) => {
    // A client that goes away mid-download is the usual reason; anything else is worth a line.
    if (error && error.code !== 'ERR_STREAM_PREMATURE_CLOSE') log?.warn({ err: error }, 'workspace archive cut short')
  })
  return gzip
}

/** What is left to pack in one directory of the walk, and its name in the archive. */
interface Listing {
  names: string[]
  next: number
  /** With a trailing slash; '' for the workspace itself. */
  prefix: string
}

async function listingOf (cursor: TreeCursor, prefix: string): Promise<Listing> {
  // A directory that cannot be listed (gone meanwhile) adds nothing.
  return { names: await readdir(cursor.here).catch(() => []), next: 0, prefix }
}

async function * tarStream (workspaceDir: string): AsyncGenerator<Buffer> {
  const cursor = await TreeCursor.open(workspaceDir).catch(() => null)
  if (cursor) {
    try {
      yield * entryBlocks(cursor)
    } finally {
      await cursor.close()
    }
  }
  yield Buffer.alloc(2 * BLOCK)
}

/** Every entry under the cursor's root, depth first. */
async function * entryBlocks (cursor: TreeCursor): AsyncGenerator<Buffer> {
  const listings = [await listingOf(cursor, '')]
  for (;;) {
    const listing = listings[listings.length - 1] as Listing
    const name = listing.names[listing.next++]
    if (name === undefined) {
      if (cursor.depth === 0) return
      // A way back up that cannot be opened at all ends the walk early; the archive is still whole.
      const depth = await cursor.leave().catch(() => -1)
      if (depth < 0) return
      listings.length = depth + 1
      continue
    }
    const at = cursor.at(name)
    const archiveName = listing.prefix + name
    const info = await lstat(at).catch(() => undefined)
    if (info?.isFile()) yield * fileBlocks(at, archiveName)
    else if (info?.isSymbolicLink()) yield * symlinkBlocks(at, archiveName, info)
    else if (info?.isDirectory() && await cursor.enter(name).catch(() => false)) {
      const directory = await stat(cursor.here).catch(() => info)
      yield headerBlocks({ path: `${archiveName}/`, type: 'Directory', mode: directory.mode & 0o7777, mtime: directory.mtime })
      listings.push(await listingOf(cursor, `${archiveName}/`))
    }
    // Anything else (a FIFO, a socket, a device), or an entry gone since it was listed: left out.
  }
}

async function * symlinkBlocks (at: string, name: string, info: Stats): AsyncGenerator<Buffer> {
  // readlink does not follow the link it reads; an entry no longer a link (EINVAL) or gone is left out.
  const target = await readlink(at).catch(() => undefined)
  if (target !== undefined) yield headerBlocks({ path: name, type: 'SymbolicLink', linkpath: target, mode: 0o777, mtime: info.mtime })
}

/** A regular file: its header, then exactly the size stated there, whatever the file does meanwhile. */
async function * fileBlocks (at: string, name: string): AsyncGenerator<Buffer> {
  let handle: FileHandle
  try {
    handle = await open(at, READ_FLAGS)
  } catch {
    return
  }
  try {
    const info = await handle.stat().catch(() => undefined)
    // Swapped for something else since it was listed.
    if (!info?.isFile()) return
    yield headerBlocks({ path: name, type: 'File', size: info.size, mode: info.mode & 0o7777, mtime: info.mtime })
    let position = 0
    let ended = false
    while (position < info.size) {
      // Zero-filled: once the file ends early (shrunk, or a read failed), the rest of the body is zeros.
      const chunk = Buffer.alloc(Math.min(CHUNK, info.size - position))
      const bytesRead = ended ? 0 : await handle.read(chunk, 0, chunk.length, position).then((read) => read.bytesRead, () => 0)
      if (bytesRead === 0) ended = true
      const body = ended ? chunk : chunk.subarray(0, bytesRead)
      position += body.length
      yield body
    }
    const padding = (BLOCK - (info.size % BLOCK)) % BLOCK
    if (padding > 0) yield Buffer.alloc(padding)
  } finally {
    await handle.close().catch(() => {})
  }
}

/** The header block of an entry, after a pax record when a field (a long name, say) does not fit in it. */
function headerBlocks (data: HeaderData): Buffer {
  const block = Buffer.alloc(BLOCK)
  const header = new Header(data)
  if (!header.encode(block)) return block
  return Buffer.concat([new Pax({ path: data.path, linkpath: data.linkpath, size: data.size, mtime: data.mtime }).encode(), block])
}
