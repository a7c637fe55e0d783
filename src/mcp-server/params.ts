/**
 * JSON-RPC -32602 (Invalid params) for an MCP request whose params don't fit
 * its method. The SDK checks a request against its method's schema only as it
 * dispatches it, and answers a misfit as -32603 with zod's issue list as the
 * message (modelcontextprotocol/typescript-sdk#2284). So every request is
 * checked here first, against the same SDK schema, and a misfit is answered
 * with one short line.
 */
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js'
import { ClientRequestSchema, ErrorCode, isJSONRPCRequest } from '@modelcontextprotocol/sdk/types.js'
import type { JSONRPCErrorResponse, JSONRPCMessage } from '@modelcontextprotocol/sdk/types.js'

type RequestSchema = (typeof ClientRequestSchema.options)[number]
type ErrorMap = NonNullable<NonNullable<Parameters<RequestSchema['safeParse']>[1]>['error']>

/** The SDK's schema for each request method of the protocol. */
const SCHEMAS = new Map<string, RequestSchema>(ClientRequestSchema.options.map((schema) => [schema.shape.method.value, schema]))

/** Shown at most, so that a wildly wrong request still gets a short answer. */
const MAX_ISSUES = 3

const kindOf = (value: unknown): string => value === null ? 'null' : Array.isArray(value) ? 'array' : typeof value

/** Wrong types in plain words; zod's own wording for the rest. */
const plainWords: ErrorMap = (issue) => {
  if (issue.code !== 'invalid_type') return undefined
  const expected = issue.expected === 'record' ? 'object' : issue.expected
  return issue.input === undefined ? `missing (expected ${expected})` : `expected ${expected}, got ${kindOf(issue.input)}`
}

/** The -32602 answer to a request whose params don't fit its method; undefined for any other message. */
function invalidParamsAnswer (message: JSONRPCMessage): JSONRPCErrorResponse | undefined {
  if (!isJSONRPCRequest(message)) return undefined
  const parsed = SCHEMAS.get(message.method)?.safeParse(message, { error: plainWords })
  if (parsed === undefined || parsed.success) return undefined
  const issues = parsed.error.issues.slice(0, MAX_ISSUES).map((issue) => {
    const where = issue.path.slice(issue.path[0] === 'params' ? 1 : 0).join('.') || 'params'
    return `${where}: ${issue.message}`
  })
  return { jsonrpc: '2.0', id: message.id, error: { code: ErrorCode.InvalidParams, message: `Invalid params for ${message.method}: ${issues.join('; ')}` } }
}

/**
 * Puts the check in front of whatever dispatches the transport's messages;
 * call it once the server is connected to the transport.
 */
export function answerInvalidParams (transport: Transport): void {
  const dispatch = transport.onmessage
  transport.onmessage = (message, extra) => {
    const answer = invalidParamsAnswer(message)
    if (answer === undefined) dispatch?.(message, extra)
    else void transport.send(answer).catch(() => {})
  }
}
