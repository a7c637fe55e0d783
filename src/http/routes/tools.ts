/** GET /v1/tools, GET /v1/tools/{name}, POST /v1/tools/{name}/execute. */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from '@sinclair/typebox'
import { allowedFilter } from '../../execution/globs.ts'
import type { Runtime } from '../../runtime.ts'
import { ToolError } from '../../errors.ts'
import { catalog, CATALOG_FORMATS, type CatalogFormat, nativeEntry } from '../../formats/catalog.ts'
import { runOneCall } from '../caller.ts'
import { notModified } from '../etag.ts'
import { sendProblem } from '../plugins/problem.ts'
import { AnyJson, JsonObject, problems, ToolEntry, ToolNameParams } from '../schemas.ts'

const CatalogQuery = Type.Object({
  format: Type.Optional(Type.Unsafe<CatalogFormat>({ type: 'string', enum: [...CATALOG_FORMATS], description: 'Envelope of each tool (default native)' })),
  allowed: Type.Optional(Type.String({ description: 'Comma-separated globs over tool names; the only way to see internal_only MCP tools' })),
  strict: Type.Optional(Type.Union([Type.Literal('true'), Type.Literal('false')], { description: 'OpenAI strict mode (formats openai and responses): strict schemas, and `strict` on each function' })),
})

const NotModified = Type.Null({ description: 'Not modified: the If-None-Match ETag is current' })

const ExecuteBody = Type.Object({
  arguments: Type.Optional(Type.Unsafe<unknown>({ description: 'The tool arguments: an object, or its JSON as a string (as OpenAI sends it)' })),
  workspace: Type.Optional(Type.String({ description: 'A persistent workspace id; without it the call runs in a fresh workspace removed afterwards' })),
  max_result_bytes: Type.Optional(Type.Integer({ minimum: 1, description: 'Lower the result limit for this call (the configured one is the ceiling)' })),
}, { additionalProperties: false })

const ExecuteReply = Type.Object({
  tool: Type.String(),
  result: AnyJson,
  truncated: Type.Boolean(),
  duration_ms: Type.Number(),
  workspace: Type.Union([Type.String(), Type.Null()]),
})

/** The catalog, one tool, and one call. */
export const toolRoutes: FastifyPluginAsyncTypebox<{ runtime: Runtime }> = async (app, { runtime }) => {
  app.get('/v1/tools', {
    schema: { summary: 'The tool catalog, sorted by name', tags: ['tools'], querystring: CatalogQuery, response: { 200: Type.Object({ tools: Type.Array(JsonObject) }), 304: NotModified, ...problems(400, 401) } },
  }, async (request, reply) => {
    const tools = runtime.registry.list({ scope: request.principal.scope, allowed: allowedFilter(request.query.allowed) })
    const body = catalog(tools, request.query.format ?? 'native', { strict: request.query.strict === 'true' })
    return notModified(request, reply, body) ? reply : body
  })

  app.get('/v1/tools/:name', {
    schema: { summary: 'One tool', tags: ['tools'], params: ToolNameParams, response: { 200: ToolEntry, 304: NotModified, ...problems(401, 404) } },
  }, async (request, reply) => {
    const tool = runtime.registry.get(request.params.name)
    // Out of scope looks exactly like absent: a token must not learn what it cannot use.
    if (!tool || !request.principal.scope(tool.name)) throw new ToolError('NotFound', `no tool named ${JSON.stringify(request.params.name)}`)
    request.toolName = tool.name
    const body = nativeEntry(tool)
    return notModified(request, reply, body) ? reply : body
  })

  app.post('/v1/tools/:name/execute', {
    config: { idempotent: true, toolsCalled: (request) => [(request.params as { name: string }).name] },
    schema: {
      summary: 'Run one tool call',
      tags: ['tools'],
      params: ToolNameParams,
      body: ExecuteBody,
      response: { 200: ExecuteReply, ...problems(400, 401, 403, 404, 413, 500, 503, 504) },
    },
  }, async (request, reply) => {
    const call = { name: request.params.name, arguments: request.body.arguments, maxResultBytes: request.body.max_result_bytes }
    const outcome = await runOneCall(runtime, request, reply, call, request.body.workspace)
    if (!outcome.ok) return sendProblem(request, reply, outcome.error)
    return { tool: outcome.tool, result: outcome.result, truncated: outcome.truncated, duration_ms: outcome.durationMs, workspace: outcome.workspace }
  })
}
