/** Where a real socket matters: streamed archives and client disconnects, with supertest. */
import { once } from 'node:events'
import type { ServerResponse } from 'node:http'
import net from 'node:net'
import path from 'node:path'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import { gunzipSync } from 'node:zlib'
import request from 'supertest'
import { describe, expect, it } from 'vitest'
import { buildTestApp, exec, onCleanup } from '../helper.ts'
import { tarEntries } from '../support/tarball.ts'
import { workspacesIn } from '../support/ephemeral.ts'

describe('over a real socket', () => {
  it('streams a workspace archive', async () => {
    const app = await buildTestApp()
    await exec(app, 'write_file', { path: 'big/data.txt', content: 'z'.repeat(2_000_000) }, { workspace: 'stream' })
    await app.ready()
    const response = await request(app.server).get('/v1/workspaces/stream/archive').buffer(true).parse((res, done) => {
      const chunks: Buffer[] = []
      res.on('data', (chunk: Buffer) => chunks.push(chunk))
      res.on('end', () => done(null, Buffer.concat(chunks)))
    })
    expect(response.status).toBe(200)
    expect(response.headers['content-type']).toMatch(/^application\/gzip/)
    expect(response.headers['content-disposition']).toBe('attachment; filename="stream.tar.gz"')
    expect(tarEntries(gunzipSync(response.body as Buffer))['big/data.txt']?.length).toBe(2_000_000)
  })

  it('answers problems with supertest too (content type, request id)', async () => {
    const app = await buildTestApp()
    await app.ready()
    const response = await request(app.server).post('/v1/tools/read_file/execute').send({ arguments: { path: '/etc/passwd' } })
    expect(response.status).toBe(400)
    expect(response.headers['content-type']).toMatch(/^application\/problem\+json/)
    expect(response.body).toMatchObject({ code: 'InvalidPath', tool: 'read_file', request_id: response.headers['x-request-id'] })
  })

  it('cancels the call of a client that disconnects and leaves no workspace behind', async () => {
    const app = await buildTestApp()
    await app.listen({ host: '127.0.0.1', port: 0 })
    const address = app.server.address() as { port: number }
    const controller = new AbortController()
    const started = Date.now()
    const call = fetch(`http://127.0.0.1:${address.port}/v1/tools/exec_shell/execute`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ arguments: { command: 'touch left-behind.txt; sleep 10' } }),
      signal: controller.signal,
    }).catch(() => 'aborted')
    const ephemeral = path.join(app.runtime.workspaces.root, 'ephemeral')
    while ((await workspacesIn(ephemeral)).length === 0 && Date.now() - started < 3000) await new Promise((resolve) => setTimeout(resolve, 20))
    await new Promise((resolve) => setTimeout(resolve, 200))
    controller.abort()
    expect(await call).toBe('aborted')
    while ((app.runtime.limiter.inFlight > 0 || (await workspacesIn(ephemeral)).length > 0) && Date.now() - started < 5000) await new Promise((resolve) => setTimeout(resolve, 20))
    expect(app.runtime.limiter.inFlight).toBe(0)
    expect(await workspacesIn(ephemeral)).toEqual([])
    expect(Date.now() - started).toBeLessThan(5000)
  })
})

