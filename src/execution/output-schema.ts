/**
 * The schema a built-in's results are published with (the MCP
 * `outputSchema`): its own result schema, or the envelope that
 * truncate.ts makes of an object result too large for the result limit.
 */
import { Type } from '@sinclair/typebox'
import type { AnyTool, JsonSchema } from './tool.ts'

/** An object result cut to the limit: the start of its JSON, and how long the whole was where that is known (truncate.ts). */
export const TruncatedJson = Type.Object({
  _truncated_json: Type.String({ description: 'The start of the result\'s JSON text' }),
  _original_bytes: Type.Optional(Type.Integer({ minimum: 0, description: 'Bytes of the result\'s JSON before the cut; absent when the tool itself gave only the start of its result (read_file of a file larger than the limit reads only what the limit can carry)' })),
}, { additionalProperties: false, description: 'A result larger than the result limit, cut' })

const published = new WeakMap<JsonSchema, JsonSchema>()

/**
 * `{type: 'object', anyOf: [result, envelope]}`, or undefined for a tool
 * that declares no result schema. Made once per schema.
 */
export function publishedOutputSchema (tool: AnyTool): JsonSchema | undefined {
  const output = tool.outputSchema
  if (output === undefined) return undefined
  let schema = published.get(output)
  if (schema === undefined) {
    // Plain JSON: TypeBox's symbol keys have no place in a catalog.
    schema = { type: 'object', anyOf: [JSON.parse(JSON.stringify(output)), JSON.parse(JSON.stringify(TruncatedJson))] } as JsonSchema
    published.set(output, schema)
  }
  return schema
}
