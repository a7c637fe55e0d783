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
 * names of one directory per level of the walk, and one buffer (TarOutput).
 */
import type { Stats } from 'node:fs'
import { type FileHandle, lstat, open, readdir, readlink, stat } from 'node:fs/promises'
import type { Readable } from 'node:stream'
import type { Logger } from 'pino'
import { READ_FLAGS } from '../workspace-fs/open.ts'
import { TreeCursor } from '../workspace-fs/tree-cursor.ts'
import { TarOutput } from './archive-tar-output.ts'

const BLOCK = 512

/**
 * The workspace as a gzipped tar stream. An error in any part of it ends
 * this stream (and so the response carrying it), never the process.
 */
export function packWorkspace (workspaceDir: string, log?: Logger): Readable {
  // node:zlib and tar load with the first archive, not at every start of the service.
  const gzip = process.getBuiltinModule('node:zlib').createGzip()
  import('tar').then((tar) => writeTar(workspaceDir, new TarOutput(gzip, tar))).then(() => gzip.end(), (error: NodeJS.ErrnoException) => {
    // A client that goes away mid-download (its answer destroys the stream, and the next write fails) is
    // the usual reason; anything else is worth a line.
    if (!gzip.destroyed && error.code !== 'ERR_STREAM_PREMATURE_CLOSE') log?.warn({ err: error }, 'workspace archive cut short')
    gzip.destroy()
  })
  return gzip
}

/**
 * What is left to pack in one directory of the walk, and its name in the
 * archive. Names are read as bytes, so that an entry whose name is not UTF-8
 * is reached too; a tar header holds UTF-8, so in the archive its name has
 * U+FFFD where those bytes were.
 */
interface Listing {
  names: Buffer[]
  next: number
  /** With a trailing slash; '' for the workspace itself. */
  prefix: string
}

async function listingOf (cursor: TreeCursor, prefix: string): Promise<Listing> {
  // A directory that cannot be listed (gone meanwhile) adds nothing.
  return { names: await readdir(cursor.here, { encoding: 'buffer' }).catch(() => []), next: 0, prefix }
}

/** The tar stream of the workspace, ending with its two zero blocks, written through `out` (and flushed). */
async function writeTar (workspaceDir: string, out: TarOutput): Promise<void> {
  const cursor = await TreeCursor.open(workspaceDir).catch(() => null)
  if (cursor) {
    try {
      await writeEntries(cursor, out)
    } finally {
      await cursor.close()
    }
  }
  await out.zeros(2 * BLOCK)
  await out.flush()
}

/** Every entry under the cursor's root, depth first. */
async function writeEntries (cursor: TreeCursor, out: TarOutput): Promise<void> {
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
    const archiveName = listing.prefix + name.toString()
    const info = await lstat(at).catch(() => undefined)
    if (info?.isFile()) await writeFileEntry(at, archiveName, out)
    else if (info?.isSymbolicLink()) await writeSymlinkEntry(at, archiveName, info, out)
    else if (info?.isDirectory() && await cursor.enter(name).catch(() => false)) {
      const directory = await stat(cursor.here).catch(() => info)
      await out.header({ path: `${archiveName}/`, type: 'Directory', mode: directory.mode & 0o7777, mtime: directory.mtime })
      listings.push(await listingOf(cursor, `${archiveName}/`))
    }
    // Anything else (a FIFO, a socket, a device), or an entry gone since it was listed: left out.
  }
}

async function writeSymlinkEntry (at: Buffer, name: string, info: Stats, out: TarOutput): Promise<void> {
  // readlink does not follow the link it reads; an entry no longer a link (EINVAL) or gone is left out.
  const target = await readlink(at).catch(() => undefined)
  if (target !== undefined) await out.header({ path: name, type: 'SymbolicLink', linkpath: target, mode: 0o777, mtime: info.mtime })
}

/** A regular file: its header, then exactly the size stated there, whatever the file does meanwhile. */
async function writeFileEntry (at: Buffer, name: string, out: TarOutput): Promise<void> {
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
    await out.header({ path: name, type: 'File', size: info.size, mode: info.mode & 0o7777, mtime: info.mtime })
    await out.body(handle, info.size)
  } finally {
    await handle.close().catch(() => {})
  }
}
