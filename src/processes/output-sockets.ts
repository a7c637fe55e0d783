/**
 * Where a long-running process writes its stdout and stderr: for each, a
 * connected pair of Unix stream sockets (what libuv's own 'pipe' is), the
 * command given one end and the service reading the other into one buffer
 * it reuses (net's `onread`). A pipe read the usual way gets a new buffer
 * per read, garbage that V8 collects only once tens of MiB of it have piled
 * up: a process printing without pause would grow the service by that much.
 *
 * The pairs are made through one listening socket, in a directory private
 * to the service and hidden from every sandbox. Each reader first sends a
 * random nonce; the connection that brings a nonce being waited for becomes
 * that reader's writer, and any other connection is closed, so a stranger
 * that reaches the socket can neither take a process's output nor hold
 * descriptors for long.
 */
import { randomBytes } from 'node:crypto'
import { mkdtemp, rm } from 'node:fs/promises'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { descriptorShortage, ToolError } from '../errors.ts'

/** The buffer each reader reuses: the most a pipe hands over at once. */
const READ_BYTES = 64 * 1024
const NONCE_BYTES = 16
/** How long a pair may take to be made, and a connection to say which pair it is. */
const PAIR_TIMEOUT_MS = 5000
/** Unix socket paths are limited (108 bytes on Linux): a longer one goes to the system's temporary directory. */
const MAX_SOCKET_PATH = 100

export interface OutputSocket {
  /** The end the command writes to: passed as its stdio, then closed here. */
  writer: net.Socket
  /** The end read here; it closes once the command and whatever it left have closed theirs. */
  reader: net.Socket
}

interface Listening {
  server: net.Server
  file: string
  /** Removes what `listen` made. */
  remove: () => Promise<void>
}

/** The listening socket is no longer where it was. */
class ListenerGone extends Error {}

export class OutputSockets {
  /** Where to listen: a directory private to the service (made on the first pair). */
  readonly #directory: () => Promise<string>
  #listening: Promise<Listening> | undefined
  /** Pairs being made, by nonce: each takes the connection that brings its nonce. */
  readonly #waiting = new Map<string, (writer: net.Socket) => void>()

  constructor (directory: () => Promise<string>) {
    this.#directory = directory
  }

  /** A connected pair; `onBytes` gets what the command writes, in a buffer valid only during the call. */
  async pair (onBytes: (bytes: Buffer) => void): Promise<OutputSocket> {
    const listening = this.#listening ?? this.#startListening()
    try {
      return await this.#pairThrough(await listening, onBytes)
    } catch (error) {
      if (!(error instanceof ListenerGone)) throw error
      // The socket's file was removed (by a cleaner of temporary files, say): listen anew, once for all the pairs that found it gone.
      if (this.#listening === listening) {
        this.#listening = undefined
        void listening.then(async (made) => { made.server.close(); await made.remove() }).catch(() => {})
      }
      try {
        return await this.#pairThrough(await (this.#listening ?? this.#startListening()), onBytes)
      } catch (again) {
        // A listener just made cannot be gone already: its connections are what failed (no descriptor free, say).
        if (again instanceof ListenerGone) throw new ToolError('Overloaded', 'the output of the process could not be connected just now; retry shortly', { retryAfterSeconds: 1, cause: again })
        throw again
      }
    }
  }

  /** Listens, for every pair from now on; a listen that fails is tried again by the next pair. */
  #startListening (): Promise<Listening> {
    const listening = this.#listen()
    this.#listening = listening
    listening.catch(() => { if (this.#listening === listening) this.#listening = undefined })
    return listening
  }

  async #pairThrough ({ file }: Listening, onBytes: (bytes: Buffer) => void): Promise<OutputSocket> {
    const nonce = randomBytes(NONCE_BYTES)
    const key = nonce.toString('hex')
    const buffer = Buffer.allocUnsafe(READ_BYTES)
    let readerError: Error | undefined
    const reader = net.connect({ path: file, onread: { buffer, callback: (size: number) => { onBytes(buffer.subarray(0, size)); return true } } })
    const accepted = new Promise<net.Socket>((resolve, reject) => {
      const timer = setTimeout(() => { done(new ToolError('Overloaded', 'the output socket of a process could not be made in time; retry shortly', { retryAfterSeconds: 1 })) }, PAIR_TIMEOUT_MS)
      const done = (error: Error | undefined, writer?: net.Socket): void => {
        clearTimeout(timer)
        this.#waiting.delete(key)
        reader.off('close', closedFirst)
        if (error) reject(error)
        else resolve(writer as net.Socket)
      }
      // Closed before its pair was made: no descriptor was free for it, or no listener of ours is at that path (gone, or another's).
      const closedFirst = (): void => { done(descriptorShortage(readerError) ?? new ListenerGone()) }
      reader.once('close', closedFirst)
      this.#waiting.set(key, (writer) => { done(undefined, writer) })
    })
    reader.once('connect', () => reader.write(nonce))
    reader.on('error', (error) => { readerError = error })
    try {
      return { reader, writer: await accepted }
    } catch (error) {
      reader.destroy()
      throw error
    }
  }

  async close (): Promise<void> {
    const listening = this.#listening
    this.#listening = undefined
    if (!listening) return
    const made = await listening.catch(() => undefined)
    made?.server.close()
    await made?.remove()
  }

  async #listen (): Promise<Listening> {
    let dir = await this.#directory()
    let remove = async (): Promise<void> => {}
    if (Buffer.byteLength(path.join(dir, 'pairs-000000000000')) > MAX_SOCKET_PATH) {
      dir = await mkdtemp(path.join(os.tmpdir(), 'toolport-output-'))
      const made = dir
      remove = () => rm(made, { recursive: true, force: true })
    }
    // A name of its own: an instance that shares the directory (a misconfiguration) does not take it over.
    const file = path.join(dir, `pairs-${randomBytes(6).toString('hex')}`)
    const server = net.createServer((socket) => this.#identify(socket))
    await new Promise<void>((resolve, reject) => server.once('error', reject).listen(file, resolve))
    // A failed accept (no descriptor free) costs that one connection, whose pair then fails; never the service.
    server.on('error', () => {})
    server.unref()
    return { server, file, remove: async () => { await rm(file, { force: true }); await remove() } }
  }

  /** Hands `socket` to the pair whose nonce it sends first; closes it otherwise. */
  #identify (socket: net.Socket): void {
    socket.on('error', () => socket.destroy())
    socket.setTimeout(PAIR_TIMEOUT_MS, () => socket.destroy())
    let received = Buffer.alloc(0)
    const onData = (chunk: Buffer): void => {
      received = Buffer.concat([received, chunk])
      if (received.length < NONCE_BYTES) return
      socket.off('data', onData)
      socket.pause()
      socket.setTimeout(0)
      const claim = received.length === NONCE_BYTES ? this.#waiting.get(received.toString('hex')) : undefined
      if (claim) claim(socket)
      else socket.destroy()
    }
    socket.on('data', onData)
  }
}
