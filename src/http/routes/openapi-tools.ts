/**
 * Each tool as an OpenAPI operation, for OpenAPI tool-server clients (Open
 * WebUI and the like): `GET /v1/openapi/tools.json` describes one
 * `POST /v1/tools/{name}/invoke` per tool in the caller's catalog, whose
 * body is the arguments themselves and whose answer is the bare result.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from '@sinclair/typebox'
import type { AnyTool } from '../../execution/tool.ts'
import type { Runtime } from '../../runtime.ts'
import { VERSION } from '../../version.ts'
import { runOneCall } from '../caller.ts'
import { sendProblem } from '../plugins/problem.ts'
import { AnyJson, JsonObject, problems } from '../schemas.ts'

/** The header that names a persistent workspace for an invocation (the body is all arguments). */
export const WORKSPACE_HEADER = 'toolport-workspace'

const NameParams = Type.Object({ name: Type.String({ minLength: 1, maxLength: 256 }) })

const problemResponse = { description: 'A problem (RFC 9457)', content: { 'application/problem+json': { schema: { $ref: '#/components/schemas/Problem' } } } }

function operationOf (tool: AnyTool): Record<string, unknown> {
  return {
    post: {
      operationId: tool.name,
      summary: tool.description,
      description: tool.description,
      tags: [tool.source],
      parameters: [{ name: WORKSPACE_HEADER, in: 'header', required: false, description: 'A persistent workspace id; without it the call runs in a fresh workspace', schema: { type: 'string' } }],
      requestBody: { required: true, content: { 'application/json': { schema: tool.parameters } } },
      responses: {
        200: { description: 'The tool\'s result', content: { 'application/json': { schema: {} } } },
        default: problemResponse,
      },
    },
  }
}

/** The OpenAPI 3.1 document of the tools `tools` (the caller's catalog). */
export function toolsDocument (tools: AnyTool[], withAuth: boolean): Record<string, unknown> {
  return {
    openapi: '3.1.0',
    info: { title: 'Toolport tools', version: VERSION, description: 'Each tool of this catalog as one operation: POST its arguments, get its result.' },
    paths: Object.fromEntries(tools.map((tool) => [`/v1/tools/${encodeURIComponent(tool.name)}/invoke`, operationOf(tool)])),
    components: {
      schemas: { Problem: { type: 'object', required: ['type', 'title', 'status', 'detail', 'code', 'request_id'], properties: { type: { type: 'string' }, title: { type: 'string' }, status: { type: 'integer' }, detail: { type: 'string' }, code: { type: 'string' }, request_id: { type: 'string' }, tool: { type: 'string' } } } },
      ...(withAuth ? { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } } : {}),
    },
    ...(withAuth ? { security: [{ bearer: [] }] } : {}),
  }
}

export const openApiToolRoutes: FastifyPluginAsyncTypebox<{ runtime: Runtime }> = async (app, { runtime }) => {
  app.get('/v1/openapi/tools.json', {
    schema: { summary: 'Each tool of the caller\'s catalog as an OpenAPI operation (for OpenAPI tool-server clients)', tags: ['tools'], response: { 200: JsonObject, ...problems(401) } },
  }, async (request) => toolsDocument(runtime.registry.list({ scope: request.principal.scope }), runtime.config.auth.tokens.length > 0))

  app.post('/v1/tools/:name/invoke', {
    schema: {
      summary: 'Run one tool call with the arguments as the body; answers the bare result',
      tags: ['tools'],
      params: NameParams,
      headers: Type.Object({ [WORKSPACE_HEADER]: Type.Optional(Type.String()) }),
      body: JsonObject,
      response: { 200: AnyJson, ...problems(400, 401, 403, 404, 413, 500, 503, 504) },
    },
  }, async (request, reply) => {
    const outcome = await runOneCall(runtime, request, reply, { name: request.params.name, arguments: request.body }, request.headers[WORKSPACE_HEADER])
    if (!outcome.ok) return sendProblem(request, reply, outcome.error)
    return outcome.result
  })
}
