/**
 * web_fetch against a real local HTTP server, with
 * `allow_private_networks: true` so that 127.0.0.1 may be reached: the
 * seed's result shape, method and headers, non-2xx answers, the body cap,
 * bad URLs, refused connections and redirects.
 */
import net from 'node:net'
import { describe, expect, it } from 'vitest'
import { buildTestApp, exec } from '../helper.ts'
import { expectProblem } from '../support/problem.ts'
import { startHttpServer } from '../support/servers.ts'

const OPEN = { tools: { web_fetch: { allow_private_networks: true } } }

describe('web_fetch', () => {
  it('answers {status, content_type, body, url, bytes} and sends the method and headers', async () => {
    const server = await startHttpServer((request, response) => {
      response.writeHead(201, { 'content-type': 'application/json; charset=utf-8' }).end(JSON.stringify({ got: request.method, héllo: 'wörld' }))
    })
    const app = await buildTestApp(OPEN)
    const url = `${server.base}/api?x=1`
    const answer = await exec(app, 'web_fetch', { url, method: 'post', headers: { 'X-Test': 'yes', Accept: 'application/json', Host: 'evil.example' } })
    expect(answer.status, JSON.stringify(answer.body)).toBe(200)
    const body = JSON.stringify({ got: 'POST', héllo: 'wörld' })
    expect(answer.body.result).toEqual({ status: 201, content_type: 'application/json; charset=utf-8', body, url, bytes: Buffer.byteLength(body) })
    const [request] = server.requests
    expect(request).toMatchObject({ method: 'POST', url: '/api?x=1' })
    expect(request?.headers['x-test']).toBe('yes')
    expect(request?.headers['accept']).toBe('application/json')
    // Hop-by-hop and routing headers are the client's own business.
    expect(request?.headers['host']).toBe(`127.0.0.1:${server.port}`)
  })

  it('defaults to GET and answers a 404 page as a success with status 404', async () => {
    const server = await startHttpServer((_request, response) => { response.writeHead(404, { 'content-type': 'text/html' }).end('<h1>nope</h1>') })
    const app = await buildTestApp(OPEN)
    const answer = await exec(app, 'web_fetch', { url: `${server.base}/missing` })
    expect(answer.status).toBe(200)
    expect(answer.body.result).toMatchObject({ status: 404, content_type: 'text/html', body: '<h1>nope</h1>', bytes: 13 })
    expect(server.requests[0]?.method).toBe('GET')
  })

  it('keeps the start of a body over max_bytes, says it was cut, and stops reading', async () => {
    const chunk = Buffer.alloc(64 * 1024, 'a')
    const total = 64 * 1024 * 1024
    let written = 0
    const server = await startHttpServer((_request, response) => {
      response.writeHead(200, { 'content-type': 'text/plain' })
      response.write('START-')
      // Writes as fast as the client reads, until the whole body is out or the client has gone.
      const pump = (): void => {
        while (written < total && !response.destroyed) {
          written += chunk.length
          if (!response.write(chunk)) { response.once('drain', pump); return }
        }
        if (written >= total) response.end()
      }
      response.on('close', () => { response.destroy() })
      pump()
    })
    const app = await buildTestApp({ tools: { web_fetch: { allow_private_networks: true, max_bytes: 1000 } } })
    const answer = await exec(app, 'web_fetch', { url: `${server.base}/big` })
    expect(answer.status, JSON.stringify(answer.body).slice(0, 300)).toBe(200)
    const result = answer.body.result as { body: string, bytes: number }
    expect(result.body.startsWith(`START-${'a'.repeat(994)}`)).toBe(true)
    expect(result.body).toMatch(/\n\.\.\. \(body truncated: showing first 1000 bytes\)$/)
    expect(result.body.length).toBeLessThan(1100)
    // The connection was dropped long before the 64 MB were sent.
    await new Promise((resolve) => setTimeout(resolve, 200))
    expect(written).toBeLessThan(16 * 1024 * 1024)
  })

  for (const url of ['file:///etc/passwd', 'ftp://127.0.0.1/x', 'javascript:alert(1)', 'data:text/plain,hi', 'gopher://127.0.0.1:70/', 'not a url', 'http://', '//127.0.0.1/', '']) {
    it(`refuses ${JSON.stringify(url)} as InvalidArgs`, async () => {
      const app = await buildTestApp(OPEN)
      expectProblem(await exec(app, 'web_fetch', { url }), 400, 'InvalidArgs', 'web_fetch')
    })
  }

  it('answers a refused connection as ExecutionFailed', async () => {
    const port = await new Promise<number>((resolve) => {
      const probe = net.createServer().listen(0, '127.0.0.1', () => {
        const { port } = probe.address() as net.AddressInfo
        probe.close(() => resolve(port))
      })
    })
    const app = await buildTestApp(OPEN)
    const problem = expectProblem(await exec(app, 'web_fetch', { url: `http://127.0.0.1:${port}/` }), 500, 'ExecutionFailed', 'web_fetch')
    expect(problem['detail']).toMatch(/ECONNREFUSED/)
  })

  it('follows redirects (303 turns a POST into a GET) and reports the final URL', async () => {
    const server = await startHttpServer((request, response) => {
      if (request.url === '/a') response.writeHead(301, { location: '/b' }).end()
      else if (request.url === '/b') response.writeHead(303, { location: `${'http://127.0.0.1'}:${(response.socket?.localPort ?? 0)}/c` }).end()
      else response.writeHead(200, { 'content-type': 'text/plain' }).end(`at ${request.url} by ${request.method}`)
    })
    const app = await buildTestApp(OPEN)
    const answer = await exec(app, 'web_fetch', { url: `${server.base}/a`, method: 'PUT' })
    expect(answer.body.result).toMatchObject({ status: 200, body: 'at /c by GET', url: `${server.base}/c` })
    expect(server.requests.map((r) => `${r.method} ${r.url}`)).toEqual(['PUT /a', 'PUT /b', 'GET /c'])
  })

  it('sends the caller\'s Authorization and Cookie on redirects within the origin, never to another one', async () => {
    const other = await startHttpServer((_request, response) => { response.writeHead(200).end('elsewhere') })
    const server = await startHttpServer((request, response) => {
      if (request.url === '/a') response.writeHead(302, { location: '/b' }).end()
      else if (request.url === '/b') response.writeHead(307, { location: `${other.base}/c` }).end()
      else response.writeHead(200).end()
    })
    const app = await buildTestApp(OPEN)
    const headers = { Authorization: 'Bearer USER-KEY', cookie: 'sid=1', 'X-Kept': 'yes' }
    expect((await exec(app, 'web_fetch', { url: `${server.base}/a`, headers })).body.result).toMatchObject({ body: 'elsewhere', url: `${other.base}/c` })
    expect(server.requests.map((r) => [r.url, r.headers['authorization'], r.headers['cookie']])).toEqual([['/a', 'Bearer USER-KEY', 'sid=1'], ['/b', 'Bearer USER-KEY', 'sid=1']])
    expect(other.requests[0]?.headers).toMatchObject({ 'x-kept': 'yes' })
    expect(other.requests[0]?.headers['authorization']).toBeUndefined()
    expect(other.requests[0]?.headers['cookie']).toBeUndefined()
  })

  it('checks the scheme of every hop, and gives up after too many redirects', async () => {
    const server = await startHttpServer((request, response) => {
      if (request.url === '/file') response.writeHead(302, { location: 'file:///etc/passwd' }).end()
      else response.writeHead(302, { location: `/loop${request.url}` }).end()
    })
    const app = await buildTestApp(OPEN)
    expectProblem(await exec(app, 'web_fetch', { url: `${server.base}/file` }), 400, 'InvalidArgs')
    const loop = expectProblem(await exec(app, 'web_fetch', { url: `${server.base}/x` }), 500, 'ExecutionFailed')
    expect(loop['detail']).toMatch(/redirects/)
    expect(server.requests.length).toBe(1 + 6)
  })
})
