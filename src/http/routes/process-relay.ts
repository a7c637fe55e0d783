/**
 * A request about a process that another instance runs, passed on to that
 * instance as the caller sent it (with the caller's credentials), and its
 * answer passed back as it comes, an event stream included.
 */
import type { FastifyReply, FastifyRequest } from 'fastify'
import { ToolError } from '../../errors.ts'
import { type Owner, OwnerGone, type Peers, type Unreachable } from '../../processes/peers.ts'
import type { ProcessInfo } from '../../processes/managed-process.ts'
import { relayEvents, wantsEvents } from './process-events.ts'

/** What to ask the owner: the path and query rebuilt from the request's checked parts, never its raw URL. */
export interface RelayTarget {
  path: string
  /** How long the owner may take beyond connecting: the long-poll asked for, a kill's grace. */
  waitMs: number
  /** The process as a lost one: the end of an event stream the owner stops sending mid-way. */
  lost: ProcessInfo
  /**
   * Fires when this instance begins to stop (its drain): a GET still relayed then ends, for the caller
   * to ask again (another instance answers): a wait as 503 Overloaded, an event stream closed without
   * its end, so that an EventSource comes back with its Last-Event-ID. A GET changes nothing at the
   * owner; a POST (input, a kill) it may have acted on is let finish, never to be sent twice.
   */
  stop: AbortSignal
  /** How long a client may take nothing of a relayed event stream before it is cut (request_timeout_ms). */
  stalledAfterMs: number
}

/**
 * Relays `request` to the instance at `owner` and answers with what it
 * answered: true. With nothing sent, why that instance could not answer for
 * the process (it does not answer, or does not know the process): it is lost.
 * `cut`: an event stream it stopped sending mid-way, ended as a lost one's.
 */
export async function relay (peers: Peers, owner: Owner, target: RelayTarget, request: FastifyRequest, reply: FastifyReply): Promise<true | 'cut' | Unreachable> {
  const left = new AbortController()
  reply.raw.once('close', () => { if (!reply.raw.writableFinished) left.abort() })
  const lastEventId = request.headers['last-event-id']
  const events = wantsEvents(request)
  const stop = request.method === 'GET' ? target.stop : undefined
  let answer
  try {
    answer = await peers.send(owner, {
      method: request.method === 'POST' ? 'POST' : 'GET',
      path: target.path,
      credentials: request.headers.authorization,
      body: request.method === 'POST' ? request.body : undefined,
      accept: request.headers.accept,
      lastEventId: Array.isArray(lastEventId) ? lastEventId[0] : lastEventId,
      requestId: request.id,
      waitMs: target.waitMs,
      stream: events,
      signal: stop === undefined ? left.signal : AbortSignal.any([left.signal, stop]),
    })
  } catch (error) {
    if (error instanceof OwnerGone) return error.reason
    if (stop?.aborted === true && !left.signal.aborted) throw new ToolError('Overloaded', 'this instance is shutting down: ask again', { retryAfterSeconds: 1 })
    throw error
  }
  if (answer.status === 404) {
    // The run that started it does not know it (yet: a record is written before its start is answered).
    await answer.body.dump()
    return 'unanswered'
  }
  if (events && answer.status === 200) return await relayEvents(request, reply, answer.body, target) ? true : 'cut'
  reply.code(answer.status)
  if (answer.contentType !== undefined) reply.header('content-type', answer.contentType)
  await reply.send(answer.body)
  return true
}
