/**
 * JSON text from callers (request bodies, arguments sent as a string) read
 * one way: keys that would poison a prototype (`__proto__`,
 * `constructor.prototype`) are refused, never passed on to a tool, and so is
 * JSON nested deeper than anything the service passes on can take, and a
 * number no 64-bit float holds.
 */
import secureJson from 'secure-json-parse'

/** What a JSON text is wrong with, in words for the caller. */
export class JsonTextError extends Error {
  /** The text is valid JSON, refused for what it holds (a prototype-poisoning key, its depth, a number past a 64-bit float). */
  readonly refusedJson: boolean

  constructor (message: string, refusedJson: boolean) {
    super(message)
    this.name = 'JsonTextError'
    this.refusedJson = refusedJson
  }
}

/**
 * How deep JSON from outside (a caller's, a tool's, an upstream server's)
 * may nest: deeper, serialising it again (a result, a catalog's ETag)
 * would overflow the stack. Real schemas and data nest a few dozen levels.
 */
export const MAX_JSON_DEPTH = 200

/**
 * What of `value` cannot be taken (looked at without recursion): arrays and
 * objects nested deeper than `max` levels, and, when `numbers` is set, a
 * number past a 64-bit float (`1e400` parses as Infinity, which a schema
 * takes for an integer and JSON writes back as null).
 */
function refusalOf (value: unknown, max: number, numbers: boolean): 'depth' | 'number' | undefined {
  const stack: Array<[unknown, number]> = [[value, 1]]
  for (let next = stack.pop(); next !== undefined; next = stack.pop()) {
    const [inner, depth] = next
    if (numbers && typeof inner === 'number' && !Number.isFinite(inner)) return 'number'
    if (inner === null || typeof inner !== 'object') continue
    if (depth > max) return 'depth'
    for (const member of Array.isArray(inner) ? inner : Object.values(inner)) {
      // Numbers and empty arrays and objects are looked at here, not stacked: a body of a million of
      // them must not become a million stack entries.
      if (numbers && typeof member === 'number' && !Number.isFinite(member)) return 'number'
      if (member === null || typeof member !== 'object') continue
      if (isEmpty(member)) {
        if (depth + 1 > max) return 'depth'
      } else {
        stack.push([member, depth + 1])
      }
    }
  }
  return undefined
}

function isEmpty (value: object): boolean {
  if (Array.isArray(value)) return value.length === 0
  for (const key in value) if (Object.hasOwn(value, key)) return false
  return true
}

/** Whether `value` nests arrays and objects deeper than `max` levels. */
export function nestedDeeperThan (value: unknown, max = MAX_JSON_DEPTH): boolean {
  return refusalOf(value, max, false) === 'depth'
}

/** Parses `text`; throws JsonTextError saying why it cannot be taken. */
export function parseJsonText (text: string): unknown {
  let value: unknown
  try {
    value = secureJson.parse(text, undefined, { protoAction: 'error', constructorAction: 'error' })
  } catch (error) {
    const message = (error as Error).message
    if (/forbidden (prototype|constructor) property/.test(message)) {
      throw new JsonTextError('holds a "__proto__" key, or "constructor" with "prototype": such keys are refused', true)
    }
    throw new JsonTextError(`is not valid JSON: ${message.split('\n')[0] ?? ''}`, false)
  }
  const refusal = refusalOf(value, MAX_JSON_DEPTH, true)
  if (refusal === 'depth') throw new JsonTextError(`is nested more than ${MAX_JSON_DEPTH} levels deep`, true)
  if (refusal === 'number') throw new JsonTextError('holds a number too large for a 64-bit float (such as 1e400)', true)
  return value
}
