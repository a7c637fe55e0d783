/**
 * Argument validation with ajv. Each tool's schema is compiled once, on first
 * use, and cached with the tool object; a schema that ajv cannot compile (an
 * upstream MCP server's, say) is logged once and the tool runs unvalidated,
 * as its own server will validate.
 */
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv'
import { createRequire } from 'node:module'
import * as ajvFormats from 'ajv-formats'
import type { Logger } from 'pino'
import { ToolError } from '../errors.ts'
import { JsonTextError, parseJsonText } from './json-text.ts'
import type { AnyTool } from './tool.ts'

const require = createRequire(import.meta.url)

// ajv-formats is CommonJS; under ESM its plugin function is the default export.
const addFormats = ajvFormats.default as unknown as (ajv: Ajv) => Ajv

// Made by the first call that validates: a start-up that serves no call yet has no use for it.
let ajv: Ajv | undefined

function argumentsAjv (): Ajv {
  if (ajv === undefined) {
    ajv = new Ajv({ allErrors: true, strict: false, coerceTypes: false, useDefaults: false, validateSchema: false, code: { regExp: linearRegExp } })
    addFormats(ajv)
  }
  return ajv
}

/**
 * A schema's `pattern` as a regular expression whose matching takes time
 * linear in the text: a tool's schema (an MCP server's, an executable's) may
 * hold one such as `^(a+)+$`, which JavaScript's backtracking engine would
 * take hours over a short argument, holding the event loop. RE2 (as
 * WebAssembly) matches in linear time; a pattern it cannot take (a
 * lookahead, a backreference) runs as JavaScript's only when it has no
 * nested repetition, and otherwise the schema does not compile, which
 * leaves the tool's arguments to its own server (logged, as any schema ajv
 * refuses).
 */
const linearRegExp = Object.assign((pattern: string, flags: string): { test: (text: string) => boolean } => {
  // Loaded by the first pattern (RE2's WebAssembly is most of a megabyte), from its own folder (it is not bundled).
  const { RE2 } = require('re2-wasm') as typeof import('re2-wasm')
  try {
    return new RE2(pattern, flags.includes('u') ? flags : `${flags}u`)
  } catch (error) {
    const isSafeRegExp = require('safe-regex2') as typeof import('safe-regex2').default
    if (isSafeRegExp(pattern)) return new RegExp(pattern, flags)
    throw new Error(`the pattern ${JSON.stringify(pattern)} cannot be matched in linear time (${(error as Error).message})`)
  }
}, { code: 'linearRegExp' })

const validators = new WeakMap<AnyTool, ValidateFunction | null>()

function compile (tool: AnyTool, log: Logger): ValidateFunction | null {
  try {
    return argumentsAjv().compile(tool.parameters)
  } catch (error) {
    log.warn({ tool: tool.name, err: error }, 'tool schema does not compile; its arguments are not validated here')
    return null
  }
}

function describeError (error: ErrorObject): string {
  const where = error.instancePath === '' ? 'arguments' : `arguments${error.instancePath.replace(/\//g, '.')}`
  if (error.keyword === 'required') return `${where}: missing required property "${String(error.params['missingProperty'])}"`
  if (error.keyword === 'additionalProperties') return `${where}: unknown property "${String(error.params['additionalProperty'])}"`
  if (error.keyword === 'enum') return `${where}: must be one of ${(error.params['allowedValues'] as unknown[]).map((v) => JSON.stringify(v)).join(', ')}`
  return `${where} ${error.message ?? 'is invalid'}`
}

type Schema = Record<string, unknown>
const isSchema = (value: unknown): value is Schema => typeof value === 'object' && value !== null && !Array.isArray(value)

/** What a local reference (`#/$defs/Item`, `#`) in `root` names; undefined for any other. */
function referenced (ref: unknown, root: unknown): unknown {
  if (ref === '#') return root
  if (typeof ref !== 'string' || !ref.startsWith('#/')) return undefined
  let node = root
  for (const part of ref.slice(2).split('/')) {
    const key = part.replaceAll('~1', '/').replaceAll('~0', '~')
    if (!isSchema(node) || !Object.hasOwn(node, key)) return undefined
    node = node[key]
  }
  return node
}

