import { readFile } from 'node:fs/promises'
import { Writable } from 'node:stream'
import { describe, expect, it } from 'vitest'
import { buildApp } from '../../src/app.ts'
import { parseConfig } from '../../src/config.ts'
import { createLogger } from '../../src/logger.ts'
import { buildTestApp, onCleanup, tempDir } from '../helper.ts'

/** An app whose log lines (the service's own logger, at debug) are collected as they are written. */
async function appWithLogLines () {
  const lines: Array<Record<string, unknown>> = []
  const sink = new Writable({
    write (chunk, _encoding, done) {
      for (const line of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(line))
      done()
    },
  })
  const config = parseConfig({ workspaces: { root: await tempDir() }, sandbox: { mode: 'none' }, logging: { level: 'debug' } })
  const app = await buildApp(config, { logger: createLogger(config, { destination: sink }), defaultMetrics: false })
  onCleanup(() => app.close())
  await app.runtime.whenReady()
  return { app, lines }
}

describe('operations endpoints', () => {
  it('healthz answers ok; readyz says ready, the sandbox mode and MCP states', async () => {
    const app = await buildTestApp()
    expect((await app.inject({ method: 'GET', url: '/healthz' })).json()).toEqual({ status: 'ok' })
    const ready = await app.inject({ method: 'GET', url: '/readyz' })
    expect(ready.statusCode).toBe(200)
    expect(ready.json()).toEqual({ status: 'ready', sandbox: 'none', mcp_servers: {} })
  })

  it('readyz turns 503 while draining, and new calls are refused as Overloaded', async () => {
    const app = await buildTestApp()
    app.runtime.beginDrain()
    const ready = await app.inject({ method: 'GET', url: '/readyz' })
    expect(ready.statusCode).toBe(503)
    expect(ready.json()).toMatchObject({ code: 'Overloaded', readiness: 'draining' })
    // Every Overloaded answer says when to come back: /readyz's, and a new MCP session's.
    expect(ready.headers['retry-after']).toBe('1')
    const session = await app.inject({ method: 'POST', url: '/mcp', headers: { accept: 'application/json, text/event-stream' }, payload: { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } } } })
    expect(session.statusCode).toBe(503)
    expect(session.json()).toMatchObject({ code: 'Overloaded' })
    expect(session.headers['retry-after']).toBe('1')
    const call = await app.inject({ method: 'POST', url: '/v1/tools/read_file/execute', payload: { arguments: { path: 'a' } } })
    expect(call.statusCode).toBe(503)
    expect(call.headers['retry-after']).toBeDefined()
  })

  it('logs a 503 from readyz as the answer it is, without an error or a stack; a real failure is still logged with its stack', async () => {
    const { app, lines } = await appWithLogLines()
    app.get('/broken', async () => { throw new Error('a bug') })
    app.runtime.beginDrain()
    expect((await app.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(503)
    expect(lines.filter((l) => (l['level'] as number) >= 40)).toEqual([])
    expect(JSON.stringify(lines)).not.toContain('stack')
    expect((await app.inject({ method: 'GET', url: '/broken' })).statusCode).toBe(500)
    const failure = lines.find((l) => l['msg'] === 'request failed')
    expect(failure).toMatchObject({ level: 50, err: { message: 'a bug', stack: expect.stringContaining('Error: a bug') } })
  })

  it('exposes Prometheus metrics with calls, durations, in-flight, queue and sandbox mode', async () => {
    const app = await buildTestApp()
    await app.inject({ method: 'POST', url: '/v1/tools/read_file/execute', payload: { arguments: { path: 'a' } } })
    const metrics = await app.inject({ method: 'GET', url: '/metrics' })
    expect(metrics.headers['content-type']).toMatch(/^text\/plain/)
    for (const line of [
      '# TYPE toolport_tool_calls_total counter',
      '# TYPE toolport_tool_call_duration_seconds histogram',
      '# TYPE toolport_calls_in_flight gauge',
      '# TYPE toolport_limiter_queue_depth gauge',
      'toolport_sandbox_mode{mode="none"} 1',
    ]) expect(metrics.body).toContain(line)
  })

  it('serves the committed OpenAPI 3.1 document (they must not drift)', async () => {
    const app = await buildTestApp()
    const served = (await app.inject({ method: 'GET', url: '/openapi.json' })).json()
    const committed = JSON.parse(await readFile(new URL('../../openapi/openapi.json', import.meta.url), 'utf8'))
    expect(served.openapi).toBe('3.1.0')
    expect(served).toEqual(committed)
    for (const p of ['/v1/tools', '/v1/tools/{name}', '/v1/tools/{name}/execute', '/v1/tool-calls', '/v1/workspaces', '/v1/workspaces/{id}', '/v1/workspaces/{id}/archive', '/mcp']) {
      expect(Object.keys(served.paths)).toContain(p)
    }
    // Each answer is declared as what is sent: problems as problem+json, the download as gzip.
    const download = served.paths['/v1/workspaces/{id}/archive'].get.responses
    expect(Object.keys(download['200'].content)).toEqual(['application/gzip'])
    expect(Object.keys(download['404'].content)).toEqual(['application/problem+json'])
    const output = served.paths['/v1/workspaces/{id}/processes/{pid}/output'].get.responses
    expect(Object.keys(output['200'].content)).toEqual(['application/json', 'text/event-stream'])
    expect(Object.keys(served.paths['/readyz'].get.responses)).toEqual(['200', '503'])
    // A body over server.body_limit_bytes is 413 wherever a body is taken.
    for (const [route, operations] of Object.entries(served.paths as Record<string, Record<string, { requestBody?: unknown, responses: object }>>)) {
      for (const [method, operation] of Object.entries(operations)) {
        if (operation.requestBody !== undefined) expect(Object.keys(operation.responses), `${method} ${route}`).toContain('413')
      }
    }
    const errorTypes = new Set(Object.values(served.paths).flatMap((operations) => Object.values(operations as Record<string, { responses: Record<string, { content?: object }> }>)
      .flatMap(({ responses }) => Object.entries(responses).filter(([status]) => Number(status) >= 400).flatMap(([, answer]) => Object.keys(answer.content ?? {})))))
    expect([...errorTypes]).toEqual(['application/problem+json'])
  })

  it('answers HEAD on the health checks; a HEAD of any other route is not run as its GET (an archive is not packed)', async () => {
    const app = await buildTestApp({ tools: { builtin: ['*'] } })
    const write = await app.inject({ method: 'POST', url: '/v1/tools/write_file/execute', payload: { arguments: { path: 'a.txt', content: 'a' }, workspace: 'ws' } })
    expect(write.statusCode).toBe(200)
    expect((await app.inject({ method: 'GET', url: '/v1/workspaces/ws/archive' })).statusCode).toBe(200)
    const health = await app.inject({ method: 'HEAD', url: '/healthz' })
    expect(health.statusCode).toBe(200)
    expect(health.body).toBe('')
    expect((await app.inject({ method: 'HEAD', url: '/readyz' })).statusCode).toBe(200)
    app.runtime.beginDrain()
    expect((await app.inject({ method: 'HEAD', url: '/readyz' })).statusCode).toBe(503)
    const archive = await app.inject({ method: 'HEAD', url: '/v1/workspaces/ws/archive' })
    expect(archive.statusCode).toBe(404)
    expect(archive.headers['content-type']).not.toMatch(/gzip|tar/)
  })

  it('answers unknown routes with a NotFound problem', async () => {
    const app = await buildTestApp()
    const response = await app.inject({ method: 'GET', url: '/v2/nothing' })
    expect(response.statusCode).toBe(404)
    expect(response.json()).toMatchObject({ code: 'NotFound' })
  })
})
