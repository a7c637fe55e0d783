/**
 * Processes that outlive a request: start, list, status, output (JSON with
 * a cursor and long-poll, or Server-Sent Events), stdin and kill, under
 * /v1/workspaces/{id}/processes. Each endpoint counts as its tool for token
 * scopes, and answers 404 when the process tools are off.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from '@sinclair/typebox'
import type { FastifyReply, FastifyRequest } from 'fastify'
import { abortReason, ToolError } from '../../errors.ts'
import { KILL_GRACE_MS, KILL_SIGNALS, type ManagedProcess, type ProcessInfo } from '../../processes/managed-process.ts'
import { type Asker, lostInfo } from '../../processes/process-locator.ts'
import type { Runtime } from '../../runtime.ts'
import { validateWorkspaceId } from '../../workspaces/ids.ts'
import { callerOf } from '../caller.ts'
import { installJsonBody } from '../plugins/json-body.ts'
import { problems } from '../schemas.ts'
import { COUNT_PATTERN, endStream, eventsCursor, streamOutput, wantsEvents } from './process-events.ts'
import { relay } from './process-relay.ts'

const MAX_WAIT_MS = 30_000
const Nullable = <T extends ReturnType<typeof Type.String> | ReturnType<typeof Type.Integer>>(schema: T) => Type.Union([schema, Type.Null()])

const ProcessObject = Type.Object({
  id: Type.String(),
  workspace: Nullable(Type.String()),
  command: Type.String(),
  state: Type.Unsafe<string>({ type: 'string', enum: ['running', 'exited', 'killed', 'timed_out', 'lost'] }),
  exit_code: Nullable(Type.Integer()),
  signal: Nullable(Type.String()),
  started_at: Type.String(),
  ended_at: Nullable(Type.String()),
  next: Type.Integer({ description: 'The output cursor: bytes of output produced so far' }),
})

const WorkspaceParams = Type.Object({ id: Type.String() })
const ProcessParams = Type.Object({ id: Type.String(), pid: Type.String() })

const StartBody = Type.Object({
  command: Type.String({ description: 'Shell command (sh -c)' }),
  timeout: Type.Optional(Type.Number({ exclusiveMinimum: 0, description: 'Seconds; default tools.processes.timeout_default, clamped to timeout_max' })),
  stdin: Type.Optional(Type.Boolean({ description: 'Keep stdin open for POST …/input' })),
}, { additionalProperties: false })

// Query strings are not coerced (the service validates types strictly): integers come as digit strings.
const Count = (description: string) => Type.Optional(Type.String({ pattern: COUNT_PATTERN, description }))
const OutputQuery = Type.Object({
  after: Count('A cursor (default 0)'),
  wait_ms: Count(`Milliseconds (0–${MAX_WAIT_MS}) to wait for output when there is none yet`),
  max_bytes: Count('Bytes of chunk data at most (default and ceiling limits.max_result_bytes)'),
})

const Output = Type.Object({
  process: ProcessObject,
  chunks: Type.Array(Type.Object({ stream: Type.String(), offset: Type.Integer(), data: Type.String() })),
  next: Type.Integer(),
  dropped_bytes: Type.Integer(),
})

const InputBody = Type.Object({
  data: Type.Optional(Type.String()),
  eof: Type.Optional(Type.Boolean()),
}, { additionalProperties: false })

const KillBody = Type.Object({
  signal: Type.Optional(Type.Unsafe<typeof KILL_SIGNALS[number]>({ type: 'string', enum: [...KILL_SIGNALS] })),
}, { additionalProperties: false })

const tags = ['processes']

/** The query's digit strings as numbers. */
function numbers (query: Record<string, string | undefined>): Record<string, number | undefined> {
  return Object.fromEntries(Object.entries(query).map(([key, value]) => [key, value === undefined ? undefined : Number(value)]))
}

