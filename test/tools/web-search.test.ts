/**
 * web_search against a fake SearXNG server on 127.0.0.1 (the operator's
 * endpoint is trusted, loopback included): the query it sends, results cut
 * to num_results as {title, url, snippet}, the unconfigured answer, and
 * failing endpoints.
 */
import { describe, expect, it } from 'vitest'
import { createWebSearchTool } from '../../src/tools/web-search.ts'
import { buildTestApp, exec } from '../helper.ts'
import { expectProblem } from '../support/problem.ts'
import { startHttpServer } from '../support/servers.ts'

const hits = Array.from({ length: 8 }, (_, i) => ({ title: `Result ${i}`, url: `https://example.org/${i}`, content: `snippet ${i}`, engine: 'x', score: 1 }))

async function searxng () {
  return startHttpServer((_request, response) => {
    response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ query: 'q', number_of_results: hits.length, results: hits }))
  })
}

describe('web_search', () => {
  it('asks GET {endpoint}?q=…&format=json and answers num_results results as {title, url, snippet}', async () => {
    const server = await searxng()
    const app = await buildTestApp({ tools: { web_search: { endpoint: `${server.base}/search?language=en` } } })
    const answer = await exec(app, 'web_search', { query: 'rust async & more', num_results: 3 })
    expect(answer.status, JSON.stringify(answer.body)).toBe(200)
    expect(answer.body.result).toEqual({
      query: 'rust async & more',
      results: [0, 1, 2].map((i) => ({ title: `Result ${i}`, url: `https://example.org/${i}`, snippet: `snippet ${i}` })),
    })
    const sent = new URL(server.requests[0]?.url ?? '', 'http://x')
    expect(server.requests[0]?.method).toBe('GET')
    expect(sent.pathname).toBe('/search')
    expect(Object.fromEntries(sent.searchParams)).toEqual({ language: 'en', q: 'rust async & more', format: 'json' })
  })

  it('answers five results by default', async () => {
    const server = await searxng()
    const app = await buildTestApp({ tools: { web_search: { endpoint: `${server.base}/search` } } })
    const answer = await exec(app, 'web_search', { query: 'x' })
    expect(answer.body.result.results).toHaveLength(5)
  })

  it("answers the seed's informational object with status 200 when no endpoint is configured", async () => {
    const app = await buildTestApp()
    const answer = await exec(app, 'web_search', { query: 'rust async patterns' })
    expect(answer.status).toBe(200)
    expect(answer.body.result).toEqual({
      error: 'web search not configured',
      message: "No search API endpoint is configured. Set 'tools.web_search.endpoint' in your config.",
      query: 'rust async patterns',
    })
  })

  it('answers ExecutionFailed naming the cause when the endpoint fails', async () => {
    const failing = await startHttpServer((request, response) => {
      if (request.url.startsWith('/html')) response.writeHead(200, { 'content-type': 'text/html' }).end('<html>rate limited</html>')
      else response.writeHead(502).end('bad gateway')
    })
    const bad = await buildTestApp({ tools: { web_search: { endpoint: `${failing.base}/search` } } })
    expect(expectProblem(await exec(bad, 'web_search', { query: 'x' }), 500, 'ExecutionFailed', 'web_search')['detail']).toMatch(/HTTP 502/)
    const html = await buildTestApp({ tools: { web_search: { endpoint: `${failing.base}/html` } } })
    expect(expectProblem(await exec(html, 'web_search', { query: 'x' }), 500, 'ExecutionFailed')['detail']).toMatch(/JSON/)
    const gone = await buildTestApp({ tools: { web_search: { endpoint: 'http://127.0.0.1:1/search' } } })
    expect(expectProblem(await exec(gone, 'web_search', { query: 'x' }), 500, 'ExecutionFailed')['detail']).toMatch(/ECONNREFUSED/)
  })

  it('answers Timeout (504) when the endpoint does not answer in time', async () => {
    const hung = await startHttpServer(() => {})
    const app = await buildTestApp({ tools: { web_search: { endpoint: `${hung.base}/search` } } })
    app.runtime.registry.setGroup('builtin', 'zz-test-web-search', [createWebSearchTool(app.runtime.config.tools.web_search, { timeoutMs: 300 })])
    expect(expectProblem(await exec(app, 'web_search', { query: 'x' }), 504, 'Timeout', 'web_search')['detail']).toMatch(/no answer within/)
  })

  it('reads at most 4 MiB of an answer: a longer one is ExecutionFailed, and the rest is not read', async () => {
    let written = 0
    const chunk = Buffer.alloc(64 * 1024, ' ')
    const flood = await startHttpServer((_request, response) => {
      response.writeHead(200, { 'content-type': 'application/json' })
      response.write('{"results": [')
      const pump = (): void => {
        while (written < 256 * 1024 * 1024 && !response.destroyed) {
          written += chunk.length
          if (!response.write(chunk)) { response.once('drain', pump); return }
        }
        response.end(']}')
      }
      pump()
    })
    const app = await buildTestApp({ tools: { web_search: { endpoint: `${flood.base}/search` } } })
    expect(expectProblem(await exec(app, 'web_search', { query: 'x' }), 500, 'ExecutionFailed')['detail']).toMatch(/more than 4 MiB/)
    await new Promise((resolve) => setTimeout(resolve, 200))
    expect(written).toBeLessThan(64 * 1024 * 1024)
  })

  it('skips results that are not objects and answers fields that are not strings as empty', async () => {
    const odd = await startHttpServer((_request, response) => {
      response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({
        results: [null, 'text', 7, [], { title: { nested: 1 }, url: 42, content: null, snippet: 'fallback' }, { title: 'kept', url: 'https://example.org/', content: 'snippet' }],
      }))
    })
    const app = await buildTestApp({ tools: { web_search: { endpoint: `${odd.base}/search` } } })
    const answer = await exec(app, 'web_search', { query: 'x', num_results: 2 })
    expect(answer.status, JSON.stringify(answer.body)).toBe(200)
    expect(answer.body.result.results).toEqual([
      { title: '', url: '', snippet: 'fallback' },
      { title: 'kept', url: 'https://example.org/', snippet: 'snippet' },
    ])
  })

  it('refuses an empty query and a num_results out of range as InvalidArgs', async () => {
    const app = await buildTestApp()
    expectProblem(await exec(app, 'web_search', { query: '' }), 400, 'InvalidArgs')
    expectProblem(await exec(app, 'web_search', { query: 'x', num_results: 0 }), 400, 'InvalidArgs')
  })
})
