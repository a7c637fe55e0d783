/**
 * The JSON body parser of every route. A request that has no body to send
 * (a DELETE or GET) may still come with `Content-Type: application/json`
 * and an empty body, as the Python MCP SDK's session end does: that is no
 * body, not an error. Keys that would poison a prototype (`__proto__`,
 * `constructor.prototype`) are refused with a message that names them.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify'
import secureJson from 'secure-json-parse'
import { ToolError } from '../../errors.ts'

const BODILESS_METHODS = new Set(['GET', 'HEAD', 'DELETE', 'OPTIONS'])

/** A JSON text as a value, the way every body is read. */
export function parseJsonText (text: string): unknown {
  try {
    return secureJson.parse(text, undefined, { protoAction: 'error', constructorAction: 'error' })
  } catch (error) {
    const message = (error as Error).message
    if (/forbidden (prototype|constructor) property/.test(message)) {
      throw new ToolError('BadRequest', 'the body holds a "__proto__" key, or "constructor" with "prototype": such keys are refused')
    }
    throw new ToolError('BadRequest', `the body is not valid JSON: ${message.split('\n')[0] ?? ''}`)
  }
}

/**
 * Installs the JSON parser on `app` (and the plugins it registers later);
 * `emptyBody` is what an empty body of a method that has one means
 * (undefined: it is refused).
 */
export function installJsonBody (app: FastifyInstance, emptyBody?: () => unknown): void {
  if (app.hasContentTypeParser('application/json')) app.removeContentTypeParser('application/json')
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request: FastifyRequest, body, done) => {
    const text = String(body)
    try {
      if (text.trim() !== '') return done(null, parseJsonText(text))
      if (BODILESS_METHODS.has(request.method)) return done(null, undefined)
      if (emptyBody) return done(null, emptyBody())
      throw new ToolError('BadRequest', 'the body is empty; send a JSON object')
    } catch (error) {
      done(error as Error, undefined)
    }
  })
}
