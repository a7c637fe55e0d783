/**
 * Request validators compiled by a route's first request
 * (src/http/plugins/lazy-validators.ts): what they accept and refuse is
 * ajv's as before, a route that is never called costs no compiling, and a
 * header schema must name its headers in lower case (Fastify lower-cases
 * them only for its own compiler).
 */
import Fastify, { type FastifyInstance, type InjectOptions } from 'fastify'
import { describe, expect, it } from 'vitest'
import { lazyValidators } from '../../src/http/plugins/lazy-validators.ts'

function appWithLazyValidators () {
  return Fastify({ schemaController: { compilersFactory: { buildValidator: lazyValidators() } } })
}

describe('lazy request validators', () => {
  it('accept and refuse what Fastify\'s own validators do, with the same errors', async () => {
    const routes = (app: FastifyInstance) => app.post('/things', {
      schema: {
        body: { type: 'object', properties: { n: { type: 'integer', minimum: 1 } }, required: ['n'] },
        headers: { type: 'object', properties: { 'x-tag': { type: 'string', maxLength: 3 } } },
        querystring: { type: 'object', properties: { q: { type: 'integer' } }, additionalProperties: false },
      },
    }, async (request) => ({ body: request.body, query: request.query }))
    const requests: InjectOptions[] = [
      { payload: { n: 2 }, headers: { 'X-Tag': 'abc' } },
      { payload: { n: 0 } },
      { payload: { m: 1 } },
      { payload: { n: 1 }, headers: { 'X-Tag': 'abcd' } },
      { payload: { n: 1 }, url: '/things?q=x' },
      { payload: { n: 1 }, url: '/things?q=3&other=1' },
    ]
    const answers = async (app: FastifyInstance) => {
      routes(app)
      const all = []
      for (const request of requests) {
        const answer = await app.inject({ method: 'POST', url: '/things', ...request })
        all.push([answer.statusCode, answer.json()])
      }
      await app.close()
      return all
    }
    const lazy = await answers(appWithLazyValidators())
    expect(lazy).toEqual(await answers(Fastify()))
    expect(lazy.map(([status]) => status)).toEqual([200, 400, 400, 400, 400, 200])
  })

  it('compile nothing before a route is called', async () => {
    const app = appWithLazyValidators()
    // A schema ajv cannot compile: the error comes with the first request, not at start-up.
    app.post('/never', { schema: { body: { type: 'object', properties: { a: { $ref: '#/missing' } } } } }, async () => 'ok')
    await app.ready()
    expect((await app.inject({ method: 'POST', url: '/never', payload: {} })).statusCode).toBe(500)
    await app.close()
  })

  it('refuse a header schema that names a header with capitals', async () => {
    const app = appWithLazyValidators()
    app.get('/h', { schema: { headers: { type: 'object', properties: { 'X-Tag': { type: 'string' } } } } }, async () => 'ok')
    await expect(app.ready()).rejects.toThrow(/header schemas name headers in lower case: X-Tag/)
  })
})
