/**
 * The JSON body parser of every route. A request that has no body to send
 * (a DELETE or GET) may still come with `Content-Type: application/json`
 * and an empty body, as the Python MCP SDK's session end does: that is no
 * body, not an error. Keys that would poison a prototype (`__proto__`,
 * `constructor.prototype`) are refused with a message that names them.
 * Bodies are read as sent, in UTF-8 (as JSON must be): a compressed one or
 * one labelled UTF-16 or UTF-32 is refused as such, not as "not valid JSON",
 * and bytes that are not UTF-8 are refused, never read as U+FFFD (which
 * would write other bytes than were sent, and make two bodies one).
 */
import { isUtf8 } from 'node:buffer'
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
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request: FastifyRequest, body: Buffer, done) => {
    try {
      const text = isUtf8(body) ? body.toString('utf8') : undefined
      if (text === undefined || text.trim() !== '') {
        refuseEncoding(request)
        if (text === undefined) throw new ToolError('BadRequest', 'the body is not UTF-8 text: send JSON in UTF-8')
        return done(null, parseBody(text))
      }
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

/** The longest header value a refusal quotes. */
const QUOTED_HEADER_CHARS = 40

function refuseEncoding (request: FastifyRequest): void {
  const encoding = request.headers['content-encoding']?.trim()
  if (encoding && encoding.toLowerCase() !== 'identity') {
    throw new ToolError('BadRequest', `Content-Encoding ${JSON.stringify(encoding.slice(0, QUOTED_HEADER_CHARS))} is not supported: send the body uncompressed`)
  }
  // JSON is UTF-8 (RFC 8259), whatever the label says; only a label of an encoding that is not
  // ASCII at heart is refused, as its text cannot be read so (an ISO-8859-1 label on ASCII JSON can).
  const charset = /;\s*charset\s*=\s*"?([^";\s]*)/i.exec(request.headers['content-type'] ?? '')?.[1]
  if (charset !== undefined && /^(utf-?(16|32)|ucs-?[24])/i.test(charset)) {
    throw new ToolError('BadRequest', `charset ${JSON.stringify(charset.slice(0, QUOTED_HEADER_CHARS))} is not supported: send JSON in UTF-8`)
  }
}

function parseBody (text: string): unknown {
  try {
    return parseJsonText(text)
  } catch (error) {
    if (error instanceof JsonTextError) throw new ToolError('BadRequest', `the body ${error.message}`)
    throw error
  }
}
