/**
 * An execution outcome as an MCP `CallToolResult`: the result's JSON as text
 * (plus `structuredContent` for object results), or `isError` with the
 * clawft's error message.
 */
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js'
import type { Outcome } from '../execution/execute.ts'

export function toCallToolResult (outcome: Outcome): CallToolResult {
  if (!outcome.ok) {
    return { content: [{ type: 'text', text: outcome.error.toMessage() }], isError: true }
  }
  const { result } = outcome
  const text = typeof result === 'string' ? result : JSON.stringify(result ?? null)
  const structured = typeof result === 'object' && result !== null && !Array.isArray(result)
  return structured
    ? { content: [{ type: 'text', text }], structuredContent: result as Record<string, unknown> }
    : { content: [{ type: 'text', text }] }
}
