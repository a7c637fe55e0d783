/**
 * The fetch an HTTP MCP connection makes its requests with. An upstream's
 * answer is read up to 10 MiB a message (a JSON body whole, or one event of
 * an event stream), as the SDK bounds a stdio server's messages; past it the
 * stream fails and its connection is closed. And a tool call's own request
 * ends with the call: the SDK, on a timeout or a cancellation, only tells
 * the server, and would otherwise read the answer for as long as it came.
 */
import { AsyncLocalStorage } from 'node:async_hooks'
import type { FetchLike } from '@modelcontextprotocol/sdk/shared/transport.js'
import { STDIO_DEFAULT_MAX_BUFFER_SIZE } from '@modelcontextprotocol/sdk/shared/stdio.js'

export const MAX_MESSAGE_BYTES = STDIO_DEFAULT_MAX_BUFFER_SIZE

/** The call whose request the next fetch in this async context is; claimed by that fetch. */
const callScope = new AsyncLocalStorage<{ signal: AbortSignal, claimed: boolean, broken: AbortController }>()

/**
 * Runs `call` (one request through the SDK) so that the request it sends
 * stops, answer and all, when `signal` aborts. Only that first fetch: a
 * cancellation the SDK sends afterwards must still reach the server.
 * `call` is given a signal that aborts when that request's answer turns
 * out too long, and then fails with that error: an answer on an event
 * stream fails only the stream in the SDK, whose call would wait out its
 * timeout (and the SDK reports an abort as a timeout).
 */
export async function runTiedTo<T> (signal: AbortSignal, call: (broken: AbortSignal) => Promise<T>): Promise<T> {
  const broken = new AbortController()
  try {
    return await callScope.run({ signal, claimed: false, broken }, () => call(broken.signal))
  } catch (error) {
    throw broken.signal.aborted ? broken.signal.reason : error
  }
}

export const boundedFetch: FetchLike = async (url, init) => {
  const scope = callScope.getStore()
  const tied = scope !== undefined && !scope.claimed
  let signal = init?.signal ?? undefined
  if (tied) {
    scope.claimed = true
    signal = signal ? AbortSignal.any([signal, scope.signal]) : scope.signal
  }
  const response = await fetch(url, { ...init, signal })
  // The SDK follows a redirect (`/mcp` → `/mcp/`) with a fetch of its own: that one is the call's request.
  if (tied && response.status >= 300 && response.status < 400) scope.claimed = false
  if (response.body === null) return response
  const events = response.headers.get('content-type')?.split(';')[0]?.trim().toLowerCase() === 'text/event-stream'
  const tooLong = tied ? (error: Error) => { scope.broken.abort(error) } : () => {}
  return new Response(response.body.pipeThrough(messagesOfAtMost(MAX_MESSAGE_BYTES, events, tooLong)), {
    status: response.status,
    statusText: response.statusText,
    headers: response.headers,
  })
}

/**
 * Passes a body through while no message in it is longer than `maxBytes`:
 * the whole body, or with `events` each event of an event stream (the bytes
 * up to a blank line; a line ends with CR LF, LF or CR, as SSE says). Past
 * it, the stream fails and `onTooLong` is told.
 */
function messagesOfAtMost (maxBytes: number, events: boolean, onTooLong: (error: Error) => void): TransformStream<Uint8Array, Uint8Array> {
  const tooLong = new Error(`the server sent a message longer than ${maxBytes / 1024 / 1024} MiB`)
  const fail = (controller: TransformStreamDefaultController<Uint8Array>): void => {
    controller.error(tooLong)
    onTooLong(tooLong)
  }
  // Bytes of the current message before this chunk; of the current line; whether the last byte seen was a CR ending a line (an LF next is its pair).
  let held = 0
  let lineBytes = 0
  let afterCr = false
  return new TransformStream({
    transform (chunk, controller) {
      // Where the current message starts in this chunk.
      let start = 0
      if (events) {
        let position = 0
        let lf = chunk.indexOf(10)
        let cr = chunk.indexOf(13)
        while (lf !== -1 || cr !== -1) {
          const at = lf === -1 ? cr : cr === -1 ? lf : Math.min(lf, cr)
          const gap = at - position
          if (at === lf && afterCr && gap === 0) {
            afterCr = false
          } else {
            lineBytes += gap
            // An empty line ends an event: what follows it starts the next.
            if (lineBytes === 0) {
              if (held + at + 1 - start > maxBytes) return fail(controller)
              held = 0
              start = at + 1
            }
            lineBytes = 0
            afterCr = at === cr
          }
          position = at + 1
          if (at === lf) lf = chunk.indexOf(10, position)
          else cr = chunk.indexOf(13, position)
        }
        if (position < chunk.length) {
          lineBytes += chunk.length - position
          afterCr = false
        }
      }
      held += chunk.length - start
      if (held > maxBytes) fail(controller)
      else controller.enqueue(chunk)
    },
  })
}
