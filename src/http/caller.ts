/** The execution path's view of an HTTP request: who calls, and a signal that fires when the client goes away. */
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Logger } from 'pino'
import type { Caller } from '../execution/execute.ts'
import { holdsIdempotencyKey } from './plugins/idempotency.ts'

export function callerOf (request: FastifyRequest, reply: FastifyReply): Caller {
  const controller = new AbortController()
  // 'close' also fires after a normal response; only an unfinished one means the client left.
  // A request with an Idempotency-Key runs on: its answer is stored for the retry, which must not run it again.
  if (!holdsIdempotencyKey(request)) reply.raw.once('close', () => { if (!reply.raw.writableFinished) controller.abort() })
  return {
    tenant: request.principal.tenant,
    scope: request.principal.scope,
    requestId: request.id,
    log: request.log as Logger,
    signal: controller.signal,
  }
}
