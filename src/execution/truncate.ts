/**
 * Type-aware truncation of a tool result to a byte budget on its JSON form,
 * as clawft's tool lifecycle describes:
 * - strings keep a prefix and get a suffix saying they were cut;
 * - arrays keep their leading elements and end with a sentinel object;
 * - anything else (objects) becomes `{"_truncated_json": "<start of its JSON>"}`.
 * The truncated value's JSON never exceeds the budget.
 */
import { ToolError } from '../errors.ts'

export interface Truncated {
  value: unknown
  truncated: boolean
}

const jsonBytes = (value: unknown): number => Buffer.byteLength(JSON.stringify(value) ?? 'null')

/**
 * An upper bound of the JSON size of `value`, without serialising it: a
 * UTF-16 unit takes at most 6 bytes in JSON (`\u001f`), a number at most
 * 25 (`-0.0000012345678901234567`; 26 counted). Gives up (Infinity) past
 * `limit`, on deep nesting, and on anything whose JSON it cannot see from
 * its own properties (a toJSON, a boxed primitive).
 */
function jsonBytesAtMost (value: unknown, limit: number, depth = 0): number {
  switch (typeof value) {
    case 'string': return value.length * 6 + 2
    case 'number': return 26
    case 'boolean': return 5
    case 'undefined': case 'function': case 'symbol': return 4
    case 'bigint': return Infinity
  }
  if (value === null) return 4
  if (depth > 32 || typeof (value as { toJSON?: unknown }).toJSON === 'function') return Infinity
  if (value instanceof Number || value instanceof String || value instanceof Boolean) return Infinity
  let total = 2
  if (Array.isArray(value)) {
    for (const item of value) {
      total += jsonBytesAtMost(item, limit - total, depth + 1) + 1
      if (total > limit) return Infinity
    }
    return total
  }
  for (const key in value as Record<string, unknown>) {
    if (!Object.hasOwn(value as object, key)) continue
    total += key.length * 6 + 4 + jsonBytesAtMost((value as Record<string, unknown>)[key], limit - total, depth + 1)
    if (total > limit) return Infinity
  }
  return total
}

/**
 * Truncates `value` so that its JSON fits in `maxBytes`. `partial`: the tool
 * gave only the start of its result (it read a bounded part of a file), so
 * this one's size is not the whole's: a string's suffix and an object's
 * envelope then leave it out.
 */
export function truncateResult (value: unknown, maxBytes: number, options: { partial?: boolean } = {}): Truncated {
  // Most results are far below the limit: a bound proves it without serialising them twice.
  if (jsonBytesAtMost(value, maxBytes) <= maxBytes) return { value, truncated: false }
  const serialized = JSON.stringify(value) ?? 'null'
  const size = Buffer.byteLength(serialized)
  if (size <= maxBytes) return { value, truncated: false }
  const total = options.partial === true ? undefined : size
  if (typeof value === 'string') return { value: truncateString(value, maxBytes, total === undefined ? null : Buffer.byteLength(value)), truncated: true }
  if (Array.isArray(value)) return { value: truncateArray(value, maxBytes), truncated: true }
  return { value: wrapJson(serialized, total, maxBytes), truncated: true }
}

/** Cuts a string before `length` code units without splitting a surrogate pair. */
export function safePrefix (text: string, length: number): string {
  let end = Math.max(0, Math.min(length, text.length))
  const last = text.charCodeAt(end - 1)
  if (end > 0 && last >= 0xd800 && last <= 0xdbff) end--
  return text.slice(0, end)
}

/**
 * The longest prefix length of `text` for which `fits(prefix)` holds, by
 * binary search (each probe serialises at most `maxBytes`-ish characters).
 */
function longestFittingPrefix (text: string, upperBound: number, fits: (prefix: string) => boolean): string {
  let low = 0
  let high = Math.min(text.length, upperBound)
  while (low < high) {
    const mid = Math.ceil((low + high) / 2)
    if (fits(safePrefix(text, mid))) low = mid
    else high = mid - 1
  }
  return safePrefix(text, low)
}

/** The longest prefix of `text` whose JSON string takes at most `budget` bytes; never splits a surrogate pair. */
export function fitString (text: string, budget: number): string {
  if (jsonBytes(text) <= budget) return text
  return longestFittingPrefix(text, Math.max(0, budget), (prefix) => jsonBytes(prefix) <= budget)
}

/** A message cut to `maxBytes` (of its JSON string), with an ellipsis when it was cut. */
export function clipText (text: string, maxBytes: number): string {
  const kept = fitString(text, maxBytes)
  return kept.length === text.length ? text : `${kept}…`
}

