/** Shared route schemas (they also make the OpenAPI document). */
import { Type } from '@sinclair/typebox'
import { ERROR_STATUS, PROBLEM_MEDIA_TYPE } from '../errors.ts'
import { MAX_TOOL_NAME_CHARS } from '../execution/tool.ts'

export const ProblemSchema = Type.Object({
  type: Type.String(),
  title: Type.String(),
  status: Type.Integer(),
  detail: Type.String(),
  code: Type.Unsafe<string>({ type: 'string', enum: Object.keys(ERROR_STATUS) }),
  request_id: Type.String(),
  tool: Type.Optional(Type.String()),
}, { additionalProperties: true, $id: 'Problem', description: 'RFC 9457 problem details (application/problem+json)' })

export const problemRef = Type.Unsafe({ $ref: 'Problem#' })

/**
 * Problem answers for the given statuses, for a route's `response` schema:
 * under their own media type, so that the OpenAPI document says what is sent
 * (Fastify picks a serializer by the answer's media type).
 */
export function problems (...statuses: number[]): Record<number, unknown> {
  const problem = { description: 'A problem (RFC 9457)', content: { [PROBLEM_MEDIA_TYPE]: { schema: problemRef } } }
  return Object.fromEntries(statuses.map((status) => [status, problem]))
}

/** Any JSON value (a tool's result, a schema). */
export const AnyJson = Type.Unsafe<unknown>({})

export const JsonObject = Type.Object({}, { additionalProperties: true })

/** `:name` of the routes of one tool. */
export const ToolNameParams = Type.Object({ name: Type.String({ minLength: 1, maxLength: MAX_TOOL_NAME_CHARS }) })

export const ToolEntry = Type.Object({
  name: Type.String(),
  description: Type.String(),
  parameters: JsonObject,
  source: Type.Unsafe<string>({ type: 'string', enum: ['builtin', 'executable', 'mcp'] }),
  annotations: Type.Object({
    readOnlyHint: Type.Boolean(),
    destructiveHint: Type.Boolean(),
    idempotentHint: Type.Boolean(),
    openWorldHint: Type.Boolean(),
  }, { description: 'MCP tool hints; a hint the source does not give takes the MCP default' }),
})
