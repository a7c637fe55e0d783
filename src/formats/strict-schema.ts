/**
 * OpenAI's strict mode for function schemas (Structured Outputs): every
 * object closed and listing all its properties as required, optional ones
 * made nullable, and only the keywords OpenAI supports. A schema that cannot
 * be written so (a free-form object, `oneOf`, a tuple…) has no strict form.
 */

type Schema = Record<string, unknown>

/** The keywords a strict schema may hold. */
export const STRICT_KEYWORDS: ReadonlySet<string> = new Set([
  'type', 'properties', 'required', 'additionalProperties', 'items', 'enum', 'const', 'anyOf', 'description', 'title',
  'default', '$defs', '$ref', 'pattern', 'format', 'minimum', 'maximum', 'exclusiveMinimum', 'exclusiveMaximum',
  'multipleOf', 'minItems', 'maxItems',
])

/**
 * Keywords left out of a strict schema without changing what it means to a
 * model: annotations and constraints the service still checks on every call.
 */
const DROPPED_KEYWORDS: ReadonlySet<string> = new Set([
  '$schema', '$id', '$comment', 'examples', 'readOnly', 'writeOnly', 'deprecated', 'minLength', 'maxLength',
  'uniqueItems', 'minProperties', 'maxProperties', 'contentEncoding', 'contentMediaType',
])

/** The string formats OpenAI takes; another (`uri`, say) fails the whole request, so it is left out, as a model needs none. */
const OPENAI_FORMATS: ReadonlySet<unknown> = new Set(['date-time', 'time', 'date', 'duration', 'email', 'hostname', 'ipv4', 'ipv6', 'uuid'])

/** OpenAI's limit on nesting. */
const MAX_DEPTH = 10

class NotStrict extends Error {}

const isSchema = (value: unknown): value is Schema => typeof value === 'object' && value !== null && !Array.isArray(value)

/** The strict form of a tool's parameters, or undefined when it has none. */
export function toStrictSchema (parameters: unknown): Schema | undefined {
  try {
    if (!isSchema(parameters) || parameters['type'] !== 'object') return undefined
    return strict(parameters, 0)
  } catch (error) {
    if (error instanceof NotStrict) return undefined
    throw error
  }
}

function strict (node: unknown, depth: number): Schema {
  if (!isSchema(node) || depth > MAX_DEPTH) throw new NotStrict()
  const out: Schema = {}
  for (const [key, value] of Object.entries(node)) {
    if (DROPPED_KEYWORDS.has(key) || (key === 'format' && !OPENAI_FORMATS.has(value))) continue
    if (!STRICT_KEYWORDS.has(key)) throw new NotStrict()
    out[key] = value
  }
  // OpenAI asks every schema for its type, but for a choice, a reference or a fixed value.
  if (!['type', 'anyOf', '$ref', 'enum', 'const'].some((key) => key in out)) throw new NotStrict()
  if (isSchema(out['$defs'])) out['$defs'] = Object.fromEntries(Object.entries(out['$defs']).map(([name, def]) => [name, strict(def, depth + 1)]))
  if (Array.isArray(out['anyOf'])) out['anyOf'] = out['anyOf'].map((branch) => strict(branch, depth + 1))
  const types: unknown[] = Array.isArray(out['type']) ? out['type'] : [out['type']]
  // An array of any items: OpenAI asks for the items' schema.
  if (types.includes('array') && !('items' in out)) throw new NotStrict()
  if ('items' in out) out['items'] = strict(out['items'], depth + 1)
  const isObject = types.includes('object') || 'properties' in out
  if (isObject) closeObject(out, depth)
  return out
}

/** An object with every property required (the optional ones nullable) and no others allowed. */
function closeObject (out: Schema, depth: number): void {
  const properties = out['properties']
  // A map of free names (or `additionalProperties: true`) cannot be closed without changing its meaning.
  if (!isSchema(properties) || (out['additionalProperties'] !== undefined && out['additionalProperties'] !== false)) throw new NotStrict()
  const required = new Set(Array.isArray(out['required']) ? out['required'] as string[] : [])
  // A required name with no property: closed, the object could not hold it, and no call would be valid.
  if ([...required].some((name) => !Object.hasOwn(properties, name))) throw new NotStrict()
  out['properties'] = Object.fromEntries(Object.entries(properties).map(([name, schema]) => {
    const rewritten = strict(schema, depth + 1)
    return [name, required.has(name) ? rewritten : nullable(rewritten)]
  }))
  out['required'] = Object.keys(properties)
  out['additionalProperties'] = false
}

/**
 * `schema` that also admits null: the strict way to say "optional". Its
 * type takes null only when nothing beside it (a value list, a choice, a
 * reference) would still refuse null; otherwise null is a choice of its own.
 */
function nullable (schema: Schema): Schema {
  const type = schema['type']
  const typeDecides = !['enum', 'const', 'anyOf', '$ref'].some((key) => key in schema)
  if (typeof type === 'string' && typeDecides) return { ...schema, type: [type, 'null'] }
  if (Array.isArray(type) && typeDecides) return type.includes('null') ? schema : { ...schema, type: [...type, 'null'] }
  return { anyOf: [schema, { type: 'null' }] }
}
