/** The completion log line: one per call, with request_id, tool, workspace, code and duration_ms; secrets redacted. */
import { Writable } from 'node:stream'
import { describe, expect, it } from 'vitest'
import { buildApp } from '../../src/app.ts'
import { parseConfig } from '../../src/config.ts'
import { ToolError } from '../../src/errors.ts'
import { FAIL_TEXT } from '../fixtures/mcp-server.mjs'
import { stdioFixture } from '../sources/mcp-helpers.ts'
import { createLogger, REDACTED } from '../../src/logger.ts'
import { onCleanup, tempDir } from '../helper.ts'

async function appWithLogCapture (overrides: Record<string, unknown> = {}) {
  const lines: Array<Record<string, unknown>> = []
  const sink = new Writable({
    write (chunk, _encoding, done) {
      for (const line of chunk.toString().split('\n').filter(Boolean)) lines.push(JSON.parse(line))
      done()
    },
  })
  const config = parseConfig({ workspaces: { root: await tempDir() }, sandbox: { mode: 'none' }, ...overrides })
  // The service's own logger, with its redaction, writing into the capture.
  const logger = createLogger(config, { destination: sink })
  const app = await buildApp(config, { logger, defaultMetrics: false })
  onCleanup(() => app.close())
  await app.runtime.whenReady()
  return { app, lines }
}

