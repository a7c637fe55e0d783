/**
 * The body of a file-reader thread (see file-readers.ts): it sleeps on its
 * channel's sequence number (file-reader-channel.ts) and, for each batch,
 * opens each file, checks it, reads a capped prefix straight into the
 * answer area and closes it, then says so with one message. Plain
 * JavaScript under the types: Node runs this file itself (type stripping)
 * or its built copy in dist/.
 */
import { closeSync, fstatSync, openSync, readSync } from 'node:fs'
import { parentPort, workerData } from 'node:worker_threads'
import { kindOf, READ_FLAGS } from './contained-fs.ts'
import {
  ANSWER_HEADER, Channel, FAILED, forEachRequest, MAX_CODE_BYTES, NO_TEXT, NOT_OPENED, SEQUENCE, STATUS_OF, TEXT_IN_MESSAGE, writeAnswerHeader,
} from './file-reader-channel.ts'

const channel = new Channel((workerData as { memory: SharedArrayBuffer }).memory)

/** Reads from the start to the end or the cap, whatever the stat said: a file may grow while it is read. */
function readInto (fd: number, buffer: Buffer, offset: number, maxBytes: number): number {
  let filled = 0
  while (filled < maxBytes) {
    const bytesRead = readSync(fd, buffer, offset + filled, maxBytes - filled, filled)
    if (bytesRead === 0) break
    filled += bytesRead
  }
  return filled
}

/** Answers one request at `at` of the answer area; returns where the next answer starts. */
function answer (path: string, maxBytes: number, inline: boolean, at: number, inMessage: string[]): number {
  let fd: number
  try {
    // No symlink at the name, never blocking on a FIFO: the ordinary open's flags.
    fd = openSync(path, READ_FLAGS)
  } catch {
    return writeAnswerHeader(channel, at, NOT_OPENED, 0, NO_TEXT)
  }
  try {
    const stat = fstatSync(fd)
    const kind = kindOf(stat)
    // Only a regular file with one name is read: the caller refuses the rest.
    if (kind !== 'file' || stat.nlink > 1) return writeAnswerHeader(channel, at, STATUS_OF[kind], stat.nlink, NO_TEXT)
    if (inline) return writeAnswerHeader(channel, at, STATUS_OF.file, 1, readInto(fd, channel.answers, at + ANSWER_HEADER, maxBytes))
    const buffer = Buffer.allocUnsafeSlow(maxBytes)
    inMessage.push(buffer.toString('utf8', 0, readInto(fd, buffer, 0, maxBytes)))
    return writeAnswerHeader(channel, at, STATUS_OF.file, 1, TEXT_IN_MESSAGE)
  } catch (error) {
    const code = String((error as NodeJS.ErrnoException).code ?? 'EIO').slice(0, MAX_CODE_BYTES)
    const length = channel.answers.write(code, at + ANSWER_HEADER, 'latin1')
    return writeAnswerHeader(channel, at, FAILED, 0, length)
  } finally {
    closeSync(fd)
  }
}

/** Each batch: answer every request, then one message (the texts too large for the answer area, or 0). */
function serve (): void {
  let seen = 0
  for (;;) {
    Atomics.wait(channel.control, SEQUENCE, seen)
    seen = Atomics.load(channel.control, SEQUENCE)
    const inMessage: string[] = []
    let at = 0
    forEachRequest(channel, (path, maxBytes, inline) => { at = answer(path, maxBytes, inline, at, inMessage) })
    parentPort?.postMessage(inMessage.length > 0 ? inMessage : 0)
  }
}

serve()
