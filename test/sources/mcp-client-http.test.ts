/**
 * Upstream MCP servers over HTTP: the project's fixture as a Streamable HTTP
 * server (with and without sessions) and as an old HTTP+SSE server, in this
 * process, so the test can see what the server saw.
 */
import { describe, expect, it } from 'vitest'
import { exec, onCleanup } from '../helper.ts'
import { startHttpFixture } from '../fixtures/mcp-server.mjs'
import { expectProblem } from '../support/problem.ts'
import { eventually } from './helpers.ts'
import { listening } from '../support/listening.ts'
import { mcpApp, textOf } from './mcp-helpers.ts'

type Fixture = Awaited<ReturnType<typeof startHttpFixture>>

async function fixture (options: Parameters<typeof startHttpFixture>[0] = {}): Promise<Fixture> {
  const fx = await startHttpFixture(options)
  onCleanup(() => fx.close())
  return fx
}

describe('MCP servers over HTTP', () => {
  it.each(['stateful', 'stateless'] as const)('calls tools over Streamable HTTP (%s)', async (mode) => {
    const fx = await fixture({ mode })
    const app = await mcpApp({ web: { url: fx.url, internal_only: false } })
    expect(app.runtime.mcpStates()).toEqual({ web: 'up' })
    expect(textOf((await exec(app, 'web__echo', { text: 'over http' })).body.result)).toBe('echo: over http')
    expect((await exec(app, 'web__add', { a: 1, b: 2 })).body.result.structuredContent).toEqual({ sum: 3 })
  })

  it('falls back to the older SSE transport for a server without Streamable HTTP', async () => {
    const fx = await fixture({ mode: 'sse' })
    const app = await mcpApp({ old: { url: fx.url } })
    expect(app.runtime.mcpStates()).toEqual({ old: 'up' })
    expect(textOf((await exec(app, 'old__echo', { text: 'via sse' })).body.result)).toBe('echo: via sse')
    expectProblem(await exec(app, 'old__fail', {}), 500, 'ExecutionFailed', 'old__fail')
    // The fixture holds the one (SSE) session of the service's client, still open.
    expect([...fx.state.servers].map((s) => s.getClientVersion()?.name)).toEqual(['toolport'])
  })

  it('answers a call over the per-call timeout with 504 and cancels it upstream', async () => {
    const fx = await fixture()
    const app = await mcpApp({ web: { url: fx.url, timeout_ms: 300 } })
    const body = expectProblem(await exec(app, 'web__slow', { ms: 20_000 }), 504, 'Timeout', 'web__slow')
    expect(body['detail']).toBe('MCP server web did not answer within 300 ms')
    expect(await eventually(() => fx.state.cancelled === 1)).toBe(true)
  })

  it('cancels the upstream request when the REST client disconnects', async () => {
    const fx = await fixture()
    const app = await mcpApp({ web: { url: fx.url } })
    const base = await listening(app)
    const abort = new AbortController()
    const pending = fetch(`${base}/v1/tools/web__slow/execute`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ arguments: { ms: 20_000 } }),
      signal: abort.signal,
    }).catch((error: Error) => error.name)
    expect(await eventually(() => fx.state.calls === 1)).toBe(true)
    abort.abort()
    expect(await pending).toBe('AbortError')
    expect(await eventually(() => fx.state.cancelled === 1)).toBe(true)
    // The server's connection survives a cancelled call.
    expect(textOf((await exec(app, 'web__echo', { text: 'after' })).body.result)).toBe('echo: after')
  })

  it('reconnects when the HTTP server goes away and comes back', async () => {
    const first = await fixture()
    const app = await mcpApp({ web: { url: first.url } })
    expect(textOf((await exec(app, 'web__echo', { text: '1' })).body.result)).toBe('echo: 1')
    await first.close()
    const gone = expectProblem(await exec(app, 'web__echo', { text: '2' }), 500, 'ExecutionFailed', 'web__echo')
    expect(gone['detail']).toMatch(/^MCP server web/)
    expect(app.runtime.mcpStates()).toEqual({ web: 'down' })
    // The same address again (the port was just freed by this test).
    const second = await fixture({ port: first.port })
    expect(await eventually(async () => (await exec(app, 'web__echo', { text: '3' })).status === 200, 10_000)).toBe(true)
    expect(app.runtime.mcpStates()).toEqual({ web: 'up' })
    expect(second.state.servers.size).toBe(1)
  })

  it('ends its Streamable HTTP session at shutdown', async () => {
    const fx = await fixture()
    const app = await mcpApp({ web: { url: fx.url } })
    await exec(app, 'web__echo', { text: 'x' })
    expect(fx.state.servers.size).toBe(1)
    await app.close()
    expect(fx.state.servers.size).toBe(0)
    expect(app.runtime.mcpStates()).toEqual({ web: 'closed' })
  })
})
