/**
 * Answers for requests that never reach a route: bytes that are not HTTP,
 * headers over the size limit, a client too slow to send its request
 * (slow-loris). Node would answer these with a bare status line; Toolport
 * answers problem+json like everywhere else, then closes the socket.
 */
import { randomUUID } from 'node:crypto'
import type { Socket } from 'node:net'
import { PROBLEM_CONTENT_TYPE, toProblem, ToolError } from '../../errors.ts'

function detailOf (error: NodeJS.ErrnoException): string {
  switch (error.code) {
    case 'HPE_HEADER_OVERFLOW': return 'the request line or headers are larger than the server accepts'
    case 'ERR_HTTP_REQUEST_TIMEOUT': return 'the request was not received in time'
    case 'HPE_INVALID_METHOD': return 'not an HTTP request'
    default: return 'malformed HTTP request'
  }
}

/** Fastify's `clientErrorHandler`: one problem+json answer, then the socket closes. */
export function answerClientError (error: NodeJS.ErrnoException, socket: Socket): void {
  // A connection that is gone, or one that owes an answer to an earlier request (one already on its
  // way, whose body these bytes would corrupt, or one still to come for a request pipelined before this
  // one, which would take this 400 for its own), is only closed.
  const owed = owesEarlierAnswer(socket)
  // Bytes after a request that said `Connection: close`: that request's answer is still to come, and
  // the connection closes after it.
  if (owed && error.code === 'HPE_CLOSED_CONNECTION') return
  if (error.code === 'ECONNRESET' || !socket.writable || owed) {
    socket.destroy()
    return
  }
  const body = JSON.stringify(toProblem(new ToolError('BadRequest', detailOf(error)), randomUUID()))
  socket.end([
    'HTTP/1.1 400 Bad Request',
    `Content-Type: ${PROBLEM_CONTENT_TYPE}`,
    `Content-Length: ${Buffer.byteLength(body)}`,
    'Connection: close',
    '',
    body,
  ].join('\r\n'))
}

/**
 * Whether the connection has an answer under way that is not this failed request's own: Node's
 * answer in progress on it (started, or waiting for its request's handler) belongs to another
 * request than the one whose body was being read when it failed. (The parser keeps the last
 * request it read as `incoming` once that one is whole: bad headers after it are not its.)
 */
function owesEarlierAnswer (socket: Socket): boolean {
  const { _httpMessage: answer, parser } = socket as Socket & { _httpMessage?: { headersSent?: boolean, req?: unknown } | null, parser?: { incoming?: { complete?: boolean } | null } | null }
  if (answer === undefined || answer === null) return false
  const reading = parser?.incoming
  return answer.headersSent === true || reading === undefined || reading === null || reading.complete === true || answer.req !== reading
}
