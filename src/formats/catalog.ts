/** The catalog in the four formats of the contract. One tool schema serves them all. */
import type { AnyTool } from '../execution/tool.ts'

export const CATALOG_FORMATS = ['native', 'openai', 'anthropic', 'mcp'] as const
export type CatalogFormat = typeof CATALOG_FORMATS[number]

/** Plain JSON of a schema (TypeBox adds symbol keys; they never leave the process anyway). */
const parametersOf = (tool: AnyTool): Record<string, unknown> => tool.parameters

/** A tool in the native format: the one `GET /v1/tools/{name}` answers. */
export function nativeEntry (tool: AnyTool): { name: string, description: string, parameters: Record<string, unknown>, source: AnyTool['source'] } {
  return { name: tool.name, description: tool.description, parameters: parametersOf(tool), source: tool.source }
}

export function catalogEntry (tool: AnyTool, format: CatalogFormat): Record<string, unknown> {
  switch (format) {
    case 'native':
      return nativeEntry(tool)
    case 'openai':
      return { type: 'function', function: { name: tool.name, description: tool.description, parameters: parametersOf(tool) } }
    case 'anthropic':
      return { name: tool.name, description: tool.description, input_schema: parametersOf(tool) }
    case 'mcp':
      return { name: tool.name, description: tool.description, inputSchema: parametersOf(tool) }
  }
}

export function catalog (tools: AnyTool[], format: CatalogFormat): { tools: Array<Record<string, unknown>> } {
  return { tools: tools.map((tool) => catalogEntry(tool, format)) }
}
