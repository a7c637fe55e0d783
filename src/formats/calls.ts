/**
 * Tool calls as models emit them, in the four shapes a batch accepts:
 * native `{id, name, arguments}`, OpenAI Chat Completions `{id, type:
 * "function", function: {name, arguments}}`, OpenAI Responses `{type:
 * "function_call", call_id, name, arguments}` (its `id`, `fc_…`, is not the
 * call's id) and Anthropic `{type: "tool_use", id, name, input}`.
 */
import { ToolError } from '../errors.ts'
import { safePrefix } from '../execution/truncate.ts'

export interface ParsedCall {
  id: string
  name: string
  arguments: unknown
}

/**
 * The longest call id and tool name a batch takes. Both are echoed back
 * (twice: in results and in messages), so a longer one is refused and echoed
 * cut, never copied whole into the answer.
 */
export const MAX_CALL_ID_CHARS = 256

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value)

const cut = (text: string): string => text.length <= MAX_CALL_ID_CHARS ? text : `${safePrefix(text, MAX_CALL_ID_CHARS)}…`

function rawId (item: unknown): string | undefined {
  if (!isObject(item)) return undefined
  const key = item['type'] === 'function_call' ? 'call_id' : 'id'
  return typeof item[key] === 'string' ? item[key] : undefined
}

function rawName (item: unknown): string {
  if (!isObject(item)) return ''
  const fn = item['function']
  if (isObject(fn) && typeof fn['name'] === 'string') return fn['name']
  return typeof item['name'] === 'string' ? item['name'] : ''
}

/** The id of a call item as far as it can be read (for error results), cut to the limit. */
export function callIdOf (item: unknown, index: number): string {
  return cut(rawId(item) ?? `call_${index}`)
}

/** The name of a call item as far as it can be read (for error results), cut to the limit. */
export function callNameOf (item: unknown): string {
  return cut(rawName(item))
}

/** Reads one call in any of the four shapes; InvalidArgs when it is none of them. */
export function parseCall (item: unknown, index: number): ParsedCall {
  if (!isObject(item)) throw new ToolError('InvalidArgs', `calls[${index}] must be an object`)
  if ((rawId(item)?.length ?? 0) > MAX_CALL_ID_CHARS || rawName(item).length > MAX_CALL_ID_CHARS) {
    throw new ToolError('InvalidArgs', `calls[${index}]: a call id or tool name longer than ${MAX_CALL_ID_CHARS} characters`)
  }
  const id = callIdOf(item, index)
  if (item['type'] === 'function_call' && typeof item['call_id'] !== 'string') throw new ToolError('InvalidArgs', `calls[${index}].call_id must be a string`)
  // Not taken as its text: a number here would come back as a string id the caller never sent (parsed JSON keeps
  // no spelling: 1.50 would be "1.5", 5 the same as "5"); it is answered by its position (call_N). Null is absent
  // (as a client's model dump writes an unset field); a Responses item's `id` is its item id, not the call's.
  if (item['type'] !== 'function_call' && item['id'] !== undefined && item['id'] !== null && typeof item['id'] !== 'string') throw new ToolError('InvalidArgs', `calls[${index}].id must be a string`)
  if (item['type'] === 'function' || isObject(item['function'])) {
    const fn = item['function']
    if (!isObject(fn) || typeof fn['name'] !== 'string') throw new ToolError('InvalidArgs', `calls[${index}].function.name must be a string`)
    return { id, name: fn['name'], arguments: fn['arguments'] }
  }
  if (typeof item['name'] !== 'string') throw new ToolError('InvalidArgs', `calls[${index}].name must be a string`)
  if (item['type'] === 'tool_use') return { id, name: item['name'], arguments: item['input'] }
  return { id, name: item['name'], arguments: item['arguments'] }
}