describe('logging', () => {
  it('writes exactly one completion line per call', async () => {
    const { app, lines } = await appWithLogCapture()
    await app.inject({ method: 'POST', url: '/v1/tools/write_file/execute', headers: { 'x-request-id': 'req-123' }, payload: { arguments: { path: 'a', content: 'b' }, workspace: 'logs' } })
    await app.inject({ method: 'POST', url: '/v1/tools/read_file/execute', payload: { arguments: { path: 'missing' } } })
    const finished = lines.filter((l) => l['msg'] === 'tool call finished')
    expect(finished).toHaveLength(2)
    expect(finished[0]).toMatchObject({ request_id: 'req-123', tool: 'write_file', workspace: 'logs', code: 'ok', duration_ms: expect.any(Number) })
    expect(finished[1]).toMatchObject({ tool: 'read_file', workspace: null, code: 'FileNotFound' })
    // The line carries the service's own fields only: never an argument, a header or a result.
    expect(Object.keys(finished[0] as object).sort()).toEqual(['code', 'duration_ms', 'hostname', 'level', 'msg', 'pid', 'request_id', 'time', 'tool', 'workspace'])
  })

  it('gives request.log the request id and the redaction', async () => {
    const { app, lines } = await appWithLogCapture()
    app.get('/log-test', async (request) => {
      request.log.warn({ headers: { authorization: 'Bearer t1' } }, 'from the route')
      request.log.child({ part: 'x' }).info('from a child')
      return { level: request.log.level }
    })
    const answer = await app.inject({ method: 'GET', url: '/log-test', headers: { 'x-request-id': 'req-log' } })
    expect(answer.json()).toEqual({ level: 'info' })
    expect(lines.find((l) => l['msg'] === 'from the route')).toMatchObject({ request_id: 'req-log', level: 40, headers: { authorization: REDACTED } })
    expect(lines.find((l) => l['msg'] === 'from a child')).toMatchObject({ request_id: 'req-log', part: 'x' })
  })

  it('echoes a sane X-Request-Id and replaces an unsafe one', async () => {
    const { app } = await appWithLogCapture()
    expect((await app.inject({ method: 'GET', url: '/healthz', headers: { 'x-request-id': 'abc-1' } })).headers['x-request-id']).toBe('abc-1')
    expect((await app.inject({ method: 'GET', url: '/healthz', headers: { 'x-request-id': 'bad id\u0007' } })).headers['x-request-id']).toMatch(/^[0-9a-f-]{36}$/)
  })

  it('never logs a token', async () => {
    const { app, lines } = await appWithLogCapture({ auth: { tokens: [{ token: 'super-secret-token', tenant: 't', allowed_tools: ['*'] }] } })
    await app.inject({ method: 'POST', url: '/v1/tools/exec_shell/execute', headers: { authorization: 'Bearer super-secret-token' }, payload: { arguments: { command: 'exit 3' } } })
    await app.inject({ method: 'GET', url: '/v1/tools', headers: { authorization: 'Bearer wrong-token-value' } })
    const text = JSON.stringify(lines)
    expect(text).not.toContain('super-secret-token')
    expect(text).not.toContain('wrong-token-value')
  })

  it('redacts secrets wherever a log line carries them', async () => {
    const { app, lines } = await appWithLogCapture()
    app.log.info({ req: { headers: { authorization: 'Bearer h1' } }, headers: { authorization: 'Bearer h2' } }, 'request')
    app.log.info({ config: { token: 'c1' }, auth: { tokens: [{ token: 'c2' }] }, server: { env: { API_KEY: 'c3' } }, ops: { webhook: 'https://hooks.example/c4' } }, 'config')
    const text = JSON.stringify(lines)
    for (const secret of ['h1', 'h2', 'c1', 'c2', 'c3', 'c4']) expect(text).not.toMatch(new RegExp(`\\b${secret}\\b`))
    expect(lines.find((l) => l['msg'] === 'config')?.['config']).toEqual({ token: REDACTED })
  })

  it('never logs what a command printed, even when it timed out', async () => {
    const { app, lines } = await appWithLogCapture()
    const answer = await app.inject({ method: 'POST', url: '/v1/tools/exec_shell/execute', payload: { arguments: { command: 'echo out-secret-1; echo err-secret-2 >&2; sleep 5', timeout: 1 } } })
    // The caller gets what it printed; the log only that it timed out.
    expect(answer.json()).toMatchObject({ code: 'Timeout', partial_stdout: 'out-secret-1\n', partial_stderr: 'err-secret-2\n' })
    expect(lines.find((l) => l['msg'] === 'tool call finished')).toMatchObject({ tool: 'exec_shell', code: 'Timeout' })
    const text = JSON.stringify(lines)
    expect(text).not.toContain('out-secret-1')
    expect(text).not.toContain('err-secret-2')
  })

  it('keeps of an error its kind, message, stack and code, never what it carries', async () => {
    const { app, lines } = await appWithLogCapture()
    const withInput = Object.assign(new TypeError('Invalid URL'), { code: 'ERR_INVALID_URL', input: 'host/search?apikey=key-secret-3' })
    app.log.error({ err: withInput }, 'raw')
    app.log.error({ err: new ToolError('ExecutionFailed', 'the tool failed', { extra: { partial_stdout: 'out-secret-4' }, cause: withInput }) }, 'tool')
    app.log.error({ err: new AggregateError([withInput], 'all failed') }, 'aggregate')
    expect(JSON.stringify(lines)).not.toMatch(/secret-[34]/)
    expect(lines.find((l) => l['msg'] === 'raw')?.['err']).toEqual({ type: 'TypeError', message: 'Invalid URL', stack: expect.stringContaining('TypeError: Invalid URL'), code: 'ERR_INVALID_URL' })
    // A cause's message and stack come with its error's.
    expect(lines.find((l) => l['msg'] === 'tool')?.['err']).toMatchObject({ type: 'ToolError', message: 'the tool failed: Invalid URL', code: 'ExecutionFailed', stack: expect.stringContaining('caused by: TypeError: Invalid URL') })
    expect(lines.find((l) => l['msg'] === 'aggregate')?.['err']).toMatchObject({ type: 'AggregateError', aggregateErrors: [{ type: 'TypeError', code: 'ERR_INVALID_URL' }] })
  })

  it('logs a failure of the service with its stack, and a tool\'s own failure only in its completion line', async () => {
    const { app, lines } = await appWithLogCapture({ tools: { mcp_servers: { fx: { ...stdioFixture(), internal_only: false } } } })
    app.runtime.registry.setGroup('builtin', 'zz-broken', [{ name: 'broken', description: 'x', parameters: { type: 'object', properties: {} }, source: 'builtin', execute: async () => { throw new TypeError('broken-inside') } }])
    // An MCP server's isError: its text may hold what the tool printed.
    const failed = await app.inject({ method: 'POST', url: '/v1/tools/fx__fail/execute', payload: { arguments: {} } })
    expect(failed.json()).toMatchObject({ code: 'ExecutionFailed', detail: expect.stringContaining(FAIL_TEXT) })
    const broken = await app.inject({ method: 'POST', url: '/v1/tools/broken/execute', payload: { arguments: {} } })
    expect(broken.json()).toMatchObject({ code: 'ExecutionFailed', detail: 'internal error while running the tool' })
    const errors = lines.filter((l) => l['level'] === 50)
    expect(errors).toEqual([expect.objectContaining({ tool: 'broken', msg: 'tool call failed', err: expect.objectContaining({ type: 'TypeError', message: 'broken-inside', stack: expect.stringContaining('TypeError: broken-inside') }) })])
    expect(JSON.stringify(lines)).not.toContain(FAIL_TEXT)
    expect(lines.filter((l) => l['msg'] === 'tool call finished').map((l) => [l['tool'], l['code']])).toEqual([['fx__fail', 'ExecutionFailed'], ['broken', 'ExecutionFailed']])
  })
})
