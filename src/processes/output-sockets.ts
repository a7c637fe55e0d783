/**
 * Where a long-running process writes its stdout and stderr: for each, a
 * connected pair of Unix stream sockets (what libuv's own 'pipe' is), the
 * command given one end and the service reading the other into one buffer
 * it reuses (net's `onread`). A pipe read the usual way gets a new buffer
 * per read, garbage that V8 collects only once tens of MiB of it have piled
 * up: a process printing without pause would grow the service by that much.
 *
 * The pairs are made through one listening socket in a private directory
 * (mode 0700, made when the first process starts), one pair at a time, so
 * that the connection accepted is the one just made.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'

/** The buffer each reader reuses: the most a pipe hands over at once. */
const READ_BYTES = 64 * 1024

export interface OutputSocket {
  /** The end the command writes to: passed as its stdio, then closed here. */
  writer: net.Socket
  /** The end read here; it closes once the command and whatever it left have closed theirs. */
  reader: net.Socket
}

export class OutputSockets {
  #listening: Promise<{ server: net.Server, file: string, dir: string }> | undefined
  /** Pairs are made one after the other. */
  #queue: Promise<unknown> = Promise.resolve()

  /** A connected pair; `onBytes` gets what the command writes, in a buffer valid only during the call. */
  pair (onBytes: (bytes: Buffer) => void): Promise<OutputSocket> {
    const made = this.#queue.then(() => this.#pair(onBytes))
    this.#queue = made.catch(() => {})
    return made
  }

  async close (): Promise<void> {
    const listening = this.#listening
    this.#listening = undefined
    if (!listening) return
    const { server, dir } = await listening.catch(() => ({ server: undefined, dir: undefined }))
    server?.close()
    if (dir !== undefined) await rm(dir, { recursive: true, force: true })
  }

  async #pair (onBytes: (bytes: Buffer) => void): Promise<OutputSocket> {
    const { server, file } = await (this.#listening ??= listen())
    const accepted = new Promise<net.Socket>((resolve) => server.once('connection', resolve))
    const buffer = Buffer.allocUnsafe(READ_BYTES)
    const reader = net.connect({ path: file, onread: { buffer, callback: (size: number) => { onBytes(buffer.subarray(0, size)); return true } } })
    const connected = new Promise<void>((resolve, reject) => reader.once('connect', resolve).once('error', reject))
    const [writer] = await Promise.all([accepted, connected])
    return { writer, reader }
  }
}

async function listen (): Promise<{ server: net.Server, file: string, dir: string }> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'toolport-output-'))
  const file = path.join(dir, 'pairs')
  const server = net.createServer({ pauseOnConnect: true })
  await new Promise<void>((resolve, reject) => server.once('error', reject).listen(file, resolve))
  server.unref()
  return { server, file, dir }
}
