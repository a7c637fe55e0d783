/** The catalog in the formats of the contract. One tool schema serves them all. */
import { publishedOutputSchema } from '../execution/output-schema.ts'
import { annotationsOf, type AnyTool, type ToolAnnotations } from '../execution/tool.ts'
import { toStrictSchema } from './strict-schema.ts'

export const CATALOG_FORMATS = ['native', 'openai', 'responses', 'anthropic', 'mcp'] as const
export type CatalogFormat = typeof CATALOG_FORMATS[number]

export interface CatalogOptions {
  /** OpenAI's strict mode (`openai` and `responses`): rewritten schemas, and `strict` on each function. */
  strict?: boolean
}

/** Plain JSON of a schema (TypeBox adds symbol keys; they never leave the process anyway). */
const parametersOf = (tool: AnyTool): Record<string, unknown> => tool.parameters

/** A tool in the native format: the one `GET /v1/tools/{name}` answers. */
export function nativeEntry (tool: AnyTool): { name: string, description: string, parameters: Record<string, unknown>, source: AnyTool['source'], annotations: ToolAnnotations } {
  return { name: tool.name, description: tool.description, parameters: parametersOf(tool), source: tool.source, annotations: annotationsOf(tool) }
}

/** A tool as MCP's tools/list has it; `outputSchema` for the tools that declare their results (the built-ins). */
function mcpEntry (tool: AnyTool): Record<string, unknown> {
  const outputSchema = publishedOutputSchema(tool)
  return {
    name: tool.name,
    description: tool.description,
    inputSchema: parametersOf(tool),
    ...(outputSchema === undefined ? {} : { outputSchema }),
    annotations: annotationsOf(tool),
  }
}

/** An OpenAI function: its parameters, and with strict mode asked for, whether they could be made strict. */
function openAiFunction (tool: AnyTool, options: CatalogOptions): Record<string, unknown> {
  const base = { name: tool.name, description: tool.description }
  if (options.strict !== true) return { ...base, parameters: parametersOf(tool) }
  const strict = toStrictSchema(tool.parameters)
  return strict ? { ...base, parameters: strict, strict: true } : { ...base, parameters: parametersOf(tool), strict: false }
}

export function catalogEntry (tool: AnyTool, format: CatalogFormat, options: CatalogOptions = {}): Record<string, unknown> {
  switch (format) {
    case 'native':
      return nativeEntry(tool)
    case 'openai':
      return { type: 'function', function: openAiFunction(tool, options) }
    case 'responses':
      // The Responses API takes a function without `strict` as strict: say false unless asked.
      return { type: 'function', strict: false, ...openAiFunction(tool, options) }
    case 'anthropic':
      return { name: tool.name, description: tool.description, input_schema: parametersOf(tool) }
    case 'mcp':
      return mcpEntry(tool)
  }
}

export function catalog (tools: AnyTool[], format: CatalogFormat, options: CatalogOptions = {}): { tools: Array<Record<string, unknown>> } {
  return { tools: tools.map((tool) => catalogEntry(tool, format, options)) }
}
