/**
 * Each tool as an OpenAPI operation, for OpenAPI tool-server clients (Open
 * WebUI and the like): `GET /v1/openapi/tools.json` describes one
 * `POST /v1/tools/{name}/invoke` per tool in the caller's catalog, whose
 * body is the arguments themselves and whose answer is the bare result.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from '@sinclair/typebox'
import { isUtf8 } from 'node:buffer'
import type { AnyTool, JsonSchema } from '../../execution/tool.ts'
import { authIsOn } from '../../config.ts'
import { PROBLEM_MEDIA_TYPE, ToolError } from '../../errors.ts'
import type { Runtime } from '../../runtime.ts'
import { VERSION } from '../../version.ts'
import { runOneCall } from '../caller.ts'
import { installJsonBody } from '../plugins/json-body.ts'
import { sendProblem } from '../plugins/problem.ts'
import { AnyJson, JsonObject, problems, ToolNameParams } from '../schemas.ts'

/** The header that names a persistent workspace for an invocation (the body is all arguments). */
export const WORKSPACE_HEADER = 'toolport-workspace'

/**
 * The invocation's query parameter that names it too, and the one the
 * document declares. Open WebUI offers every parameter of an operation to
 * the model as one more argument; it sends a header parameter nowhere but
 * a query parameter in the query, and both in the body with the arguments.
 * So the name is one no tool's own argument is likely to have, and the
 * body's copy of it (the same value) is not passed to the tool.
 */
const WORKSPACE_QUERY = 'toolport_workspace'

/** Whether a schema lists required properties (an operation's body is required only then). */
const requiresArguments = (schema: JsonSchema): boolean => Array.isArray(schema['required']) && schema['required'].length > 0

const PROBLEM_SCHEMA = { type: 'object', required: ['type', 'title', 'status', 'detail', 'code', 'request_id'], properties: { type: { type: 'string' }, title: { type: 'string' }, status: { type: 'integer' }, detail: { type: 'string' }, code: { type: 'string' }, request_id: { type: 'string' }, tool: { type: 'string' } } }
const problemResponse = { description: 'A problem (RFC 9457)', content: { [PROBLEM_MEDIA_TYPE]: { schema: { $ref: '#/components/schemas/Problem' } } } }

/** Keywords whose values are data, not schemas: a `$ref` in them is a value like any other. */
const DATA_KEYWORDS = new Set(['const', 'enum', 'default', 'examples', 'example'])
/** Keywords whose values name schemas: a member named `default` there is a schema. */
const SCHEMA_MAPS = new Set(['properties', 'patternProperties', '$defs', 'definitions', 'dependentSchemas'])

/**
 * `schema` with every reference by JSON pointer into itself (`#`, `#/…`)
 * made to start at `base`; undefined when it has none. An `$anchor`
 * reference resolves in the document as it does alone, and a part with an
 * `$id` of its own is a resource whose references resolve against that:
 * both are left as they are.
 */
function rebased (schema: unknown, base: string): unknown {
  let changed = false
  const walk = (value: unknown): unknown => {
    if (Array.isArray(value)) return value.map(walk)
    if (value === null || typeof value !== 'object' || '$id' in value) return value
    return Object.fromEntries(Object.entries(value).map(([key, inner]) => {
      if (key === '$ref' && typeof inner === 'string' && (inner === '#' || inner.startsWith('#/'))) {
        changed = true
        return [key, base + inner.slice(1)]
      }
      if (DATA_KEYWORDS.has(key)) return [key, inner]
      if (SCHEMA_MAPS.has(key) && inner !== null && typeof inner === 'object') return [key, Object.fromEntries(Object.entries(inner).map(([name, member]) => [name, walk(member)]))]
      return [key, walk(inner)]
    }))
  }
  const result = walk(schema)
  return changed ? result : undefined
}

/**
 * A tool's arguments schema as a part of this document. A local reference
 * in it (`#/$defs/Item`, as Pydantic writes them) would resolve from the
 * document's root, where there is none of it: such a schema is kept whole
 * under components/schemas, its references made to point there.
 */
function argumentsSchema (tool: AnyTool, schemas: Record<string, unknown>): unknown {
  const base = tool.name.replace(/[^A-Za-z0-9._-]/g, '_')
  let key = `${base}.arguments`
  for (let n = 2; key in schemas; n++) key = `${base}.arguments-${n}`
  const ref = `#/components/schemas/${key}`
  const schema = rebased(tool.parameters, ref)
  if (schema === undefined) return tool.parameters
  schemas[key] = schema
  return { $ref: ref }
}

function operationOf (tool: AnyTool, schemas: Record<string, unknown>): Record<string, unknown> {
  return {
    post: {
      operationId: tool.name,
      summary: tool.description,
      description: tool.description,
      tags: [tool.source],
      parameters: [{ name: WORKSPACE_QUERY, in: 'query', required: false, description: 'A persistent workspace id (or the Toolport-Workspace header); without it the call runs in a fresh workspace', schema: { type: 'string' } }],
      requestBody: { required: requiresArguments(tool.parameters), content: { 'application/json': { schema: argumentsSchema(tool, schemas) } } },
      responses: {
        200: { description: 'The tool\'s result', content: { 'application/json': { schema: {} } } },
        default: problemResponse,
      },
    },
  }
}

