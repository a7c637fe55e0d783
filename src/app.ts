/**
 * buildApp(config): the Fastify application with every route of the
 * contract. It never listens: server.ts does, and tests use `inject` or
 * listen on port 0 themselves.
 */
import Fastify, { type FastifyBaseLogger, type FastifyInstance, LogController } from 'fastify'
import { type Logger, pino } from 'pino'
import { authIsOn, type Config } from './config.ts'
import { Runtime } from './runtime.ts'
import { installAnswerDelivery } from './http/plugins/answer-delivery.ts'
import { installAuth } from './http/plugins/auth.ts'
import { installForwarded } from './http/plugins/forwarded.ts'
import { idempotency } from './http/plugins/idempotency.ts'
import { docsUi } from './http/plugins/docs-ui.ts'
import { installOpenApiDocument } from './http/plugins/openapi-document.ts'
import { lazySerializers } from './http/plugins/lazy-serializers.ts'
import { lazyValidators } from './http/plugins/lazy-validators.ts'
import { answerClientError } from './http/plugins/client-errors.ts'
import { requestIdOf } from './execution/request-id.ts'
import { healthRoutes } from './http/routes/health.ts'
import { installJsonBody } from './http/plugins/json-body.ts'
import { mcpRoutes } from './http/routes/mcp.ts'
import { openApiToolRoutes } from './http/routes/openapi-tools.ts'
import { processRoutes } from './http/routes/processes.ts'
import { installProblemHandlers, malformedUrlHandler } from './http/plugins/problem.ts'
import { installTracing, traceRequest } from './http/plugins/tracing.ts'
import type { Tracing } from './telemetry/tracing.ts'
import { ToolError } from './errors.ts'
import { ProblemSchema } from './http/schemas.ts'
import { toolCallRoutes } from './http/routes/tool-calls.ts'
import { toolRoutes } from './http/routes/tools.ts'
import { archiveRoutes } from './http/routes/workspace-archive.ts'
import { workspaceRoutes } from './http/routes/workspaces.ts'
import { VERSION } from './version.ts'

declare module 'fastify' {
  interface FastifyInstance {
    runtime: Runtime
  }
}

export interface BuildOptions {
  /** The logger; a silent one when absent. */
  logger?: Logger
  /** Paths no sandboxed process may see (the config file). */
  hidePaths?: string[]
  /** Process metrics (off in tests that build many apps). */
  defaultMetrics?: boolean
  /** Tracing, when it is on (start.ts loads it); the caller shuts it down after close(). */
  tracing?: Tracing
  /** What to do when the sandbox the config requires does not work (start.ts ends the service); logged when absent. */
  startFailed?: (error: Error) => void
  /** How long after listening the start-up work begins when no request has been answered (tests). */
  deferredStartMs?: number
}

/** How long after listening the start-up work that waits for the first answer begins anyway, when no request comes. */
const DEFERRED_START_MAX_WAIT_MS = 100

