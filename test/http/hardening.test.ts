/**
 * Requests that never reach a route — oversized headers, bytes that are not
 * HTTP, a client too slow to send its request — over a real socket: each
 * gets one problem+json answer and the connection closes.
 */
import net from 'node:net'
import { describe, expect, it } from 'vitest'
import { buildTestApp } from '../helper.ts'

async function listening (overrides: Record<string, unknown> = {}): Promise<number> {
  const app = await buildTestApp(overrides)
  await app.listen({ host: '127.0.0.1', port: 0 })
  return (app.server.address() as net.AddressInfo).port
}

/** Sends raw bytes (optionally in two parts, `pauseMs` apart) and reads until the server closes. */
function rawExchange (port: number, first: string, rest?: { pauseMs: number, data: string }): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1')
    let answer = ''
    socket.setEncoding('utf8')
    socket.on('data', (chunk: string) => { answer += chunk })
    socket.on('close', () => resolve(answer))
    socket.on('error', reject)
    socket.setTimeout(15_000, () => socket.destroy(new Error('no answer within 15 s')))
    socket.write(first)
    if (rest) setTimeout(() => { if (!socket.destroyed) socket.write(rest.data) }, rest.pauseMs).unref()
  })
}

function problemOf (answer: string): { status: string, headers: string, body: Record<string, unknown> } {
  const [head = '', body = ''] = answer.split('\r\n\r\n')
  return { status: head.split('\r\n')[0] ?? '', headers: head.toLowerCase(), body: JSON.parse(body) }
}

describe('client errors', () => {
  it('answers headers over the limit (a very long URL) with a 400 problem', async () => {
    const port = await listening({ server: { max_header_bytes: 4096 } })
    const answer = problemOf(await rawExchange(port, `GET /v1/tools?allowed=${'a'.repeat(8000)} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`))
    expect(answer.status).toBe('HTTP/1.1 400 Bad Request')
    expect(answer.headers).toContain('content-type: application/problem+json')
    expect(answer.body).toMatchObject({ status: 400, code: 'BadRequest', detail: expect.stringContaining('larger'), request_id: expect.any(String) })
  })

  it('answers an HTTP/1.1 request without a Host header with a 400 problem; HTTP/1.0 needs none', async () => {
    const port = await listening()
    const answer = problemOf(await rawExchange(port, 'GET /v1/tools HTTP/1.1\r\nConnection: close\r\n\r\n'))
    expect(answer.status).toBe('HTTP/1.1 400 Bad Request')
    expect(answer.headers).toContain('content-type: application/problem+json')
    expect(answer.body).toMatchObject({ code: 'BadRequest', detail: expect.stringContaining('Host') })
    expect(problemOf(await rawExchange(port, 'GET /healthz HTTP/1.0\r\n\r\n')).status).toBe('HTTP/1.1 200 OK')
  })

  it('answers bytes that are not HTTP with a 400 problem', async () => {
    const port = await listening()
    const answer = problemOf(await rawExchange(port, '\u0000\u0001garbage that is not http\r\n\r\n'))
    expect(answer.status).toBe('HTTP/1.1 400 Bad Request')
    expect(answer.body).toMatchObject({ code: 'BadRequest', status: 400 })
  })

  it('cuts off a client that sends its request too slowly (slow-loris)', async () => {
    const port = await listening({ server: { request_timeout_ms: 400 } })
    const started = Date.now()
    // Headers promise a body that arrives long after the request timeout.
    const answer = await rawExchange(port,
      'POST /v1/tools/read_file/execute HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 40\r\n\r\n{"argu',
      { pauseMs: 5000, data: 'ments":{"path":"a"}}' })
    expect(Date.now() - started).toBeLessThan(4500)
    const problem = problemOf(answer)
    expect(problem.status).toBe('HTTP/1.1 400 Bad Request')
    expect(problem.body).toMatchObject({ code: 'BadRequest', detail: expect.stringContaining('in time') })
  })

  it('sends no 400 for a malformed request pipelined behind others, which would take it for their answer: the connection is only closed', async () => {
    const port = await listening()
    const call = JSON.stringify({ arguments: { command: 'sleep 0.3; echo done' } })
    const post = `POST /v1/tools/exec_shell/execute HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${call.length}\r\n\r\n${call}`
    // Right behind the call, and behind another request too.
    for (const between of ['', 'GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n']) {
      const answer = await rawExchange(port, `${post}${between}GET /x HTTP/1.1\r\nbad header\r\n\r\n`)
      expect(answer).not.toContain('400 Bad Request')
    }
  })

  it('keeps serving ordinary requests on the same server', async () => {
    const port = await listening({ server: { max_header_bytes: 4096 } })
    await rawExchange(port, `GET /${'b'.repeat(9000)} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`)
    const response = await fetch(`http://127.0.0.1:${port}/healthz`)
    expect(response.status).toBe(200)
    expect(await response.json()).toEqual({ status: 'ok' })
  })
})
