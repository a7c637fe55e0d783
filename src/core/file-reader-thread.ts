/**
 * The body of a file-reader thread (see file-readers.ts): each request opens
 * one file, checks it, reads a capped prefix and closes it, in one go, and
 * answers with the text. Plain JavaScript under the types: Node runs this
 * file itself (type stripping) or its built copy in dist/.
 */
import { closeSync, fstatSync, openSync, readSync } from 'node:fs'
import { parentPort } from 'node:worker_threads'
import { READ_FLAGS } from './contained-fs.ts'
import type { ReadAnswer, ReadRequest } from './file-readers.ts'

/** One buffer for the reads of this thread up to the default result limit (reads here are sequential); larger ones get their own. */
const scratch = Buffer.allocUnsafeSlow(64 * 1024 + 1)

function readPrefix (fd: number, maxBytes: number): string {
  const buffer = maxBytes <= scratch.length ? scratch : Buffer.allocUnsafeSlow(maxBytes)
  let filled = 0
  // To the end or the cap, whatever the stat said: a file may grow while it is read.
  while (filled < maxBytes) {
    const bytesRead = readSync(fd, buffer, filled, maxBytes - filled, filled)
    if (bytesRead === 0) break
    filled += bytesRead
  }
  return buffer.toString('utf8', 0, filled)
}

function answer (request: ReadRequest): ReadAnswer {
  let fd: number
  try {
    // No symlink at the name, never blocking on a FIFO: the ordinary open's flags.
    fd = openSync(request.path, READ_FLAGS)
  } catch {
    return { id: request.id, opened: false }
  }
  try {
    const stat = fstatSync(fd)
    const kind = stat.isFile() ? 'file' : stat.isDirectory() ? 'directory' : 'other'
    // Only a regular file with one name is read: the caller refuses the rest.
    if (kind !== 'file' || stat.nlink > 1) return { id: request.id, opened: true, kind, nlink: stat.nlink }
    return { id: request.id, opened: true, kind, nlink: stat.nlink, text: readPrefix(fd, request.maxBytes) }
  } catch (error) {
    return { id: request.id, opened: true, errorCode: (error as NodeJS.ErrnoException).code ?? 'EIO' }
  } finally {
    closeSync(fd)
  }
}

parentPort?.on('message', (batch: ReadRequest[]) => {
  parentPort?.postMessage(batch.map(answer))
})
