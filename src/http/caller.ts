/** The execution path's view of an HTTP request: who calls, and a signal that fires when the client goes away. */
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Logger } from 'pino'
import { type Caller, execute, type Outcome, type ToolCall } from '../execution/execute.ts'
import type { Runtime } from '../runtime.ts'
import { WorkspaceScope } from '../workspaces/scope.ts'
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
    // A call of a token revoked meanwhile ends too (a long-poll, a stream, a command).
    signal: request.principal.revoked ? AbortSignal.any([controller.signal, request.principal.revoked]) : controller.signal,
    credentials: request.headers.authorization,
    forwarded: request.forwarded,
  }
}

/**
 * One call of a request (execute, invoke) in the named persistent workspace
 * or a fresh one, removed before the answer goes out: a client that reads the
 * answer and looks again finds the workspace gone. Notes the tool the call ran.
 */
export async function runOneCall (runtime: Runtime, request: FastifyRequest, reply: FastifyReply, call: ToolCall, workspaceId: string | undefined): Promise<Outcome> {
  const caller = callerOf(request, reply)
  const workspace = new WorkspaceScope(runtime.workspaces, caller.tenant, workspaceId)
  try {
    const outcome = await execute(runtime, call, caller, workspace)
    request.toolName = outcome.tool
    return outcome
  } finally {
    await workspace.close()
  }
}
