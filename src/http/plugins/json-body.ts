/**
 * The JSON body parser of every route. A request that has no body to send
 * (a DELETE or GET) may still come with `Content-Type: application/json`
 * and an empty body, as the Python MCP SDK's session end does: that is no
 * body, not an error. Keys that would poison a prototype (`__proto__`,
 * `constructor.prototype`) are refused with a message that names them.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify'
import { ToolError } from '../../errors.ts'
import { JsonTextError, parseJsonText } from '../../execution/json-text.ts'

const BODILESS_METHODS = new Set(['GET', 'HEAD', 'DELETE', 'OPTIONS'])

/**
 * Installs the JSON parser on `app` (and the plugins it registers later);
 * `emptyBody` is what an empty body of a method that has one means
 * (undefined: it is refused), whether it came as empty JSON or as no body
 * at all (`curl -X POST` sends no Content-Type).
 */
export function installJsonBody (app: FastifyInstance, emptyBody?: () => unknown): void {
  if (app.hasContentTypeParser('application/json')) app.removeContentTypeParser('application/json')
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request: FastifyRequest, body, done) => {
    const text = String(body)
    try {
      if (text.trim() !== '') return done(null, parseBody(text))
      if (BODILESS_METHODS.has(request.method)) return done(null, undefined)
      if (emptyBody) return done(null, emptyBody())
      throw new ToolError('BadRequest', 'the body is empty; send a JSON object')
    } catch (error) {
      done(error as Error, undefined)
    }
  })
  if (!emptyBody) return
  app.addHook('preValidation', (request, _reply, done) => {
    const { headers } = request
    const noBody = headers['transfer-encoding'] === undefined && (headers['content-length'] === undefined || headers['content-length'] === '0')
    if (request.body === undefined && noBody && !BODILESS_METHODS.has(request.method)) request.body = emptyBody()
    done()
  })
}

function parseBody (text: string): unknown {
  try {
    return parseJsonText(text)
  } catch (error) {
    if (error instanceof JsonTextError) throw new ToolError('BadRequest', `the body ${error.message}`)
    throw error
  }
}
