/**
 * POST /v1/tool-calls: the calls of one model turn, in any of the call
 * shapes, answered with per-call results and ready-made tool messages (and,
 * for Anthropic, the one user message that carries them).
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { type Static, Type } from '@sinclair/typebox'
import { type Caller, execute, type Outcome } from '../../execution/execute.ts'
import { Limiter, mapWithConcurrency } from '../../execution/limiter.ts'
import type { Runtime } from '../../runtime.ts'
import { WorkspaceScope } from '../../workspaces/scope.ts'
import { toProblem, ToolError } from '../../errors.ts'
import { callIdOf, callNameOf, parseCall } from '../../formats/calls.ts'
import { anthropicUserMessage, MESSAGE_FORMATS, type MessageFormat, toolMessage } from '../../formats/messages.ts'
import { callerOf } from '../caller.ts'
import { inviteRetry } from '../plugins/idempotency.ts'
import { AnyJson, JsonObject, problems } from '../schemas.ts'

/** A call's answer that its caller is to retry: the call was refused or stopped before its own answer. */
const RETRY_INVITED: ReadonlySet<string> = new Set(['Overloaded', 'Unauthorized'])

/** The longest delay a Node timer takes: a batch's call waits for its siblings for as long as they run. */
const MAX_TIMER_MS = 2 ** 31 - 1

/** More calls than this in one turn is not a model turn. */
export const MAX_BATCH_CALLS = 256

const BatchBody = Type.Object({
  calls: Type.Array(AnyJson, { maxItems: MAX_BATCH_CALLS, description: `Calls in the native, OpenAI Chat Completions, OpenAI Responses or Anthropic shape; at most ${MAX_BATCH_CALLS} (more: 400 BadRequest)` }),
  workspace: Type.Optional(Type.String()),
  format: Type.Optional(Type.Unsafe<MessageFormat>({ type: 'string', enum: [...MESSAGE_FORMATS], description: 'Format of the ready-made messages (default native)' })),
  parallel: Type.Optional(Type.Boolean({ description: 'Run the calls concurrently, at most limits.max_concurrent at once (default: in order)' })),
}, { additionalProperties: false })

const BatchResult = Type.Object({
  id: Type.String(),
  name: Type.String(),
  ok: Type.Boolean(),
  status: Type.Integer(),
  result: Type.Optional(AnyJson),
  error: Type.Optional(JsonObject),
  truncated: Type.Boolean(),
  duration_ms: Type.Number(),
})

const BatchReply = Type.Object({
  results: Type.Array(BatchResult),
  messages: Type.Array(JsonObject),
  message: Type.Optional(Type.Object({ role: Type.Literal('user'), content: Type.Array(JsonObject) }, { description: 'format anthropic: the one user message holding the tool_result blocks' })),
})

/**
 * For a parallel batch: the turn a call of a tool with a limiter of its own
 * (spawn's refuses at once when full) takes among the batch's other calls of
 * it, so that the batch's own calls wait for each other rather than refuse
 * each other, as they do at the service's limiter.
 */
function siblingTurns (runtime: Runtime): (toolName: string) => Limiter | undefined {
  const turns = new Map<Limiter, Limiter>()
  return (toolName) => {
    const own = runtime.registry.get(toolName)?.limiter
    if (own === undefined) return undefined
    let turn = turns.get(own)
    if (turn === undefined) {
      turn = new Limiter({ name: own.options.name, maxConcurrent: own.options.maxConcurrent, maxQueue: MAX_BATCH_CALLS, queueTimeoutMs: MAX_TIMER_MS })
      turns.set(own, turn)
    }
    return turn
  }
}

async function runItem (runtime: Runtime, item: unknown, index: number, caller: Caller, workspace: WorkspaceScope, turnOf?: (toolName: string) => Limiter | undefined): Promise<{ id: string, outcome: Outcome }> {
  let call
  try {
    call = parseCall(item, index)
  } catch (error) {
    return { id: callIdOf(item, index), outcome: { ok: false, tool: callNameOf(item), error: error as ToolError, durationMs: 0, workspace: null } }
  }
  // A call cancelled while it waits for its turn goes on to execute, which answers the cancellation.
  const release = await turnOf?.(call.name)?.acquire(caller.signal).catch(() => undefined)
  try {
    return { id: call.id, outcome: await execute(runtime, call, caller, workspace) }
  } finally {
    release?.()
  }
}

function batchResult (id: string, outcome: Outcome, requestId: string): Static<typeof BatchResult> {
  if (outcome.ok) {
    return { id, name: outcome.tool, ok: true, status: 200, result: outcome.result, truncated: outcome.truncated, duration_ms: outcome.durationMs }
  }
  const error = toProblem(outcome.error, requestId, outcome.tool || undefined)
  return { id, name: outcome.tool, ok: false, status: outcome.error.status, error, truncated: false, duration_ms: outcome.durationMs }
}

export const toolCallRoutes: FastifyPluginAsyncTypebox<{ runtime: Runtime }> = async (app, { runtime }) => {
  app.post('/v1/tool-calls', {
    config: { idempotent: true, toolsCalled: (request) => (request.body as { calls: unknown[] }).calls.map(callNameOf) },
    schema: { summary: 'Run the tool calls of one model turn', tags: ['tools'], body: BatchBody, response: { 200: BatchReply, ...problems(400, 401, 413) } },
  }, async (request, reply) => {
    const caller = callerOf(request, reply)
    const workspace = new WorkspaceScope(runtime.workspaces, caller.tenant, request.body.workspace)
    workspace.validate()
    try {
      const calls = request.body.calls
      // A parallel batch takes at most the limiter's width, so its own calls wait for each other
      // instead of filling the limiter's queue and being refused; so do its calls of a tool with a limit of its own.
      const parallel = request.body.parallel === true
      const turnOf = parallel ? siblingTurns(runtime) : undefined
      const run = (item: unknown, index: number) => runItem(runtime, item, index, caller, workspace, turnOf)
      const width = parallel ? runtime.config.limits.max_concurrent : 1
      const done = await mapWithConcurrency(calls, width, run)
      // A batch none of whose calls ran to an answer of its own (each refused, stopped by a shutdown's drain,
      // or cut by its token's revocation) is to be retried; one some of whose calls did is kept, so that none runs twice.
      if (done.length > 0 && done.every(({ outcome }) => !outcome.ok && RETRY_INVITED.has(outcome.error.code))) inviteRetry(request)
      // A call refused as Overloaded has a Retry-After; the batch, answered 200, carries the longest of its calls'.
      const retryAfter = Math.max(...done.map(({ outcome }) => outcome.ok ? 0 : outcome.error.retryAfterSeconds ?? 0))
      if (retryAfter > 0) reply.header('retry-after', String(retryAfter))
      const format = request.body.format ?? 'native'
      const messages = done.map(({ id, outcome }) => toolMessage(id, outcome, format))
      const results = done.map(({ id, outcome }) => batchResult(id, outcome, request.id))
      return format === 'anthropic' ? { results, messages, message: anthropicUserMessage(messages) } : { results, messages }
    } finally {
      await workspace.close()
    }
  })
}
