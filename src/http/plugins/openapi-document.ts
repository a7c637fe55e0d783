/**
 * The service's OpenAPI document (/openapi.json, the /docs page), built by
 * @fastify/swagger on the first request that wants it instead of at
 * start-up: registering swagger loads its modules (a YAML parser, a schema
 * resolver) before the service could answer anything, for a document few
 * clients ask for.
 *
 * At start-up this plugin only notes every route as it is added. The first
 * `app.openApiDocument()` replays those routes (their schemas, no handlers)
 * and the app's shared schemas into an inner Fastify instance with swagger
 * registered, and keeps what swagger makes of them: the same document, since
 * swagger sees the same routes (test/http/health.test.ts compares it with
 * the committed one).
 */
import type { FastifyInstance, RouteOptions } from 'fastify'
import { lazySerializers } from './lazy-serializers.ts'
import { lazyValidators } from './lazy-validators.ts'
import { loadOnce } from '../../load-once.ts'

declare module 'fastify' {
  interface FastifyInstance {
    /** The OpenAPI 3.1 document of every route, built on first use. */
    openApiDocument: () => Promise<Record<string, unknown>>
  }
}

/** What @fastify/swagger's `openapi` option takes. */
export interface OpenApiDocumentOptions {
  openapi: Record<string, unknown>
}

// Route options that belong to the running app (its handlers and hooks), not to the document.
const RUNTIME_ONLY = ['handler', 'onRequest', 'preParsing', 'preValidation', 'preHandler', 'preSerialization', 'onSend', 'onResponse', 'onTimeout', 'onError', 'onRequestAbort', 'errorHandler', 'childLoggerFactory', 'schemaErrorFormatter', 'validatorCompiler', 'serializerCompiler']

async function buildDocument (routes: RouteOptions[], sharedSchemas: unknown[], options: OpenApiDocumentOptions): Promise<Record<string, unknown>> {
  const [{ default: Fastify }, { default: swagger }] = await Promise.all([import('fastify'), import('@fastify/swagger')])
  // The app's own lazy compilers: the inner instance never answers, so nothing is compiled.
  const inner = Fastify({ exposeHeadRoutes: false, schemaController: { compilersFactory: { buildValidator: lazyValidators(), buildSerializer: lazySerializers } } })
  try {
    for (const schema of sharedSchemas) inner.addSchema(schema)
    await inner.register(swagger, {
      openapi: options.openapi,
      refResolver: { buildLocalReference: (json, _baseUri, _fragment, i) => String(json['$id'] ?? `def-${i}`) },
    })
    for (const route of routes) {
      const replayed: Record<string, unknown> = { ...route }
      for (const key of RUNTIME_ONLY) delete replayed[key]
      inner.route({ ...replayed, handler: () => undefined } as unknown as RouteOptions)
    }
    await inner.ready()
    return inner.swagger() as unknown as Record<string, unknown>
  } finally {
    await inner.close()
  }
}

/** Notes every route added to `app` from now on and decorates it with `openApiDocument()`. */
export function installOpenApiDocument (app: FastifyInstance, options: OpenApiDocumentOptions): void {
  const routes: RouteOptions[] = []
  // HEAD routes are Fastify's own copies of the GET routes, which swagger leaves out.
  // The options themselves, as swagger keeps them: hooks added later (idempotency's) still change them.
  app.addHook('onRoute', (route) => { if (route.method !== 'HEAD') routes.push(route) })
  app.decorate('openApiDocument', loadOnce(() => buildDocument(routes, Object.values(app.getSchemas()), options)))
}