describe('a client that stops reading', () => {
  /** Opens a raw connection that sends `head` (and `body`) and never reads what comes back. */
  const neverReading = async (port: number, head: string, body = ''): Promise<net.Socket> => {
    const socket = net.connect(port, '127.0.0.1')
    await once(socket, 'connect')
    socket.pause()
    socket.write(`${head}\r\nhost: 127.0.0.1\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`)
    onCleanup(async () => { socket.destroy() })
    return socket
  }
  const connections = async (app: Awaited<ReturnType<typeof buildTestApp>>): Promise<number> =>
    await new Promise((resolve, reject) => { app.server.getConnections((error, count) => { if (error) reject(error); else resolve(count) }) })
  const cutWithin = async (app: Awaited<ReturnType<typeof buildTestApp>>, ms: number): Promise<boolean> => {
    for (const deadline = Date.now() + ms; Date.now() < deadline;) {
      if (await connections(app) === 0) return true
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
    return false
  }

  it('keeps nothing of a request whose client left before its answer: no timer holds it for request_timeout_ms', async () => {
    setFlagsFromString('--expose-gc')
    const gc = runInNewContext('gc') as () => void
    const app = await buildTestApp({ server: { request_timeout_ms: 60_000 } })
    await app.listen({ host: '127.0.0.1', port: 0 })
    const { port } = app.server.address() as net.AddressInfo
    let answer: WeakRef<ServerResponse> | undefined
    app.server.once('request', (_request, response: ServerResponse) => { answer = new WeakRef(response) })
    const body = JSON.stringify({ arguments: { command: 'sleep 10' } })
    const socket = net.connect(port, '127.0.0.1')
    socket.write(`POST /v1/tools/exec_shell/execute HTTP/1.1\r\nhost: 127.0.0.1:${port}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`)
    const started = Date.now()
    while (app.runtime.limiter.inFlight === 0 && Date.now() - started < 5000) await new Promise((resolve) => setTimeout(resolve, 10))
    expect(app.runtime.limiter.inFlight).toBe(1)
    socket.destroy()
    // The call is cut short and answered, into a response already closed.
    while (app.runtime.limiter.inFlight > 0 && Date.now() - started < 10_000) await new Promise((resolve) => setTimeout(resolve, 10))
    expect(app.runtime.limiter.inFlight).toBe(0)
    let collected = false
    for (let round = 0; round < 5 && !collected; round++) {
      // Each round in a job of its own: a deref keeps its object alive until its job ends.
      await new Promise((resolve) => setTimeout(resolve, 50))
      gc()
      collected = answer?.deref() === undefined
    }
    expect(answer).toBeDefined()
    expect(collected).toBe(true)
  })

  it('has an answer it stopped reading cut once it took nothing for request_timeout_ms (the answer is not held for good)', async () => {
    const app = await buildTestApp({ server: { request_timeout_ms: 1000 } })
    await exec(app, 'write_file', { path: 'big.txt', content: 'q'.repeat(60_000) }, { workspace: 'stall' })
    await app.listen({ host: '127.0.0.1', port: 0 })
    const { port } = app.server.address() as net.AddressInfo
    // About 16 MB of answer: more than the sockets' buffers take.
    const batch = JSON.stringify({ workspace: 'stall', parallel: true, calls: Array.from({ length: 256 }, (_, i) => ({ id: `c${i}`, name: 'read_file', arguments: { path: 'big.txt' } })) })
    await neverReading(port, 'POST /v1/tool-calls HTTP/1.1\r\ncontent-type: application/json', batch)
    expect(await connections(app)).toBe(1)
    expect(await cutWithin(app, 10_000)).toBe(true)
  })

  it('cuts nothing else: a call pipelined behind an answer runs past request_timeout_ms, and a slow but steady reader gets all', async () => {
    const app = await buildTestApp({ server: { request_timeout_ms: 500 } })
    await app.listen({ host: '127.0.0.1', port: 0 })
    const { port } = app.server.address() as net.AddressInfo
    const socket = net.connect(port, '127.0.0.1')
    onCleanup(async () => { socket.destroy() })
    await once(socket, 'connect')
    const body = JSON.stringify({ arguments: { command: 'sleep 1.5; echo late' } })
    let received = ''
    socket.on('data', (chunk: Buffer) => { received += chunk.toString() })
    socket.write(`GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\nPOST /v1/tools/exec_shell/execute HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`)
    for (const deadline = Date.now() + 10_000; !received.includes('late') && !socket.destroyed && Date.now() < deadline;) await new Promise((resolve) => setTimeout(resolve, 50))
    expect(received).toContain('"stdout":"late\\n"')

    // About 16 MB, read a little every 200 ms for 3 s, six times the limit: slow, never stalled, never cut.
    await exec(app, 'write_file', { path: 'big.txt', content: 'q'.repeat(60_000) }, { workspace: 'slow' })
    const batch = JSON.stringify({ workspace: 'slow', parallel: true, calls: Array.from({ length: 256 }, (_, i) => ({ id: `c${i}`, name: 'read_file', arguments: { path: 'big.txt' } })) })
    const reader = await neverReading(port, 'POST /v1/tool-calls HTTP/1.1\r\ncontent-type: application/json', batch)
    let bytes = 0
    for (let round = 0; round < 15; round++) {
      await new Promise((resolve) => setTimeout(resolve, 200))
      for (let chunk = reader.read() as Buffer | null; chunk !== null; chunk = reader.read() as Buffer | null) bytes += chunk.length
    }
    expect(reader.destroyed || reader.readableEnded).toBe(false)
    expect(bytes).toBeGreaterThan(0)
  })

  it('has an answer it stopped reading cut also when it waited its turn behind a pipelined call', async () => {
    const app = await buildTestApp({ server: { request_timeout_ms: 1000 } })
    await exec(app, 'write_file', { path: 'big.txt', content: 'q'.repeat(60_000) }, { workspace: 'stall' })
    await app.listen({ host: '127.0.0.1', port: 0 })
    const { port } = app.server.address() as net.AddressInfo
    const slow = JSON.stringify({ arguments: { command: 'sleep 1.5' } })
    const batch = JSON.stringify({ workspace: 'stall', parallel: true, calls: Array.from({ length: 256 }, (_, i) => ({ id: `c${i}`, name: 'read_file', arguments: { path: 'big.txt' } })) })
    await neverReading(port, `POST /v1/tools/exec_shell/execute HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: ${slow.length}\r\n\r\n${slow}POST /v1/tool-calls HTTP/1.1\r\ncontent-type: application/json`, batch)
    await new Promise((resolve) => setTimeout(resolve, 2500))
    expect(await cutWithin(app, 10_000)).toBe(true)
  })

  it('has a process\'s event stream it stopped reading cut too', async () => {
    const app = await buildTestApp({ server: { request_timeout_ms: 1000 }, tools: { builtin: ['*'] } })
    await app.listen({ host: '127.0.0.1', port: 0 })
    const { port } = app.server.address() as net.AddressInfo
    const started = await app.inject({ method: 'POST', url: '/v1/workspaces/stream/processes', payload: { command: 'yes | head -c 30000000; sleep 60' } })
    expect(started.statusCode).toBe(201)
    await neverReading(port, `GET /v1/workspaces/stream/processes/${started.json().id as string}/output HTTP/1.1\r\naccept: text/event-stream`)
    await new Promise((resolve) => setTimeout(resolve, 200))
    expect(await connections(app)).toBe(1)
    expect(await cutWithin(app, 10_000)).toBe(true)
  })
})

describe('an answer sent before the client finished sending its body', () => {
  /**
   * Sends a request announcing `announced` bytes of body and writes `sent` of them without reading
   * anything, as a client busy uploading does; once it has written them, reads what came back.
   */
  async function uploadWithoutReading (port: number, head: string, announced: number, sent: number): Promise<{ answer: string, writeError?: string }> {
    const socket = net.connect(port, '127.0.0.1')
    await once(socket, 'connect')
    socket.pause()
    const chunk = Buffer.alloc(64 * 1024, 0x20)
    let writeError: string | undefined
    socket.on('error', (error: NodeJS.ErrnoException) => { writeError ??= error.code })
    socket.write(`${head}Content-Length: ${announced}\r\n\r\n`)
    // A failed write (a reset) destroys the socket.
    for (let written = 0; written < sent && !socket.destroyed; written += chunk.length) {
      if (!socket.write(chunk)) await Promise.race([once(socket, 'drain'), once(socket, 'close')])
    }
    let answer = ''
    socket.on('data', (data: Buffer) => { answer += data.toString('latin1') })
    socket.resume()
    if (!socket.destroyed) await once(socket, 'close')
    return { answer, writeError }
  }

  /**
   * The status lines that come back on one connection while `send` writes to it, until the service
   * ends its side; the client keeps its own open meanwhile, as a client still sending has it.
   */
  async function answersOn (port: number, send: (socket: net.Socket, answer: () => string) => Promise<void>): Promise<string[]> {
    const socket = net.connect({ port, host: '127.0.0.1', allowHalfOpen: true })
    socket.on('error', () => {})
    let answer = ''
    socket.on('data', (data: Buffer) => { answer += data.toString('latin1') })
    const ended = new Promise((resolve) => socket.once('end', resolve))
    await once(socket, 'connect')
    await send(socket, () => answer)
    await ended
    socket.destroy()
    return answer.match(/HTTP\/1\.1 \d+/g) ?? []
  }

  it('reaches a client still sending: the rest of its body is read and dropped a while before the connection closes', async () => {
    const app = await buildTestApp({ server: { body_limit_bytes: 64 * 1024 } })
    await app.listen({ host: '127.0.0.1', port: 0 })
    const { port } = app.server.address() as { port: number }
    // Refused at its Content-Length, and refused as an archive: both answer before the body is read.
    for (const head of [
      'POST /v1/tools/exec_shell/execute HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n',
      'PUT /v1/workspaces/early/archive HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/gzip\r\n',
    ]) {
      const { answer, writeError } = await uploadWithoutReading(port, head, 8 * 1024 * 1024, 8 * 1024 * 1024)
      expect(writeError).toBeUndefined()
      expect(answer).toMatch(/^HTTP\/1\.1 413 /)
      expect(answer.toLowerCase()).toContain('connection: close')
    }
  })

  it('closes the connection of a client that goes on sending past the linger', async () => {
    const app = await buildTestApp({ server: { body_limit_bytes: 64 * 1024 } })
    await app.listen({ host: '127.0.0.1', port: 0 })
    const { port } = app.server.address() as { port: number }
    // A client that keeps its side open once the service ends its own, and keeps sending.
    const socket = net.connect({ port, host: '127.0.0.1', allowHalfOpen: true })
    await once(socket, 'connect')
    socket.on('error', () => {})
    let answer = ''
    socket.on('data', (data: Buffer) => { answer += data.toString('latin1') })
    socket.write('POST /v1/tools/exec_shell/execute HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000000000000\r\n\r\n')
    const pump = setInterval(() => { if (!socket.destroyed) socket.write(Buffer.alloc(16 * 1024)) }, 10)
    try {
      // (Not events.once: the writes after the close fail, an 'error' it would reject on.)
      await new Promise((resolve) => socket.once('close', resolve))
    } finally {
      clearInterval(pump)
    }
    expect(answer).toMatch(/^HTTP\/1\.1 413 /)
  })

  it('runs no request that comes after an answer that closed the connection: sent while it lingers, or pipelined behind a refused body', async () => {
    const app = await buildTestApp({ auth: { tokens: [{ token: 'tok', tenant: 't' }] } })
    await app.listen({ host: '127.0.0.1', port: 0 })
    const { port } = app.server.address() as { port: number }
    const create = (id: string): string => {
      const body = JSON.stringify({ id })
      return `POST /v1/workspaces HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer tok\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`
    }
    // Refused for its missing token before its body came: the body, then a whole request, follow on the lingering connection.
    expect(await answersOn(port, async (socket, answer) => {
      socket.write('POST /v1/workspaces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n')
      for (let i = 0; i < 200 && !answer().includes('\r\n\r\n'); i++) await new Promise((resolve) => setTimeout(resolve, 10))
      socket.write(`{}${create('during-linger')}`)
    })).toEqual(['HTTP/1.1 401'])
    // A body that is not JSON, and a request pipelined behind it in the same write.
    expect(await answersOn(port, async (socket) => {
      socket.write(`POST /v1/workspaces HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer tok\r\nContent-Type: application/json\r\nContent-Length: 3\r\n\r\n{x}${create('pipelined')}`)
    })).toEqual(['HTTP/1.1 400'])
    for (const id of ['during-linger', 'pipelined']) {
      expect((await app.inject({ method: 'GET', url: `/v1/workspaces/${id}`, headers: { authorization: 'Bearer tok' } })).statusCode).toBe(404)
    }
  })

  it('reads and drops the body of a request it refuses on a closing connection too, so the client still reads its answer', async () => {
    const app = await buildTestApp({ auth: { tokens: [{ token: 'tok', tenant: 't' }] } })
    await app.listen({ host: '127.0.0.1', port: 0 })
    const { port } = app.server.address() as { port: number }
    const socket = net.connect({ port, host: '127.0.0.1' })
    await once(socket, 'connect')
    socket.pause()
    let writeError: string | undefined
    socket.on('error', (error: NodeJS.ErrnoException) => { writeError ??= error.code })
    const send = async (bytes: Buffer | string): Promise<void> => {
      if (!socket.destroyed && !socket.write(bytes)) await Promise.race([once(socket, 'drain'), once(socket, 'close')])
    }
    const chunk = Buffer.alloc(64 * 1024, 0x20)
    // Refused for its missing token; a second request, with a large body, is pipelined behind it; nothing is read meanwhile.
    await send(`POST /v1/workspaces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${16 * chunk.length}\r\n\r\n`)
    for (let i = 0; i < 16; i++) await send(chunk)
    await send(`POST /v1/workspaces HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer tok\r\nContent-Type: application/json\r\nContent-Length: ${256 * chunk.length}\r\n\r\n`)
    for (let i = 0; i < 256 && !socket.destroyed; i++) await send(chunk)
    let answer = ''
    socket.on('data', (data: Buffer) => { answer += data.toString('latin1') })
    const closed = new Promise((resolve) => socket.once('close', resolve))
    socket.resume()
    await closed
    expect(writeError).toBeUndefined()
    expect(answer.match(/HTTP\/1\.1 \d+/g)).toEqual(['HTTP/1.1 401'])
  })

  it('runs and answers, in order, a request that came before the one whose answer closes the connection', async () => {
    const app = await buildTestApp({ auth: { tokens: [{ token: 'tok', tenant: 't' }] }, server: { body_limit_bytes: 64 * 1024 } })
    await app.listen({ host: '127.0.0.1', port: 0 })
    const { port } = app.server.address() as { port: number }
    const body = JSON.stringify({ id: 'before-close' })
    // A valid call, then (in the same write) one refused at once, before its body, for its size: its answer says close.
    expect(await answersOn(port, async (socket) => {
      socket.write(`POST /v1/workspaces HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer tok\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}` +
        'POST /v1/workspaces HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer tok\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n')
    })).toEqual(['HTTP/1.1 201', 'HTTP/1.1 413'])
    expect((await app.inject({ method: 'GET', url: '/v1/workspaces/before-close', headers: { authorization: 'Bearer tok' } })).statusCode).toBe(200)
  })

  it('keeps the connection after an answer to a request without a body, however soon it is sent', async () => {
    const app = await buildTestApp()
    await app.listen({ host: '127.0.0.1', port: 0 })
    const { port } = app.server.address() as { port: number }
    const socket = net.connect({ port, host: '127.0.0.1' })
    socket.on('error', () => {})
    let answer = ''
    socket.on('data', (data: Buffer) => { answer += data.toString('latin1') })
    await once(socket, 'connect')
    socket.write('GET /no-such-route HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n')
    for (let i = 0; i < 200 && !answer.includes('}'); i++) await new Promise((resolve) => setTimeout(resolve, 10))
    expect(answer.toLowerCase()).not.toContain('connection: close')
    socket.write('GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n')
    for (let i = 0; i < 200 && !answer.includes('"ok"'); i++) await new Promise((resolve) => setTimeout(resolve, 10))
    socket.destroy()
    expect(answer.match(/HTTP\/1\.1 \d+/g)).toEqual(['HTTP/1.1 404', 'HTTP/1.1 200'])
  })
})
