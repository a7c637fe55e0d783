/**
 * /docs: the OpenAPI document in Swagger UI. @fastify/swagger-ui and the
 * static file server under it are loaded by the first request for a page,
 * not at start-up: a service is seldom browsed. They live in a small
 * Fastify instance of their own, given the app's document; these routes
 * hand it each request and send back its answer.
 */
import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify'
import { loadOnce } from '../../load-once.ts'

const PREFIX = '/docs'
/** Headers of the inner answer that describe its connection, not its content: the outer reply has its own. */
const CONNECTION_HEADERS = new Set(['connection', 'keep-alive', 'transfer-encoding', 'date'])

async function buildUi (document: unknown): Promise<FastifyInstance> {
  const [{ default: Fastify }, { default: swagger }, { default: swaggerUi }] = await Promise.all([import('fastify'), import('@fastify/swagger'), import('@fastify/swagger-ui')])
  const ui = Fastify()
  try {
    await ui.register(swagger, { mode: 'static', specification: { document: document as never } })
    await ui.register(swaggerUi, { routePrefix: PREFIX })
    await ui.ready()
  } catch (error) {
    // Tried again by the next request: this one is not left behind.
    await ui.close().catch(() => {})
    throw error
  }
  return ui
}

export const docsUi: FastifyPluginAsync = async (app) => {
  const ui = loadOnce(async () => buildUi(await app.openApiDocument()))
  app.addHook('onClose', async () => {
    await (await ui.begun)?.close()
  })

  const forward = async (request: FastifyRequest, reply: FastifyReply) => {
    const answer = await (await ui()).inject({ method: 'GET', url: request.url, headers: request.headers })
    // A page that is not there is the app's NotFound problem, as for any other URL.
    if (answer.statusCode === 404) return reply.callNotFound()
    const headers = Object.fromEntries(Object.entries(answer.headers).filter(([name]) => !CONNECTION_HEADERS.has(name)))
    return reply.code(answer.statusCode).headers(headers).send(answer.rawPayload)
  }
  app.get(PREFIX, { schema: { hide: true } }, forward)
  app.get(`${PREFIX}/*`, { schema: { hide: true } }, forward)
}
