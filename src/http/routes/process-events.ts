/**
 * A process's output as Server-Sent Events: one event per chunk (`event:
 * stdout|stderr`, `id:` the cursor after it, `data:` the text as a JSON
 * string), then `event: end` with the process object once it has ended and
 * everything is sent. A comment goes out after every KEEPALIVE_MS without
 * output, so proxies keep the stream open. The client leaving ends the
 * stream, never the process.
 */
import { once } from 'node:events'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { ManagedProcess, ProcessInfo } from '../../processes/managed-process.ts'
import { callerOf } from '../caller.ts'

const KEEPALIVE_MS = 15_000
/** What ends each event and comment of a stream (this service writes no other line ends). */
const EVENT_END = '\n\n'

/** Whether the request asks for the event stream. */
export function wantsEvents (request: FastifyRequest): boolean {
  return (request.headers.accept ?? '').includes('text/event-stream')
}

/** A cursor or count as the output's query takes it: decimal digits, at most 15 (so below 2^53). */
export const COUNT_PATTERN = '^[0-9]{1,15}$'
const COUNT = new RegExp(COUNT_PATTERN)

/** The cursor a stream starts from: `Last-Event-ID` (a reconnecting EventSource sends it) over `after`, when it is one. */
export function eventsCursor (request: FastifyRequest, after: number): number {
  const last = request.headers['last-event-id']
  const value = Array.isArray(last) ? last[0] : last
  return value !== undefined && COUNT.test(value) ? Number(value) : after
}

/** The event stream of a process that has no output to give (it was lost): only its `end` event. */
export function endStream (request: FastifyRequest, reply: FastifyReply, info: ProcessInfo): void {
  reply.hijack()
  reply.raw.writeHead(200, eventStreamHeaders(request))
  reply.raw.end(endEvent(info))
}

/**
 * Passes on the event stream of a process another instance runs (`body`, as
 * that instance sends it), whole events only: when that instance stops
 * answering mid-way, the part of an event it had sent is dropped and the
 * stream ends as a lost process's does, with `lost` as its `end` event:
 * false then. A client that leaves ends it too, as it would any stream; so
 * does `stop` (this instance is stopping), without an end.
 */
export async function relayEvents (request: FastifyRequest, reply: FastifyReply, body: AsyncIterable<Buffer>, { lost, stop, stalledAfterMs }: { lost: ProcessInfo, stop: AbortSignal, stalledAfterMs: number }): Promise<boolean> {
  const { raw, gone, send } = openStream(request, reply, stalledAfterMs)
  let partial = Buffer.alloc(0)
  try {
    for await (const chunk of body) {
      const received = Buffer.concat([partial, chunk])
      const last = received.lastIndexOf(EVENT_END)
      const whole = last === -1 ? 0 : last + EVENT_END.length
      partial = received.subarray(whole)
      if (whole > 0) await send(received.subarray(0, whole))
    }
    raw.end()
    return true
  } catch {
    if (gone.aborted) return true
    // This instance is stopping, not the owner: no end, so that the client follows on at another instance.
    if (stop.aborted) {
      raw.end()
      return true
    }
    raw.end(endEvent(lost))
    return false
  }
}

/**
 * Answers with an event stream: its status and headers go now, not with the
 * first event (a quiet process may not write for a while). `gone` is aborted
 * when the client leaves or its token is revoked; `send` waits while the
 * client is behind.
 */
function openStream (request: FastifyRequest, reply: FastifyReply, stalledAfterMs: number): { raw: FastifyReply['raw'], gone: AbortSignal, send: (data: string | Buffer) => Promise<void> } {
  reply.hijack()
  const raw = reply.raw
  raw.writeHead(200, eventStreamHeaders(request))
  raw.flushHeaders()
  // The caller's signal: the client left, or its token was revoked meanwhile (a stream could follow a process for hours).
  const gone = callerOf(request, reply).signal
  if (gone.aborted) raw.end()
  else gone.addEventListener('abort', () => { raw.end() }, { once: true })
  // A client that takes nothing of the stream for `stalledAfterMs` (request_timeout_ms) would hold its bytes and
  // socket for good (through the process's end and its workspace's deletion): it is cut, as any answer is (app.ts).
  const send = async (data: string | Buffer): Promise<void> => {
    if (raw.write(data)) return
    const stalled = AbortSignal.timeout(stalledAfterMs)
    await once(raw, 'drain', { signal: AbortSignal.any([gone, stalled]) }).catch(() => {})
    if (stalled.aborted && !gone.aborted) raw.destroy()
  }
  return { raw, gone, send }
}

function eventStreamHeaders (request: FastifyRequest): Record<string, string> {
  return {
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-cache',
    'x-accel-buffering': 'no',
    'x-request-id': request.id,
  }
}

const endEvent = (info: ProcessInfo): string => `event: end\ndata: ${JSON.stringify(info)}\n\n`

export async function streamOutput (request: FastifyRequest, reply: FastifyReply, process: ManagedProcess, from: number, maxBytes: number, stalledAfterMs: number): Promise<void> {
  const { raw, gone, send } = openStream(request, reply, stalledAfterMs)
  let cursor = from
  let lastSent = Date.now()
  while (!gone.aborted) {
    const read = process.output.read(cursor, maxBytes)
    cursor = read.next
    if (read.chunks.length > 0) {
      const events = read.chunks.map((chunk, i) => `event: ${chunk.stream}\nid: ${read.chunks[i + 1]?.offset ?? read.next}\ndata: ${JSON.stringify(chunk.data)}\n\n`)
      await send(events.join(''))
      lastSent = Date.now()
      continue
    }
    if (!process.running) {
      raw.end(endEvent(process.info()))
      return
    }
    await process.waitForChange(KEEPALIVE_MS - (Date.now() - lastSent), gone)
    // Quiet for KEEPALIVE_MS (output before a cursor asked for past it counts as quiet): a comment keeps the connection.
    if (process.running && Date.now() - lastSent >= KEEPALIVE_MS && !gone.aborted) {
      await send(': keep-alive\n\n')
      lastSent = Date.now()
    }
  }
}
