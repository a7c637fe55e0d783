/**
 * JSON text from callers (request bodies, arguments sent as a string) read
 * one way: keys that would poison a prototype (`__proto__`,
 * `constructor.prototype`) are refused, never passed on to a tool.
 */
import secureJson from 'secure-json-parse'

/** What a JSON text is wrong with, in words for the caller. */
export class JsonTextError extends Error {
  /** The text is valid JSON but holds a prototype-poisoning key. */
  readonly poisoned: boolean

  constructor (message: string, poisoned: boolean) {
    super(message)
    this.name = 'JsonTextError'
    this.poisoned = poisoned
  }
}

/** Parses `text`; throws JsonTextError saying why it cannot be taken. */
export function parseJsonText (text: string): unknown {
  try {
    return secureJson.parse(text, undefined, { protoAction: 'error', constructorAction: 'error' })
  } catch (error) {
    const message = (error as Error).message
    if (/forbidden (prototype|constructor) property/.test(message)) {
      throw new JsonTextError('holds a "__proto__" key, or "constructor" with "prototype": such keys are refused', true)
    }
    throw new JsonTextError(`is not valid JSON: ${message.split('\n')[0] ?? ''}`, false)
  }
}
