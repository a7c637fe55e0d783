/**
 * The tools of an upstream MCP server, wrapped for the registry as
 * `{server}__{tool}`, and the translation of its answers and failures into
 * results and ToolErrors.
 */
import { McpError } from '@modelcontextprotocol/sdk/types.js'
import type { CallToolResult, Tool as McpTool } from '@modelcontextprotocol/sdk/types.js'
import type { AnyTool, ToolContext } from '../core/tool.ts'
import { ToolError } from '../errors.ts'

export const ERROR_TEXT_BYTES = 4096

/** Calls a tool on the current connection (or throws when there is none). */
export type CallUpstream = (name: string, args: Record<string, unknown>, ctx: ToolContext) => Promise<CallToolResult>

export function wrapTools (server: string, tools: McpTool[], internal: boolean, call: CallUpstream): AnyTool[] {
  return tools.map((tool) => ({
    name: `${server}__${tool.name}`,
    description: tool.description ?? '',
    parameters: (tool.inputSchema as Record<string, unknown> | undefined) ?? { type: 'object', properties: {} },
    source: 'mcp' as const,
    internal,
    async execute (args: Record<string, unknown>, ctx: ToolContext) {
      return resultOf(await call(tool.name, args, ctx))
    },
  }))
}

/** The text of a result's content items, joined and capped. */
export function textOf (result: CallToolResult): string {
  const text = (result.content ?? []).map((item) => (item.type === 'text' ? item.text : `[${item.type}]`)).join('\n')
  return Buffer.byteLength(text) > ERROR_TEXT_BYTES ? `${text.slice(0, ERROR_TEXT_BYTES)}…` : text
}

/** A CallToolResult as the tool's value: `{content, structuredContent?}`; `isError` → ExecutionFailed. */
export function resultOf (result: CallToolResult): unknown {
  if (result.isError === true) throw new ToolError('ExecutionFailed', textOf(result) || 'the MCP tool reported an error')
  const value: Record<string, unknown> = { content: result.content ?? [] }
  if (result.structuredContent !== undefined) value['structuredContent'] = result.structuredContent
  return value
}

/** A failed MCP request as a ToolError. */
export function errorOf (error: unknown, server: string, signal: AbortSignal): ToolError {
  if (error instanceof ToolError) return error
  if (signal.aborted) return new ToolError('ExecutionFailed', 'cancelled')
  if (error instanceof McpError) {
    if (error.code === -32001) return new ToolError('Timeout', `MCP server ${server} did not answer in time`)
    if (error.code === -32602 || error.code === -32601) return new ToolError('InvalidArgs', error.message)
    if (error.code === -32000) return new ToolError('ExecutionFailed', `MCP server ${server} closed the connection`)
    return new ToolError('ExecutionFailed', `MCP server ${server}: ${error.message}`)
  }
  const message = error instanceof Error ? error.message.split('\n')[0] : String(error)
  return new ToolError('ExecutionFailed', `MCP server ${server}: ${message}`)
}