export const processRoutes: FastifyPluginAsyncTypebox<{ runtime: Runtime }> = async (app, { runtime }) => {
  const table = runtime.processes
  const locator = runtime.processLocator
  // kill and input may come without a body: all their members are optional.
  installJsonBody(app, () => ({}))

  /** The endpoint counts as tool `name`: absent (processes off) is 404, out of the token's scope 403. */
  const allow = (request: FastifyRequest, name: string): void => {
    if (!runtime.registry.get(name)) throw new ToolError('NotFound', 'processes are off here: tools.builtin does not choose the process tools')
    if (!request.principal.scope(name)) throw new ToolError('PermissionDenied', `this token's allowed tools do not include ${name}`)
  }
  const askerIn = (request: FastifyRequest, id: string, dir: string): Asker =>
    ({ tenant: request.principal.tenant, workspace: id, dir, credentials: request.headers.authorization, forwarded: request.forwarded, requestId: request.id })
  const askerOf = async (request: FastifyRequest, id: string): Promise<Asker> => askerIn(request, id, (await runtime.workspaces.find(request.principal.tenant, id)).dir)
  /**
   * Answers a request about one process: `here` when this instance runs it;
   * forwarded to the instance that runs it, and its answer passed on; `lost`
   * (with the process object) when that instance does not answer or no longer knows it.
   */
  const onProcess = async <R>(request: FastifyRequest, reply: FastifyReply, name: string, forward: { action: string, query?: string, waitMs: number }, here: (process: ManagedProcess) => R | Promise<R>, lost: (info: ProcessInfo) => R | Promise<R>): Promise<R | undefined> => {
    allow(request, name)
    const { id, pid } = request.params as { id: string, pid: string }
    const located = await locator.locate(await askerOf(request, id), pid)
    if (located.where === 'here') return await here(located.process)
    if (located.where === 'elsewhere') {
      const path = `/v1/workspaces/${encodeURIComponent(id)}/processes/${encodeURIComponent(pid)}${forward.action}${forward.query ?? ''}`
      const relayed = await relay(locator.peers, located.owner, { path, waitMs: forward.waitMs, lost: lostInfo(located.record), stop: runtime.drainSignal, stalledAfterMs: runtime.config.server.request_timeout_ms }, request, reply)
      if (relayed === true) {
        locator.silences.answered(request.principal.tenant, located.record)
        return undefined
      }
      locator.silences.unreachable(request.principal.tenant, located.record, relayed === 'cut' ? 'unanswered' : relayed)
      if (relayed === 'cut') return undefined
    }
    return await lost(lostInfo(located.record))
  }

  app.post('/v1/workspaces/:id/processes', {
    config: { idempotent: true, toolsCalled: () => ['process_start'] },
    schema: { summary: 'Start a process', tags, params: WorkspaceParams, body: StartBody, response: { 201: ProcessObject, ...problems(400, 401, 403, 404, 500, 503) } },
  }, async (request, reply) => {
    allow(request, 'process_start')
    const { id } = request.params
    validateWorkspaceId(id)
    // Where another instance runs a process of the workspace, its network is there: so is the new one
    // (the workspace may not exist yet: a start makes it, there or here).
    const asker = askerIn(request, id, '')
    const started = await locator.startAtHome(asker, {
      there: async (owner) => await locator.startThere(owner, request.body, asker),
      here: async () => (await table.start({ tenant: request.principal.tenant, id }, request.body)).info(),
    })
    return reply.code(201).header('location', `${request.url.split('?')[0]}/${started.id}`).send(started)
  })

  app.get('/v1/workspaces/:id/processes', {
    schema: { summary: 'The running processes and the last ended ones, oldest first', tags, params: WorkspaceParams, response: { 200: Type.Object({ processes: Type.Array(ProcessObject) }), ...problems(400, 401, 403, 404) } },
  }, async (request) => {
    allow(request, 'process_list')
    return { processes: await locator.list(await askerOf(request, request.params.id)) }
  })

  app.get('/v1/workspaces/:id/processes/:pid', {
    schema: { summary: 'One process', tags, params: ProcessParams, response: { 200: ProcessObject, ...problems(400, 401, 403, 404, 503) } },
  }, (request, reply) => onProcess(request, reply, 'process_output', { action: '', waitMs: 0 }, (found) => found.info(), (info) => info))

  app.get('/v1/workspaces/:id/processes/:pid/output', {
    schema: {
      summary: 'Output after a cursor (JSON, or Server-Sent Events with Accept: text/event-stream)',
      tags,
      params: ProcessParams,
      querystring: OutputQuery,
      response: {
        200: {
          description: 'The output as JSON; with Accept: text/event-stream, Server-Sent Events: one `stdout` or `stderr` event a chunk (`id`: the cursor after it, `data`: its text as a JSON string), then one `end` event with the process object',
          content: { 'application/json': { schema: Output }, 'text/event-stream': { schema: Type.String() } },
        },
        ...problems(400, 401, 403, 404, 503),
      },
    },
  }, async (request, reply) => {
    const { after = 0, wait_ms: waitMs = 0, max_bytes: askedBytes = runtime.maxResultBytes } = numbers(request.query)
    if (waitMs > MAX_WAIT_MS) throw new ToolError('BadRequest', `wait_ms must be at most ${MAX_WAIT_MS}`)
    if (askedBytes < 1) throw new ToolError('BadRequest', 'max_bytes must be at least 1')
    const maxBytes = Math.min(askedBytes, runtime.maxResultBytes)
    const from = eventsCursor(request, after)
    const query = `?after=${after}&wait_ms=${waitMs}&max_bytes=${maxBytes}`
    return await onProcess(request, reply, 'process_output', { action: '/output', query, waitMs }, async (found) => {
      if (wantsEvents(request)) return await streamOutput(request, reply, found, from, maxBytes, runtime.config.server.request_timeout_ms)
      if (after >= found.output.end) {
        // Until the client leaves, or its token is revoked (then 401).
        await found.waitForChange(waitMs, callerOf(request, reply).signal)
        const revoked = abortReason(request.principal.revoked)
        if (revoked) throw revoked
      }
      const read = found.output.read(after, maxBytes)
      return { process: found.info(), chunks: read.chunks, next: read.next, dropped_bytes: read.dropped }
    }, (info) => wantsEvents(request) ? endStream(request, reply, info) : { process: info, chunks: [], next: after, dropped_bytes: 0 })
  })

  app.post('/v1/workspaces/:id/processes/:pid/input', {
    schema: { summary: 'Write to stdin, or close it', tags, params: ProcessParams, body: InputBody, response: { 200: ProcessObject, ...problems(400, 401, 403, 404, 409, 413) } },
  }, (request, reply) => onProcess(request, reply, 'process_input', { action: '/input', waitMs: 0 }, (found) => {
    found.input(request.body.data, request.body.eof === true)
    return found.info()
  }, () => { throw new ToolError('Conflict', `process ${request.params.pid} was lost: the instance that ran it is gone`) }))

  app.post('/v1/workspaces/:id/processes/:pid/kill', {
    schema: { summary: 'Stop a process and its whole tree; answers once it has ended', tags, params: ProcessParams, body: KillBody, response: { 200: ProcessObject, ...problems(400, 401, 403, 404, 413) } },
  }, (request, reply) => onProcess(request, reply, 'process_kill', { action: '/kill', waitMs: KILL_GRACE_MS }, async (found) => {
    await found.kill(request.body.signal ?? 'TERM')
    return found.info()
  }, (info) => info))
}