/**
 * The first `maxChars` characters of a text and a notice naming the total
 * (omega's rule, in characters): `totalChars` when the text is itself a
 * prefix of something longer.
 */
export function truncateText (text: string, maxChars: number, totalChars = text.length): string {
  if (text.length <= maxChars && totalChars <= maxChars) return text
  const kept = safePrefix(text, maxChars)
  return `${kept}\n... (output truncated: ${totalChars} total chars, showing first ${kept.length})`
}

/**
 * Splits `room` bytes among needs: each gets an equal share, and what a
 * small need leaves is shared among the larger ones.
 */
export function shareRoom (room: number, needs: readonly number[]): number[] {
  const shares = needs.map(() => 0)
  let left = Math.max(0, room)
  const order = needs.map((need, index) => ({ need, index })).sort((a, b) => a.need - b.need)
  for (const [position, { need, index }] of order.entries()) {
    const share = Math.min(need, Math.floor(left / (order.length - position)))
    shares[index] = share
    left -= share
  }
  return shares
}

/**
 * `members` with their string values cut so that the JSON of the whole
 * object fits in `maxBytes` (the detail and extra members of a problem,
 * such as a timed-out command's partial output). Other values are kept.
 * The same object when it fits already.
 */
export function fitStringMembers (members: Record<string, unknown>, maxBytes: number): Record<string, unknown> {
  if (jsonBytesAtMost(members, maxBytes) <= maxBytes || jsonBytes(members) <= maxBytes) return members
  const keys = Object.keys(members).filter((key) => typeof members[key] === 'string')
  const emptied = { ...members, ...Object.fromEntries(keys.map((key) => [key, ''])) }
  const needs = keys.map((key) => jsonBytes(members[key]) - 2)
  const shares = shareRoom(maxBytes - jsonBytes(emptied), needs)
  // +2: a share is for the text, its JSON string also has quotes.
  return { ...members, ...Object.fromEntries(keys.map((key, i) => [key, fitString(members[key] as string, (shares[i] ?? 0) + 2)])) }
}

/** An error whose detail and members (a timed-out command's partial output) fit the result limit, as results do. */
export function errorWithinLimit (error: ToolError, maxBytes: number): ToolError {
  const members = { detail: error.message, ...error.extra }
  const fitted = fitStringMembers(members, maxBytes)
  if (fitted === members) return error
  const { detail, ...extra } = fitted
  return new ToolError(error.code, String(detail), { extra, retryAfterSeconds: error.retryAfterSeconds, cause: error.cause })
}

/**
 * A string cut to fit `maxBytes` as JSON, with a suffix naming its total
 * bytes: `total` when the text is itself the start of something longer
 * (a command's output, of which only so much was kept); none when that is
 * not known (null).
 */
export function truncateString (text: string, maxBytes: number, total: number | null = Buffer.byteLength(text)): string {
  const suffix = (kept: string): string => total === null
    ? `\n... (output truncated, showing first ${Buffer.byteLength(kept)} bytes)`
    : `\n... (output truncated: ${total} total bytes, showing first ${Buffer.byteLength(kept)})`
  const kept = longestFittingPrefix(text, maxBytes, (prefix) => jsonBytes(prefix + suffix(prefix)) <= maxBytes)
  const result = kept + suffix(kept)
  return jsonBytes(result) <= maxBytes ? result : ''
}

function sentinel (kept: number, total: number): Record<string, unknown> {
  return { _truncated: true, message: `array truncated: showing ${kept} of ${total} elements`, total_elements: total }
}

function truncateArray (items: unknown[], maxBytes: number): unknown[] {
  const kept: unknown[] = []
  // `[` + `]` + the sentinel, then each element with its comma.
  let used = 2 + jsonBytes(sentinel(items.length, items.length)) + 1
  for (const item of items) {
    const cost = jsonBytes(item) + 1
    if (used + cost > maxBytes) break
    kept.push(item)
    used += cost
  }
  kept.push(sentinel(kept.length, items.length))
  // The sentinel's numbers can grow by a few digits; drop elements until it fits.
  while (kept.length > 1 && jsonBytes(kept) > maxBytes) kept.splice(kept.length - 2, 2, sentinel(kept.length - 2, items.length))
  return kept
}

function wrapJson (serialized: string, totalBytes: number | undefined, maxBytes: number): Record<string, unknown> {
  const envelope = (prefix: string): Record<string, unknown> => totalBytes === undefined ? { _truncated_json: prefix } : { _truncated_json: prefix, _original_bytes: totalBytes }
  const kept = longestFittingPrefix(serialized, maxBytes, (prefix) => jsonBytes(envelope(prefix)) <= maxBytes)
  return envelope(kept)
}