export async function buildApp (config: Config, options: BuildOptions = {}): Promise<FastifyInstance> {
  const { tracing } = options
  const app = Fastify({
    loggerInstance: (options.logger ?? pino({ level: 'silent' })) as FastifyBaseLogger,
    bodyLimit: config.server.body_limit_bytes,
    // A client has this long to send its whole request (slow-loris); answers may take as long as calls do.
    requestTimeout: config.server.request_timeout_ms,
    http: {
      maxHeaderSize: config.server.max_header_bytes,
      // Given at creation too: Node arms its request-timeout checks only from the constructor's options.
      requestTimeout: config.server.request_timeout_ms,
      headersTimeout: Math.min(60_000, config.server.request_timeout_ms),
      // Node looks for overdue requests on this interval (30 s by default, longer than a short timeout).
      connectionsCheckingInterval: Math.min(30_000, Math.max(50, Math.floor(config.server.request_timeout_ms / 4))),
      // Node would answer a missing Host with a bare 400 of its own; the onRequest hook answers it as a problem.
      requireHostHeader: false,
    },
    clientErrorHandler: answerClientError,
    frameworkErrors: malformedUrlHandler(config.limits.max_result_bytes, tracing && ((request, reply) => { traceRequest(tracing, request, reply) })),
    // Workspace ids may be 256 bytes, percent-encoded up to three times that.
    routerOptions: { maxParamLength: 1024 },
    genReqId: (request) => requestIdOf(request.headers['x-request-id']),
    // One completion line per tool call comes from the execution path; per-request lines would double it.
    logController: new LogController({ disableRequestLogging: true, requestIdLogLabel: 'request_id' }),
    return503OnClosing: true,
    // No HEAD twin of every GET route: a HEAD would do the GET's work and throw the answer away
    // (pack a workspace's archive, wait out an output long-poll), and each twin is a route more to
    // register at start. The health checks answer HEAD (routes/health.ts).
    exposeHeadRoutes: false,
    // close() comes after the drain (server.ts): whatever connection is still open then is idle or a stream.
    forceCloseConnections: true,
    schemaController: { compilersFactory: { buildSerializer: lazySerializers, buildValidator: lazyValidators() } },
    // validateSchema: the route schemas are the service's own constants, not worth a meta-schema check at every start.
    ajv: { customOptions: { coerceTypes: false, removeAdditional: false, useDefaults: true, allErrors: false, validateSchema: false } },
  })
  const runtime = new Runtime(config, app.log as Logger, { hidePaths: options.hidePaths, defaultMetrics: options.defaultMetrics, tracing })
  app.decorate('runtime', runtime)
  // First of the hooks, so that the span covers a request that auth or a limit refuses.
  if (tracing) installTracing(app, tracing)
  // Before the other hooks: a request that comes on a connection being closed is not run.
  installAnswerDelivery(app, config.server.request_timeout_ms)
  // Before the hook below: its refusals name the route's tool, as every problem does.
  installProblemHandlers(app, config.limits.max_result_bytes)
  // A callback hook, not an async one: it runs for every request, and a promise per request is not free.
  // One listener for every response: 'close' fires once per response, so no once-wrapper (or closure) per request.
  const answered = (): void => { runtime.activeRequests-- }
  app.addHook('onRequest', (request, reply, done) => {
    reply.header('x-request-id', request.id)
    // Only a path: an absolute URL (`GET http://host/v1/…`) is routed by its path, but nothing may treat it as one.
    if (!request.url.startsWith('/')) {
      done(new ToolError('BadRequest', 'the request target must be a path, not an absolute URL'))
      return
    }
    // The router refuses a path that does not decode; the query parser would take such bytes as they are.
    const queryAt = request.url.indexOf('?')
    if (queryAt !== -1 && !isPercentEncodedText(request.url.slice(queryAt + 1))) {
      done(new ToolError('BadRequest', 'malformed URL: the query string is not percent-encoded UTF-8'))
      return
    }
    if (request.headers.host === undefined && request.raw.httpVersion === '1.1') {
      done(new ToolError('BadRequest', 'an HTTP/1.1 request must have a Host header'))
      return
    }
    // Count the answers a drain must wait for; an MCP event stream stays open for good and is not one.
    if (request.method !== 'GET' || !request.url.startsWith('/mcp')) {
      runtime.activeRequests++
      reply.raw.on('close', answered)
    }
    done()
  })
  // What start-up can put off (the sandbox probes, the executables' scan, the MCP connections) begins
  // once the first request to the main server has been answered or DEFERRED_START_MAX_WAIT_MS after
  // listening, whichever comes first: each of its process spawns holds the event loop for a few ms,
  // which the first answer (an orchestrator's liveness check) would otherwise wait out. (A host that
  // names several addresses is served by more servers than the main one; there the wait decides.)
  // A call that needs a process before then starts the probes itself (the tools' DeferredRunner).
  let deferredStart: NodeJS.Timeout | undefined
  let startBegun = false
  const startFailed = options.startFailed ?? ((error: Error) => { app.log.error({ err: error }, 'start-up failed') })
  const finishStart = (): void => {
    if (startBegun) return
    startBegun = true
    clearTimeout(deferredStart)
    runtime.finishStart().catch((error: unknown) => { startFailed(error instanceof Error ? error : new Error(String(error))) })
  }
  app.addHook('onListen', (done) => {
    deferredStart ??= setTimeout(finishStart, options.deferredStartMs ?? DEFERRED_START_MAX_WAIT_MS)
    app.server.once('request', (_request, response) => { response.once('close', finishStart) })
    done()
  })
  app.addHook('onClose', async () => {
    clearTimeout(deferredStart)
    await runtime.close()
  })
  installJsonBody(app)
  await installAuth(app, config.auth)
  installForwarded(app, runtime.processLocator.peers.key)

  app.addSchema(ProblemSchema)
  installOpenApiDocument(app, {
    openapi: {
      openapi: '3.1.0',
      info: { title: 'Toolport', version: VERSION, description: 'Tool catalogs and sandboxed tool execution for LLM agents.' },
      components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } },
      security: authIsOn(config.auth) ? [{ bearer: [] }] : [],
    },
  })
  await app.register(docsUi)

  // Each route module is an encapsulated plugin: what it adds (a body parser, a hook) stays its own.
  // Before the routes: it hooks into the ones that declare `idempotent`.
  await app.register(idempotency, { runtime })
  await app.register(healthRoutes, { runtime })
  await app.register(toolRoutes, { runtime })
  await app.register(toolCallRoutes, { runtime })
  await app.register(workspaceRoutes, { runtime })
  await app.register(archiveRoutes, { runtime })
  await app.register(processRoutes, { runtime })
  await app.register(openApiToolRoutes, { runtime })
  await app.register(mcpRoutes, { runtime })

  await runtime.start()
  return app
}

/** Whether a query string's escapes decode, and to UTF-8 text (`%E9` alone is no character). */
function isPercentEncodedText (query: string): boolean {
  try {
    // The result is used: a bundler takes a call to a built-in whose result is dropped for one without effects, and drops it.
    return typeof decodeURIComponent(query) === 'string'
  } catch {
    return false
  }
}
