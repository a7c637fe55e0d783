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
 *
 * A tool of an MCP server (sources/) answers as its server did: its own
 * content blocks (images and resources included) and `structuredContent`,
 * as an MCP client expects of a proxy, unless the result was cut to the
 * result limit: that is the truncation envelope, as for any tool.
 */
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js'
import type { Outcome } from '../execution/execute.ts'

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === 'object' && value !== null && !Array.isArray(value)

/** The `structuredContent` of a result: itself when it is an object, else wrapped in `{result}`. */
export function structuredContentOf (result: unknown): Record<string, unknown> {
  return isObject(result) ? result : { result: result ?? null }
}

export function toCallToolResult (outcome: Outcome, fromMcpServer = false): CallToolResult {
  if (!outcome.ok) {
    return { content: [{ type: 'text', text: outcome.error.toMessage() }], isError: true }
  }
  const { result } = outcome
  // As sources/mcp-tools.ts gives a server's result: `{content, structuredContent?}`.
  if (fromMcpServer && !outcome.truncated && isObject(result) && Array.isArray(result['content'])) {
    const own = result['structuredContent']
    return { content: result['content'] as CallToolResult['content'], ...(isObject(own) ? { structuredContent: own } : {}) }
  }
  const text = typeof result === 'string' ? result : JSON.stringify(result ?? null)
  return { content: [{ type: 'text', text }], structuredContent: structuredContentOf(result) }
}
