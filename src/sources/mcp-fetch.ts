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
const callScope = new AsyncLocalStorage<{ signal: AbortSignal, claimed: boolean }>()

/**
 * Runs `call` (one request through the SDK) so that the request it sends
 * stops, answer and all, when `signal` aborts. Only that first fetch: a
 * cancellation the SDK sends afterwards must still reach the server.
 */
export function runTiedTo<T> (signal: AbortSignal, call: () => Promise<T>): Promise<T> {
  return callScope.run({ signal, claimed: false }, call)
}

export const boundedFetch: FetchLike = async (url, init) => {
  const scope = callScope.getStore()
  let signal = init?.signal ?? undefined
  if (scope && !scope.claimed) {
    scope.claimed = true
    signal = signal ? AbortSignal.any([signal, scope.signal]) : scope.signal
  }
  const response = await fetch(url, { ...init, signal })
  if (response.body === null) return response
  const events = response.headers.get('content-type')?.split(';')[0]?.trim().toLowerCase() === 'text/event-stream'
  return new Response(response.body.pipeThrough(messagesOfAtMost(MAX_MESSAGE_BYTES, events)), {
    status: response.status,
    statusText: response.statusText,
    headers: response.headers,
  })
}

/**
 * Passes a body through while no message in it is longer than `maxBytes`:
 * the whole body, or with `events` each event of an event stream (the bytes
 * between blank lines).
 */
function messagesOfAtMost (maxBytes: number, events: boolean): TransformStream<Uint8Array, Uint8Array> {
  let held = 0
  // The part of the current line seen in earlier chunks: its length, and whether it is one CR.
  let carried = 0
  let carriedCr = false
  return new TransformStream({
    transform (chunk, controller) {
      held += chunk.length
      if (events) {
        let start = 0
        for (let lf = chunk.indexOf(10); lf !== -1; lf = chunk.indexOf(10, lf + 1)) {
          const length = carried + lf - start
          const blank = length === 0 || (length === 1 && (carriedCr || chunk[start] === 13))
          // A blank line ends an event: what follows it starts the next.
          if (blank) held = chunk.length - lf - 1
          carried = 0
          carriedCr = false
          start = lf + 1
        }
        carriedCr = carried + chunk.length - start === 1 && (carried === 1 ? carriedCr : chunk[start] === 13)
        carried += chunk.length - start
      }
      if (held > maxBytes) controller.error(new Error(`the server sent a message longer than ${maxBytes / 1024 / 1024} MiB`))
      else controller.enqueue(chunk)
    },
  })
}
