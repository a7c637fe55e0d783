/**
 * JSON text from callers (request bodies, arguments sent as a string) read
 * one way: keys that would poison a prototype (`__proto__`,
 * `constructor.prototype`) are refused, never passed on to a tool, and so is
 * JSON nested deeper than anything the service passes on can take, a
 * number no 64-bit float holds, and a string (key or value) that is not
 * well-formed Unicode (an unpaired surrogate, `"\ud800"`: no UTF-8 form).
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
  // Only an escape can make a lone surrogate (UTF-8 text decodes to none): its strings are looked at only then.
  if (/\\u[dD][89a-fA-F]/.test(text) && !wellFormed(value)) {
    throw new JsonTextError('holds a string that is not well-formed Unicode (an unpaired surrogate such as \\ud800), which has no UTF-8 form', true)
  }
  const refusal = refusalOf(value, MAX_JSON_DEPTH, true)
  if (refusal === 'depth') throw new JsonTextError(`is nested more than ${MAX_JSON_DEPTH} levels deep`, true)
  if (refusal === 'number') throw new JsonTextError('holds a number too large for a 64-bit float (such as 1e400)', true)
  return value
}

/** Whether every string in `value`, keys included, is well-formed Unicode (looked at without recursion). */
function wellFormed (value: unknown): boolean {
  const stack: unknown[] = [value]
  for (let next = stack.pop(); next !== undefined; next = stack.pop()) {
    if (typeof next === 'string' && !next.isWellFormed()) return false
    if (next === null || typeof next !== 'object') continue
    if (Array.isArray(next)) {
      for (const item of next) stack.push(item)
    } else {
      for (const [key, member] of Object.entries(next)) {
        if (!key.isWellFormed()) return false
        stack.push(member)
      }
    }
  }
  return true
}

/**
 * JSON text parsed only when every number in it is kept exactly (a 64-bit id
 * such as 1234567890123456789, a decimal of more digits than a double holds,
 * 1e400): undefined otherwise, and for text that is not JSON. A tool's output
 * whose numbers would change is better passed on as the text it is.
 */
export function parseExactly (text: string): { value: unknown } | undefined {
  let exact = true
  try {
    // A double keeps every number of 15 digits or fewer without an exponent: text without a longer run of
    // digits or an exponent is parsed plainly (a reviver that sees each value's source is many times slower).
    if (!mayBeInexact(text)) return { value: JSON.parse(text) as unknown }
    const value: unknown = JSON.parse(text, function (this: unknown, _key: string, parsed: unknown, context?: { source?: string }) {
      if (typeof parsed === 'number' && context?.source !== undefined && context.source !== String(parsed) && decimalOf(context.source) !== decimalOf(String(parsed))) exact = false
      return parsed
    } as Parameters<typeof JSON.parse>[1])
    return exact ? { value } : undefined
  } catch {
    return undefined
  }
}

/**
 * Whether `text` has a run of 16 digits and points (16 digits, or 15 and a point) or a digit before an
 * exponent. A loop: a regular expression for the run backtracks at every character (five times JSON.parse).
 */
function mayBeInexact (text: string): boolean {
  let run = 0
  for (let index = 0; index < text.length; index++) {
    const code = text.charCodeAt(index)
    if ((code >= 0x30 && code <= 0x39) || code === 0x2e) {
      if (++run >= 16) return true
    } else {
      if (run > 0 && (code === 0x65 || code === 0x45)) return true
      run = 0
    }
  }
  return false
}

/** A number's decimal value in one spelling (`-0.123e4` for -1230, 1230.0 and -1.23e3), to tell whether two texts name the same. */
function decimalOf (text: string): string {
  const parts = /^(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/.exec(text)
  if (parts === null) return text
  const [, sign = '', whole = '', fraction = '', exponent = '0'] = parts
  const all = whole + fraction
  const leading = all.length - all.replace(/^0+/, '').length
  const digits = all.replace(/^0+/, '').replace(/0+$/, '')
  if (digits === '') return '0'
  return `${sign}0.${digits}e${whole.length + Number(exponent) - leading}`
}