/** The OpenAPI 3.1 document of the tools `tools` (the caller's catalog). */
export function toolsDocument (tools: AnyTool[], withAuth: boolean): Record<string, unknown> {
  const schemas: Record<string, unknown> = { Problem: PROBLEM_SCHEMA }
  return {
    openapi: '3.1.0',
    info: { title: 'Toolport tools', version: VERSION, description: 'Each tool of this catalog as one operation: POST its arguments, get its result.' },
    paths: Object.fromEntries(tools.map((tool) => [`/v1/tools/${encodeURIComponent(tool.name)}/invoke`, operationOf(tool, schemas)])),
    components: {
      schemas,
      ...(withAuth ? { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } } : {}),
    },
    ...(withAuth ? { security: [{ bearer: [] }] } : {}),
  }
}

/**
 * The workspace the Toolport-Workspace header names, if any. Node joins a
 * repeated header with ", " (two workspaces named would make a third) and
 * reads a header's bytes as Latin-1 (`café` sent as UTF-8 would name
 * `cafÃ©`): the header is taken once, as UTF-8, like the id in a URL or a body.
 */
function workspaceNamed (rawHeaders: string[]): string | undefined {
  const values = rawHeaders.filter((_, index) => index % 2 === 1 && (rawHeaders[index - 1] as string).toLowerCase() === WORKSPACE_HEADER)
  if (values.length > 1) throw new ToolError('BadRequest', 'Toolport-Workspace must be given once')
  if (values[0] === undefined) return undefined
  const bytes = Buffer.from(values[0], 'latin1')
  if (!isUtf8(bytes)) throw new ToolError('InvalidArgs', 'Toolport-Workspace must be UTF-8')
  return bytes.toString('utf8')
}

/** The workspace an invocation names, by its query parameter or its header (the same one, when both). */
function invocationWorkspace (query: string | undefined, rawHeaders: string[]): string | undefined {
  const header = workspaceNamed(rawHeaders)
  if (query !== undefined && header !== undefined && query !== header) throw new ToolError('BadRequest', `the ${WORKSPACE_QUERY} query parameter and the Toolport-Workspace header name different workspaces`)
  return query ?? header
}

/** The arguments of an invocation: its body, without the copy of the workspace query parameter a client (Open WebUI) put there. */
function argumentsOf (body: Record<string, unknown>, query: string | undefined): Record<string, unknown> {
  // Sent in the query as text: a model's `42` is the query's "42".
  const copy = body[WORKSPACE_QUERY]
  if (query === undefined || copy === undefined || copy === null || typeof copy === 'object' || String(copy) !== query) return body
  const { [WORKSPACE_QUERY]: _copy, ...rest } = body
  return rest
}

export const openApiToolRoutes: FastifyPluginAsyncTypebox<{ runtime: Runtime }> = async (app, { runtime }) => {
  // No body, or an empty one, is no arguments (the document leaves the body optional for a tool that requires none).
  installJsonBody(app, () => ({}))
  app.get('/v1/openapi/tools.json', {
    schema: { summary: 'Each tool of the caller\'s catalog as an OpenAPI operation (for OpenAPI tool-server clients)', tags: ['tools'], response: { 200: JsonObject, ...problems(401) } },
  }, async (request) => toolsDocument(runtime.registry.list({ scope: request.principal.scope }), authIsOn(runtime.config.auth)))

  app.post('/v1/tools/:name/invoke', {
    schema: {
      summary: 'Run one tool call with the arguments as the body; answers the bare result',
      tags: ['tools'],
      params: ToolNameParams,
      // Another parameter (a misspelt one) would be dropped without a word, and the call run elsewhere.
      querystring: Type.Object({ [WORKSPACE_QUERY]: Type.Optional(Type.String({ description: 'A persistent workspace id (or the Toolport-Workspace header)' })) }, { additionalProperties: false }),
      headers: Type.Object({ [WORKSPACE_HEADER]: Type.Optional(Type.String()) }),
      body: JsonObject,
      response: { 200: AnyJson, ...problems(400, 401, 403, 404, 409, 413, 500, 503, 504) },
    },
  }, async (request, reply) => {
    const query = request.query[WORKSPACE_QUERY]
    const workspace = invocationWorkspace(query, request.raw.rawHeaders)
    const outcome = await runOneCall(runtime, request, reply, { name: request.params.name, arguments: argumentsOf(request.body, query) }, workspace)
    if (!outcome.ok) return sendProblem(request, reply, outcome.error)
    // A string result is sent as the JSON string it is (Fastify would send it raw, as text/plain).
    if (typeof outcome.result === 'string') return reply.type('application/json; charset=utf-8').send(JSON.stringify(outcome.result))
    return outcome.result
  })
}
