/**
 * The tools of an upstream MCP server, wrapped for the registry as
 * `{server}__{tool}`, and the translation of its answers and failures into
 * tool values and ToolErrors.
 */
import { ErrorCode, McpError } from '@modelcontextprotocol/sdk/types.js'
import type { CallToolResult, Tool as McpTool } from '@modelcontextprotocol/sdk/types.js'
import { type AnyTool, hintsOf, inputSchemaProblem, type JsonSchema, MAX_TOOL_NAME_CHARS, SOURCE_TOOL_NAME, type ToolContext } from '../execution/tool.ts'
import { MAX_JSON_DEPTH, nestedDeeperThan } from '../execution/json-text.ts'
import { clipText } from '../execution/truncate.ts'
import { ToolError } from '../errors.ts'

/** The most of an upstream error text that goes into a ToolError message. */
export const ERROR_TEXT_BYTES = 4096

const EMPTY_SCHEMA: JsonSchema = { type: 'object', properties: {} }

/** Calls a tool (by its upstream name) on the server's current connection. */
export type CallUpstream = (name: string, args: Record<string, unknown>, ctx: ToolContext) => Promise<CallToolResult>

/** An entry of a tools/list answer, read loosely, with what the service reads of a tool: a name of the kind sources may give, and a description if any. */
function isToolShaped (entry: unknown): boolean {
  if (typeof entry !== 'object' || entry === null) return false
  const { name, description } = entry as Record<string, unknown>
  return typeof name === 'string' && SOURCE_TOOL_NAME.test(name) && (description === undefined || typeof description === 'string')
}

/**
 * The registry tools of one server: `{server}__{tool}`, all calling through
 * `call`. Left out: a tool whose name would be longer than the service takes
 * (it could be listed, never called), and an entry that is no tool or whose
 * input schema no catalog takes (inputSchemaProblem): it would break the
 * catalog for every caller.
 */
export function wrapTools (server: string, tools: McpTool[], internal: boolean, call: CallUpstream): AnyTool[] {
  const nameOf = (tool: McpTool): string => `${server}__${tool.name}`
  const usable = (tool: McpTool): boolean => isToolShaped(tool) && nameOf(tool).length <= MAX_TOOL_NAME_CHARS &&
    (tool.inputSchema === undefined || inputSchemaProblem(tool.inputSchema) === undefined)
  return tools.filter(usable).map((tool) => ({
    name: nameOf(tool),
    description: tool.description ?? '',
    parameters: tool.inputSchema ?? EMPTY_SCHEMA,
    source: 'mcp' as const,
    // The server's own hints, passed on; the ones it leaves out take MCP's defaults in the catalog.
    annotations: hintsOf(tool.annotations),
    internal,
    async execute (args: Record<string, unknown> | undefined, ctx: ToolContext) {
      return toolValueOf(await call(tool.name, args ?? {}, ctx))
    },
  }))
}

/** The text of a result's content items, joined and capped (other items as `[image]` etc.). */
export function textOf (result: CallToolResult): string {
  const parts = (result.content ?? []).map((item) => (item.type === 'text' ? item.text : `[${item.type}]`))
  return clipText(parts.join('\n'), ERROR_TEXT_BYTES)
}

/**
 * A CallToolResult as the tool's value: `{content, structuredContent?}`
 * (`_meta` and `isError` are protocol details); `isError` → ExecutionFailed
 * with the server's text.
 */
export function toolValueOf (result: CallToolResult): unknown {
  if (result.isError === true) throw new ToolError('ExecutionFailed', textOf(result) || 'the MCP tool reported an error')
  const value: Record<string, unknown> = { content: result.content ?? [] }
  if (result.structuredContent !== undefined) value['structuredContent'] = result.structuredContent
  // Nested past what can be serialised again (the result's truncation would overflow), it is no result.
  if (nestedDeeperThan(value)) throw new ToolError('ExecutionFailed', `the tool's result is nested more than ${MAX_JSON_DEPTH} levels deep`)
  return value
}

/** The server's own words of an McpError, without the SDK's `MCP error -32602: ` prefix. */
function mcpMessage (error: McpError): string {
  // Twice when the server's own SDK put it into the message it sent.
  return clipText(error.message.replace(/^(?:MCP error -?\d+: ){1,2}/, ''), ERROR_TEXT_BYTES)
}

/** Any error's message on one line, clipped (never a stack). */
export function shortMessage (error: unknown): string {
  const message = error instanceof Error ? error.message : String(error)
  // On one line: the SDK's schema errors are a JSON list of issues over many lines, whose first is `[`.
  return clipText(message.replace(/\s+/g, ' ').trim(), 500)
}

/** How MCP's SDKs word a result they refuse (the server's own, or ours of it): no fault of the arguments. */
const RESULT_REFUSED = /^(Invalid tools\/call result|Structured content does not match|Failed to validate structured content)/

/**
 * A failed MCP request as a ToolError. `signal` is checked first: the SDK
 * reports an abort as a RequestTimeout, which must not read as a timeout.
 */
export function errorOf (error: unknown, server: string, signal: AbortSignal, timeoutMs: number): ToolError {
  if (error instanceof ToolError) return error
  if (signal.aborted) return new ToolError('ExecutionFailed', 'cancelled')
  if (error instanceof McpError) {
    // The SDK's own timeout and closed connection take codes of JSON-RPC's server errors, which a server may
    // send too: the SDK's are told by what it puts in them (the timeout it waited; no data).
    const data = error.data as { timeout?: unknown, maxTotalTimeout?: unknown } | undefined
    switch (error.code) {
      case ErrorCode.RequestTimeout:
        if (typeof data?.timeout !== 'number' && typeof data?.maxTotalTimeout !== 'number') break
        return new ToolError('Timeout', `MCP server ${server} did not answer within ${timeoutMs} ms`)
      case ErrorCode.InvalidParams:
      case ErrorCode.MethodNotFound:
        // The server's SDK refusing the server's own result takes the code of bad arguments too.
        if (RESULT_REFUSED.test(mcpMessage(error))) break
        return new ToolError('InvalidArgs', mcpMessage(error))
      case ErrorCode.ConnectionClosed:
        if (data !== undefined || !/^MCP error -32000: (Connection closed|Request was cancelled)$/.test(error.message)) break
        return new ToolError('ExecutionFailed', `MCP server ${server} closed the connection`)
    }
    return new ToolError('ExecutionFailed', `MCP server ${server}: ${mcpMessage(error)}`)
  }
  return new ToolError('ExecutionFailed', `MCP server ${server}: ${shortMessage(error)}`)
}
