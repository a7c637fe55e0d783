/**
 * `defineBuiltin`: a built-in tool whose argument type is derived from its
 * TypeBox schema and whose result type from its output schema, with the MCP
 * hints beside them.
 */
import type { Static, TObject, TSchema } from '@sinclair/typebox'
import type { Limiter } from './limiter.ts'
import type { Tool, ToolAnnotations, ToolContext } from './tool.ts'

export function defineBuiltin<S extends TObject, O extends TSchema> (definition: {
  name: string
  description: string
  parameters: S
  /** What a result is (truncation aside: the catalog adds the envelope). An object schema, or a union of them. */
  outputSchema: O
  /** All four hints: a built-in says what it does, rather than take MCP's cautious defaults. */
  annotations: ToolAnnotations
  limiter?: Limiter
  /** The tool runs processes in the workspace (see Tool.changesTreeFreely). */
  changesTreeFreely?: boolean
  execute: (args: Static<S>, ctx: ToolContext) => Promise<Static<O>>
}): Tool<Static<S>> {
  return { ...definition, source: 'builtin' }
}
