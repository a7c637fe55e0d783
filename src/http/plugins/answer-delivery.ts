/**
 * How an answer reaches its client, whatever route sends it: one its
 * client stops reading is cut, and one sent before the client finished
 * sending its request's body ends the connection without losing the
 * answer.
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import { Socket } from 'node:net'
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'

/** How long what a client still sends after an early answer is read and dropped before its connection closes. */
const LINGER_MS = 2000

/** `stalledAfterMs`: how long an answer may go with its client taking none of it (server.request_timeout_ms). */
export function installAnswerDelivery (app: FastifyInstance, stalledAfterMs: number): void {
  /** Requests in the order they came on their connection (1, 2, …). */
  const arrived = new WeakMap<Socket, number>()
  const placeOf = new WeakMap<IncomingMessage, number>()
  /** Connections an answer said it closes, with that answer's request's place: the requests after it are not run. */
  const closingAfter = new WeakMap<Socket, number>()
  // A request that comes after one whose answer said `connection: close` (pipelined behind it, or sent
  // while the connection lingers) is neither run nor answered (RFC 9112 §9.6): its client, told the
  // connection closes, sends it again on a new one. Looked at before its body is read and again before
  // its handler, for one that was already under way when the answer was sent; one that came before
  // that answer runs and is answered first, as pipelining has it.
  const refuseWhenClosing = (request: FastifyRequest, reply: FastifyReply, done: () => void): void => {
    const { socket } = request.raw
    const place = placeOf.get(request.raw) ?? 0
    const last = closingAfter.get(socket)
    if (last !== undefined && place > last) {
      // Its body is read and dropped with the rest: left unread, it would stop the reading that the close waits on.
      request.raw.resume()
      reply.hijack()
    }
    done()
  }
  app.addHook('onRequest', (request, reply, done) => {
    const { socket } = request.raw
    const place = (arrived.get(socket) ?? 0) + 1
    arrived.set(socket, place)
    placeOf.set(request.raw, place)
    refuseWhenClosing(request, reply, done)
  })
  app.addHook('preHandler', refuseWhenClosing)
  app.addHook('onSend', (request, reply, payload, done) => {
    // (Event streams, which write themselves, cut theirs: process-events.ts.)
    cutWhenStalled(reply.raw, stalledAfterMs)
    // (A request injected in a test has no socket.)
    const socket = request.raw.socket
    if (socket instanceof Socket) {
      if (!bodyRead(request.raw)) closeAfterAnswer(request.raw, reply.raw)
      if (String(reply.getHeader('connection')).toLowerCase() === 'close') {
        const place = placeOf.get(request.raw) ?? 0
        closingAfter.set(socket, Math.min(closingAfter.get(socket) ?? place, place))
      }
    }
    done(null, payload)
  })
}

/**
 * Whether the request's body has been read to its end. One that has none is: Node marks it complete
 * only once its 'request' event is over, and an answer sent within it (a refused request line) is
 * no early one.
 */
function bodyRead (request: IncomingMessage): boolean {
  if (request.complete) return true
  const length = request.headers['content-length']
  return request.headers['transfer-encoding'] === undefined && (length === undefined || Number(length) === 0)
}

/**
 * Destroys `response` once its client has taken none of it for `ms`,
 * checked every `ms` until it is sent: it would hold its bytes (and the
 * socket) for good. Progress is what the kernel took: libuv's write queue
 * shrinks as it does, where the stream's own counters stand still until the
 * whole of one large write is out. Not the socket's idle timeout, which
 * would stay armed for a request pipelined behind this answer and cut that
 * call mid-run; an answer waiting behind another for the socket is not
 * looked at until it has it.
 */
function cutWhenStalled (response: ServerResponse, ms: number): void {
  // A client gone before its answer (its call cut short meanwhile) stalls nothing: a timer would only
  // keep the answer, its request and its socket in memory for `ms`, one set for every request abandoned so.
  if (response.destroyed) return
  let sent: string | undefined
  const check = (): void => {
    if (response.writableFinished || response.destroyed) return
    const socket = response.socket
    if (socket !== null) {
      const queued = (socket as { _handle?: { writeQueueSize?: number } | null })._handle?.writeQueueSize ?? 0
      const now = `${socket.bytesWritten} ${socket.writableLength} ${queued}`
      if (now === sent) {
        response.destroy()
        return
      }
      sent = now
    }
    timer = setTimeout(check, ms).unref()
  }
  let timer = setTimeout(check, ms).unref()
  response.once('close', () => { clearTimeout(timer) })
}

/**
 * An answer sent before its request's body was read to the end (a refusal:
 * too large, a bad archive, no token) ends the connection, since the rest of
 * the body may be gigabytes. Not at once: a socket closed with bytes of the
 * client's still unread makes the kernel reset the connection, and a client
 * still sending then loses the answer it had not read yet. What it still
 * sends is read and dropped for up to LINGER_MS first (a web server's
 * "lingering close"); a client that closes its side ends it sooner.
 */
function closeAfterAnswer (request: IncomingMessage, response: ServerResponse): void {
  response.setHeader('connection', 'close')
  const socket = request.socket
  response.once('finish', () => {
    // Node has just ended its side (socket.destroySoon: the FIN, then a destroy once it is sent): the destroy waits.
    socket.removeListener('finish', socket.destroy)
    request.resume()
    const timer = setTimeout(() => { socket.destroy() }, LINGER_MS).unref()
    socket.once('close', () => { clearTimeout(timer) })
  })
}
