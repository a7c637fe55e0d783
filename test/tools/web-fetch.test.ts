/**
 * web_fetch against a real local HTTP server, with
 * `allow_private_networks: true` so that 127.0.0.1 may be reached: the
 * seed's result shape, method and headers, non-2xx answers, the body cap,
 * bad URLs, refused connections and redirects.
 */
import net from 'node:net'
import zlib from 'node:zlib'
import { describe, expect, it } from 'vitest'
import { requestFailure } from '../../src/tools/http-body.ts'
import { createWebFetchTool } from '../../src/tools/web-fetch.ts'
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

  it('cuts a body at max_bytes without showing the character cut in two as U+FFFD', async () => {
    const server = await startHttpServer((request, response) => {
      const utf16 = request.url === '/utf16'
      response.writeHead(200, { 'content-type': `text/plain; charset=${utf16 ? 'utf-16le' : 'utf-8'}` })
      response.end(utf16 ? Buffer.from('abcde', 'utf16le') : `abc${'😀'.repeat(5)}`)
    })
    const app = await buildTestApp({ tools: { web_fetch: { allow_private_networks: true, max_bytes: 9 } } })
    const utf8 = (await exec(app, 'web_fetch', { url: `${server.base}/utf8` })).body.result as { body: string }
    expect(utf8.body).toBe('abc😀\n... (body truncated: showing first 9 bytes)')
    const utf16 = (await exec(app, 'web_fetch', { url: `${server.base}/utf16` })).body.result as { body: string }
    expect(utf16.body).toBe('abcd\n... (body truncated: showing first 9 bytes)')
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

  it('answers a connection that found no descriptor free as Overloaded with Retry-After, not the site\'s failure', () => {
    const call = { signal: new AbortController().signal, timeout: new AbortController().signal, timeoutMs: 1000 }
    const emfile = Object.assign(new Error('connect EMFILE 127.0.0.1:80'), { code: 'EMFILE' })
    for (const error of [emfile, Object.assign(new TypeError('fetch failed'), { cause: emfile })]) {
      expect(requestFailure(error, 'the site', call)).toMatchObject({ code: 'Overloaded', retryAfterSeconds: 1 })
    }
    expect(requestFailure(Object.assign(new Error('refused'), { code: 'ECONNREFUSED' }), 'the site', call)).toMatchObject({ code: 'ExecutionFailed' })
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

  it('answers a redirect to a Location that is no URL as ExecutionFailed', async () => {
    const server = await startHttpServer((_request, response) => { response.writeHead(302, { location: 'http://[not-an-address/' }).end() })
    const app = await buildTestApp(OPEN)
    expect(expectProblem(await exec(app, 'web_fetch', { url: `${server.base}/a` }), 500, 'ExecutionFailed')['detail']).toMatch(/redirected to an invalid URL/)
  })

  for (const [what, args] of [
    ['a header name with a space', { headers: { 'bad name': 'x' } }],
    ['a header value with CR LF', { headers: { 'x-a': 'a\r\nInjected: yes' } }],
    ['a header value with NUL', { headers: { 'x-a': 'a\u0000b' } }],
    ['a header value beyond Latin-1', { headers: { 'x-a': '\u0100' } }],
    ['an Expect header', { headers: { Expect: '100-continue' } }],
    ['the CONNECT method', { method: 'CONNECT' }],
  ] as const) {
    it(`refuses ${what} as InvalidArgs and sends nothing`, async () => {
      const server = await startHttpServer((_request, response) => { response.writeHead(200).end('ok') })
      const app = await buildTestApp(OPEN)
      expect(expectProblem(await exec(app, 'web_fetch', { url: `${server.base}/`, ...args }), 400, 'InvalidArgs', 'web_fetch')['detail']).toMatch(/cannot be sent/)
      expect(server.requests).toEqual([])
    })
  }

  it('decodes a gzip, deflate or brotli body, and cuts the decoded body at max_bytes', async () => {
    const text = 'héllo wörld '.repeat(1000)
    const encoders: Record<string, (data: Buffer) => Buffer> = { gzip: zlib.gzipSync, deflate: zlib.deflateSync, br: zlib.brotliCompressSync }
    const server = await startHttpServer((request, response) => {
      const encoding = request.url.slice(1)
      const encode = encoders[encoding] ?? zlib.gzipSync
      const body = encoding === 'bomb' ? encode(Buffer.alloc(256 * 1024 * 1024)) : encode(Buffer.from(text))
      response.writeHead(200, { 'content-type': 'text/plain; charset=utf-8', 'content-encoding': encoding === 'bomb' ? 'gzip' : encoding, 'content-length': body.length }).end(body)
    })
    const app = await buildTestApp({ tools: { web_fetch: { allow_private_networks: true, max_bytes: 1_000_000 } } })
    for (const encoding of Object.keys(encoders)) {
      const answer = await exec(app, 'web_fetch', { url: `${server.base}/${encoding}`, headers: { 'Accept-Encoding': encoding } })
      expect(answer.status, JSON.stringify(answer.body).slice(0, 300)).toBe(200)
      expect(answer.body.result).toMatchObject({ body: text, bytes: Buffer.byteLength(text) })
    }
    const small = await buildTestApp({ tools: { web_fetch: { allow_private_networks: true, max_bytes: 1000 } } })
    const bomb = await exec(small, 'web_fetch', { url: `${server.base}/bomb` })
    expect(bomb.body.result.body).toBe(`${'\u0000'.repeat(1000)}\n... (body truncated: showing first 1000 bytes)`)
  })

  it('decodes raw deflate as browsers do, and takes an empty body as empty whatever its coding (HEAD, 204, 304)', async () => {
    const server = await startHttpServer((request, response) => {
      if (request.url === '/raw') response.writeHead(200, { 'content-encoding': 'deflate' }).end(zlib.deflateRawSync(Buffer.from('raw deflate')))
      else if (request.url === '/none') response.writeHead(204, { 'content-encoding': 'gzip' }).end()
      else if (request.url === '/cached') response.writeHead(304, { 'content-encoding': 'br' }).end()
      else response.writeHead(200, { 'content-encoding': 'gzip', 'content-type': 'text/plain' }).end(request.method === 'HEAD' ? undefined : zlib.gzipSync('full'))
    })
    const app = await buildTestApp(OPEN)
    expect((await exec(app, 'web_fetch', { url: `${server.base}/raw` })).body.result).toMatchObject({ status: 200, body: 'raw deflate' })
    expect((await exec(app, 'web_fetch', { url: `${server.base}/none` })).body.result).toMatchObject({ status: 204, body: '', bytes: 0 })
    expect((await exec(app, 'web_fetch', { url: `${server.base}/cached` })).body.result).toMatchObject({ status: 304, body: '' })
    expect((await exec(app, 'web_fetch', { url: `${server.base}/gz`, method: 'HEAD' })).body.result).toMatchObject({ status: 200, body: '', content_type: 'text/plain' })
    expect((await exec(app, 'web_fetch', { url: `${server.base}/gz` })).body.result).toMatchObject({ status: 200, body: 'full' })
  })

  it('answers a compressed body that stalls as Timeout (504), not as a body that is not valid', async () => {
    const stalled = await startHttpServer((_request, response) => {
      response.writeHead(200, { 'content-encoding': 'gzip' })
      response.write(zlib.gzipSync(Buffer.alloc(100_000, 'a')).subarray(0, 40))
    })
    const app = await buildTestApp(OPEN)
    app.runtime.registry.setGroup('builtin', 'zz-test-web-fetch', [createWebFetchTool(app.runtime.config.tools.web_fetch, { timeoutMs: 500 })])
    expectProblem(await exec(app, 'web_fetch', { url: `${stalled.base}/` }), 504, 'Timeout', 'web_fetch')
  })

  it('answers a body it cannot decode as ExecutionFailed', async () => {
    const server = await startHttpServer((request, response) => {
      response.writeHead(200, { 'content-encoding': request.url === '/corrupt' ? 'gzip' : 'x-unknown' }).end('not compressed at all')
    })
    const app = await buildTestApp(OPEN)
    expect(expectProblem(await exec(app, 'web_fetch', { url: `${server.base}/corrupt` }), 500, 'ExecutionFailed')['detail']).toMatch(/gzip/)
    expect(expectProblem(await exec(app, 'web_fetch', { url: `${server.base}/unknown` }), 500, 'ExecutionFailed')['detail']).toMatch(/x-unknown/)
  })

  it('decodes a body in the charset its content type names', async () => {
    const server = await startHttpServer((request, response) => {
      if (request.url === '/latin1') response.writeHead(200, { 'content-type': 'text/html; charset=ISO-8859-1' }).end(Buffer.from('café crème', 'latin1'))
      else if (request.url === '/bom') response.writeHead(200, { 'content-type': 'text/plain; charset=utf-16le' }).end(Buffer.concat([Buffer.from([0xfe, 0xff]), Buffer.from('héllo', 'utf16le').swap16()]))
      else if (request.url === '/twice') response.setHeader('content-type', ['text/html', 'text/html; charset=windows-1252']).end(Buffer.from([0x93, 0x68, 0x69, 0x94, 0x20, 0x63, 0x61, 0x66, 0xe9]))
      else if (request.url === '/list') response.writeHead(200, { 'content-type': 'text/html; charset=windows-1252, text/html' }).end(Buffer.from([0x63, 0x61, 0x66, 0xe9]))
      else if (request.url === '/quoted') response.writeHead(200, { 'content-type': 'text/html; foo="a;charset=utf-16"; charset=utf-8' }).end('plain ascii ok')
      else response.writeHead(200, { 'content-type': 'text/plain; charset=no-such-charset' }).end('plain ütf-8')
    })
    const app = await buildTestApp(OPEN)
    expect((await exec(app, 'web_fetch', { url: `${server.base}/latin1` })).body.result).toMatchObject({ body: 'café crème', bytes: 10 })
    expect((await exec(app, 'web_fetch', { url: `${server.base}/other` })).body.result).toMatchObject({ body: 'plain ütf-8' })
    // A byte order mark names the encoding whatever the label says; a charset inside another parameter's quotes is no charset.
    expect((await exec(app, 'web_fetch', { url: `${server.base}/bom` })).body.result).toMatchObject({ body: 'héllo' })
    expect((await exec(app, 'web_fetch', { url: `${server.base}/quoted` })).body.result).toMatchObject({ body: 'plain ascii ok' })
    // Given twice, or as a list: the last type decides, with the charset an earlier one of its essence named (as Fetch).
    expect((await exec(app, 'web_fetch', { url: `${server.base}/twice` })).body.result).toMatchObject({ body: '“hi” café' })
    expect((await exec(app, 'web_fetch', { url: `${server.base}/list` })).body.result).toMatchObject({ body: 'café' })
  })

  it('answers Timeout (504) when the site does not answer in time', async () => {
    const hung = await startHttpServer(() => {})
    const app = await buildTestApp(OPEN)
    app.runtime.registry.setGroup('builtin', 'zz-test-web-fetch', [createWebFetchTool(app.runtime.config.tools.web_fetch, { timeoutMs: 300 })])
    expectProblem(await exec(app, 'web_fetch', { url: `${hung.base}/` }), 504, 'Timeout', 'web_fetch')
  })

  it('checks the scheme of every hop, and gives up after too many redirects', async () => {
    const server = await startHttpServer((request, response) => {
      if (request.url === '/file') response.writeHead(302, { location: 'file:///etc/passwd' }).end()
      else response.writeHead(302, { location: `/loop${request.url}` }).end()
    })
    const app = await buildTestApp(OPEN)
    // The caller's arguments were fine: a redirect the tool will not follow is the site's answer failing.
    expect(expectProblem(await exec(app, 'web_fetch', { url: `${server.base}/file` }), 500, 'ExecutionFailed')['detail']).toMatch(/redirected to file:/)
    const loop = expectProblem(await exec(app, 'web_fetch', { url: `${server.base}/x` }), 500, 'ExecutionFailed')
    expect(loop['detail']).toMatch(/redirects/)
    expect(server.requests.length).toBe(1 + 6)
  })
})
