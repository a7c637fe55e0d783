/**
 * Turning errors into problem+json answers: ToolErrors keep their code;
 * Fastify's own errors (bad JSON, body too large, schema violations) are
 * mapped to the contract's codes; anything else is a 500 whose details go to
 * the log only.
 */
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest, FastifyServerOptions } from 'fastify'
import { descriptorShortage, isFailure, PROBLEM_CONTENT_TYPE, toProblem, ToolError, volumeFull } from '../../errors.ts'
import { errorWithinLimit } from '../../execution/truncate.ts'

declare module 'fastify' {
  interface FastifyRequest {
    /** The tool a request names, for the `tool` member of its problems. */
    toolName?: string
  }
}

/** Sends a ToolError as problem+json (with Retry-After for Overloaded). */
export function sendProblem (request: FastifyRequest, reply: FastifyReply, error: ToolError): FastifyReply {
  if (error.retryAfterSeconds !== undefined) reply.header('retry-after', String(error.retryAfterSeconds))
  // RFC 9110: a 401 names the scheme it wants.
  if (error.code === 'Unauthorized') reply.header('www-authenticate', 'Bearer realm="toolport"')
  return reply
    .code(error.status)
    .type(PROBLEM_CONTENT_TYPE)
    .send(toProblem(error, request.id, request.toolName))
}

function fromFastifyError (error: FastifyError, request: FastifyRequest): ToolError {
  if (error instanceof ToolError) return error
  if (error.validation) {
    const first = error.validation[0]
    // JSON sent as text/plain (or no body at all) parses to a string: say what to send, not "must be object".
    if (error.validationContext === 'body' && first?.instancePath === '' && typeof request.body !== 'object') {
      return new ToolError('BadRequest', 'the body must be a JSON object, sent with Content-Type: application/json')
    }
    const where = `${error.validationContext ?? 'request'}${first?.instancePath.replace(/\//g, '.') ?? ''}`
    const extra = first?.keyword === 'additionalProperties'
      ? ` "${String(first.params['additionalProperty'])}"`
      : first?.keyword === 'enum' ? `: ${(first.params['allowedValues'] as unknown[]).map(String).join(', ')}` : ''
    return new ToolError('BadRequest', `${where} ${first?.message ?? 'is invalid'}${extra}`)
  }
  switch (error.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new ToolError('PayloadTooLarge', `the request body is larger than the limit of ${request.routeOptions.bodyLimit ?? 'the configured'} bytes`)
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return new ToolError('BadRequest', request.url.endsWith('/archive')
        ? 'unsupported content type: send the .tar.gz as application/gzip'
        : 'unsupported content type: send application/json')
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return new ToolError('BadRequest', 'the body is empty; send a JSON object')
    case 'FST_ERR_CTP_INVALID_CONTENT_LENGTH':
      return new ToolError('BadRequest', 'the Content-Length does not match the body')
  }
  if (error.statusCode === 413) return new ToolError('PayloadTooLarge', 'the request is too large')
  if (error instanceof SyntaxError || error.statusCode === 400) return new ToolError('BadRequest', `malformed request: ${error.message.split('\n')[0]}`)
  if (error.statusCode !== undefined && error.statusCode < 500) return new ToolError('BadRequest', error.message.split('\n')[0] ?? 'bad request')
  return descriptorShortage(error) ?? volumeFull(error) ?? new ToolError('ExecutionFailed', 'internal error', { cause: error })
}

/**
 * The tool a request's route names: `:name` of /v1/tools/:name and
 * /v1/tools/:name/execute, the only routes under /v1/tools/ with that
 * parameter. Read from the parameters, not request.routeOptions, which
 * builds a new object on every read.
 */
function namedTool (request: FastifyRequest): string | undefined {
  const name = (request.params as { name?: unknown } | undefined)?.name
  return typeof name === 'string' && request.url.startsWith('/v1/tools/') ? name : undefined
}

/**
 * A failure is logged with its stack; an answer the service chose to give
 * (a 503 from /readyz while starting or draining, a 504 for a call that
 * timed out) is no failure of the service, and an orchestrator polling
 * /readyz would otherwise fill the log with stack traces.
 */
function logFailure (request: FastifyRequest, error: FastifyError, problem: ToolError): void {
  if (problem.status < 500) return
  if (!isFailure(error)) {
    request.log.debug({ code: problem.code, detail: problem.message }, 'answered with a problem')
    return
  }
  request.log.error({ err: error }, 'request failed')
}

/**
 * Fastify's `frameworkErrors`: a URL the router cannot decode
 * (`/v1/workspaces/%FF`, a parameter past its length) is a problem like any
 * other, cut to the result limit as every problem is, and traced (`trace`)
 * as every request is.
 */
export function malformedUrlHandler (maxResultBytes: number, trace?: (request: FastifyRequest, reply: FastifyReply) => void): NonNullable<FastifyServerOptions['frameworkErrors']> {
  return (error, request, reply) => {
    // No hook runs for it: its span (when tracing is on) starts here.
    trace?.(request, reply)
    reply.header('x-request-id', request.id)
    return sendProblem(request, reply, errorWithinLimit(new ToolError('BadRequest', `malformed URL: ${error.message}`), maxResultBytes))
  }
}

/**
 * Installs the error and not-found handlers: every error leaves as
 * problem+json. The tool a route names is noted first of all, so that even a
 * 401, a 413 or a malformed body answers with `tool`.
 */
export function installProblemHandlers (app: FastifyInstance, maxResultBytes: number): void {
  // Declared, so that every request object has the same shape.
  app.decorateRequest('toolName', undefined)
  // A callback hook: it runs for every request, and a promise per request is not free.
  app.addHook('onRequest', (request, _reply, done) => {
    request.toolName = namedTool(request)
    done()
  })
  app.setErrorHandler((error: FastifyError, request, reply) => {
    const problem = fromFastifyError(error, request)
    logFailure(request, error, problem)
    // Within the result limit as a call's error is (execute.ts): a detail may quote what a caller sent (an archive's names).
    return sendProblem(request, reply, errorWithinLimit(problem, maxResultBytes))
  })
  app.setNotFoundHandler((request, reply) =>
    sendProblem(request, reply, errorWithinLimit(new ToolError('NotFound', `no route ${request.method} ${request.url.split('?')[0]}`), maxResultBytes)))
}
