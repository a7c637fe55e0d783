/**
 * A checker of OpenAI's published rules for strict function schemas
 * (Structured Outputs, "Supported schemas"), written from the rules, not
 * from Toolport's rewriting: it lists every way a schema breaks them.
 *   - the root is an object, not anyOf;
 *   - every object sets additionalProperties: false and lists every property in required;
 *   - only the supported keywords appear, and every schema has a type (but a choice, a reference or a fixed value);
 *   - at most 10 levels of nesting and 5000 properties in all; at most 1000 enum values in all;
 *   - an array says what its items are; a string's format is one of those supported;
 *   - each anyOf branch, each item schema and each $defs entry follows the same rules.
 */
const FORMATS = new Set(['date-time', 'time', 'date', 'duration', 'email', 'hostname', 'ipv4', 'ipv6', 'uuid'])
const SUPPORTED = new Set([
  'type', 'properties', 'required', 'additionalProperties', 'items', 'enum', 'const', 'anyOf', 'description', 'title',
  'default', '$defs', '$ref', 'pattern', 'format', 'minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum',
  'multipleOf', 'minItems', 'maxItems',
])

type Node = Record<string, unknown>
const isNode = (value: unknown): value is Node => typeof value === 'object' && value !== null && !Array.isArray(value)

export function strictViolations (schema: unknown): string[] {
  const problems: string[] = []
  let properties = 0
  let enumValues = 0
  if (!isNode(schema) || schema['type'] !== 'object') problems.push('the root must be type object')
  if (isNode(schema) && 'anyOf' in schema) problems.push('the root must not be anyOf')
  const visit = (node: unknown, where: string, depth: number): void => {
    if (!isNode(node)) { problems.push(`${where}: not a schema`); return }
    if (depth > 10) problems.push(`${where}: nested deeper than 10 levels`)
    for (const key of Object.keys(node)) if (!SUPPORTED.has(key)) problems.push(`${where}: unsupported keyword ${key}`)
    if (!['type', 'anyOf', '$ref', 'enum', 'const'].some((key) => key in node)) problems.push(`${where}: no type`)
    const types = Array.isArray(node['type']) ? node['type'] : [node['type']]
    if (types.includes('array') && !('items' in node)) problems.push(`${where}: array without items`)
    if ('format' in node && !FORMATS.has(node['format'] as string)) problems.push(`${where}: unsupported format ${String(node['format'])}`)
    if (types.includes('object') || 'properties' in node) {
      const props = isNode(node['properties']) ? node['properties'] : {}
      if (node['additionalProperties'] !== false) problems.push(`${where}: additionalProperties must be false`)
      const required = Array.isArray(node['required']) ? node['required'] : []
      for (const name of Object.keys(props)) if (!required.includes(name)) problems.push(`${where}: property ${name} is not required`)
      properties += Object.keys(props).length
      for (const [name, child] of Object.entries(props)) visit(child, `${where}.${name}`, depth + 1)
    }
    if (Array.isArray(node['enum'])) enumValues += node['enum'].length
    if ('items' in node) visit(node['items'], `${where}[]`, depth + 1)
    if (Array.isArray(node['anyOf'])) node['anyOf'].forEach((branch, i) => visit(branch, `${where}|${i}`, depth + 1))
    if (isNode(node['$defs'])) for (const [name, def] of Object.entries(node['$defs'])) visit(def, `$defs.${name}`, depth + 1)
  }
  visit(schema, 'parameters', 0)
  if (properties > 5000) problems.push('more than 5000 properties')
  if (enumValues > 1000) problems.push('more than 1000 enum values')
  return problems
}
