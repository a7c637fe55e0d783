/**
 * An execution outcome as an MCP `CallToolResult`: the result as text and as
 * `structuredContent`, or `isError` with clawft's error message (and no
 * `structuredContent`: a client validates that only on success).
 *
 * `structuredContent` is always an object. An object result is itself (its
 * JSON is the text, and it satisfies the tool's `outputSchema`, truncation
 * envelope included); any other result — a string, an array, a number, null,
 * as executables may print — is `{"result": <value>}`, and its text stays
 * the value as it was (a string as it is, anything else its JSON).
 */
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js'
import type { Outcome } from '../execution/execute.ts'

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value)

/** The `structuredContent` of a result: itself when it is an object, else wrapped in `{result}`. */
export function structuredContentOf (result: unknown): Record<string, unknown> {
  return isObject(result) ? result : { result: result ?? null }
}

export function toCallToolResult (outcome: Outcome): CallToolResult {
  if (!outcome.ok) {
    return { content: [{ type: 'text', text: outcome.error.toMessage() }], isError: true }
  }
  const { result } = outcome
  const text = typeof result === 'string' ? result : JSON.stringify(result ?? null)
  return { content: [{ type: 'text', text }], structuredContent: structuredContentOf(result) }
}