function hasNull (value: unknown): boolean {
  if (value === null) return true
  return (Array.isArray(value) ? value : isSchema(value) ? Object.values(value) : []).some(hasNull)
}

/**
 * Removes, in place, the optional members sent as `null` that their schema
 * does not admit: OpenAI's strict mode makes every optional argument
 * nullable (strict-schema.ts), and a model then sends null for "absent".
 * It looks wherever that rewriting reaches: properties, array items, the
 * branches of anyOf and what local references name. Each part of the
 * arguments meets each schema once at most: references may lead back to
 * themselves, through several branches each.
 */
export function dropNullOptionals (root: unknown, args: unknown): void {
  const admitsNull = (schema: unknown, seen = new Set<unknown>()): boolean => {
    if (!isSchema(schema)) return true
    // Back at a schema already looked at: that way leads to no null.
    if (seen.has(schema)) return false
    seen.add(schema)
    const type = schema['type']
    if (type === 'null' || (Array.isArray(type) && type.includes('null'))) return true
    if (Array.isArray(schema['anyOf'])) return schema['anyOf'].some((branch) => admitsNull(branch, seen))
    if ('$ref' in schema) return type === undefined && admitsNull(referenced(schema['$ref'], root), seen)
    return type === undefined && !('enum' in schema) && !('const' in schema)
  }
  const met = new WeakMap<object, Set<unknown>>()
  const drop = (schema: unknown, value: unknown): void => {
    // Only an object or an array holds members that could be dropped.
    if (!isSchema(schema) || typeof value !== 'object' || value === null) return
    const schemas = met.get(value) ?? new Set<unknown>()
    if (schemas.has(schema)) return
    met.set(value, schemas.add(schema))
    if ('$ref' in schema) drop(referenced(schema['$ref'], root), value)
    if (Array.isArray(schema['anyOf'])) for (const branch of schema['anyOf']) drop(branch, value)
    if (Array.isArray(value)) {
      for (const item of value) drop(schema['items'], item)
      return
    }
    if (!isSchema(value) || !isSchema(schema['properties'])) return
    const properties = schema['properties']
    const required = new Set(Array.isArray(schema['required']) ? schema['required'] as string[] : [])
    for (const [key, member] of Object.entries(value)) {
      const memberSchema = properties[key]
      if (member === null && !required.has(key) && memberSchema !== undefined && !admitsNull(memberSchema)) delete value[key]
      else drop(memberSchema, member)
    }
  }
  drop(root, args)
}

/** Throws InvalidArgs naming every problem when `args` do not satisfy the tool's schema. */
export function validateArguments (tool: AnyTool, args: Record<string, unknown>, log: Logger): void {
  let validate = validators.get(tool)
  if (validate === undefined) {
    validate = compile(tool, log)
    validators.set(tool, validate)
  }
  if (validate === null || validate(args)) return
  // Arguments that fail only for a null sent for an optional argument pass once it is taken as absent.
  if (hasNull(args)) {
    dropNullOptionals(tool.parameters, args)
    if (validate(args)) return
  }
  const messages = (validate.errors ?? []).slice(0, 5).map(describeError)
  throw new ToolError('InvalidArgs', messages.join('; ') || 'arguments do not match the schema')
}

/**
 * The call's arguments as an object: OpenAI sends them as a JSON string.
 * Missing arguments are an empty object.
 */
export function parseArguments (raw: unknown): Record<string, unknown> {
  let value = raw
  if (value === undefined || value === null) return {}
  if (typeof value === 'string') {
    if (value.trim() === '') return {}
    try {
      value = parseJsonText(value)
    } catch (error) {
      if (!(error instanceof JsonTextError)) throw error
      throw new ToolError('InvalidArgs', error.refusedJson ? `arguments ${error.message}` : 'arguments is a string that is not valid JSON')
    }
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new ToolError('InvalidArgs', 'arguments must be a JSON object')
  }
  return value as Record<string, unknown>
}
