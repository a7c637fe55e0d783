import { readFile } from 'node:fs/promises'
import { describe, expect, it } from 'vitest'
import { buildTestApp } from '../helper.ts'

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
    const call = await app.inject({ method: 'POST', url: '/v1/tools/read_file/execute', payload: { arguments: { path: 'a' } } })
    expect(call.statusCode).toBe(503)
    expect(call.headers['retry-after']).toBeDefined()
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
  })

  it('answers unknown routes with a NotFound problem', async () => {
    const app = await buildTestApp()
    const response = await app.inject({ method: 'GET', url: '/v2/nothing' })
    expect(response.statusCode).toBe(404)
    expect(response.json()).toMatchObject({ code: 'NotFound' })
  })
})
