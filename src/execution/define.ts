/** `defineBuiltin`: a built-in tool whose argument type is derived from its TypeBox schema. */
import type { Static, TObject } from '@sinclair/typebox'
import type { Limiter } from './limiter.ts'
import type { Tool, ToolContext } from './tool.ts'

export function defineBuiltin<S extends TObject> (definition: {
  name: string
  description: string
  parameters: S
  limiter?: Limiter
  /** The tool runs processes in the workspace (see Tool.changesTreeFreely). */
  changesTreeFreely?: boolean
  execute: (args: Static<S>, ctx: ToolContext) => Promise<unknown>
}): Tool<Static<S>> {
  return { ...definition, source: 'builtin' }
}
