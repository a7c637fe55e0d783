/**
 * Tracing end to end: the built server, started with the standard OTEL_*
 * variables, exports its spans to a real OTLP/HTTP receiver started here,
 * over http/json (decoded and checked span by span) and http/protobuf; and
 * without them it exports nothing and never loads the SDK.
 */
import { randomBytes } from 'node:crypto'
import { readFile, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { describe, expect, it } from 'vitest'
import { type ReceivedSpan, SpanKindOf, startOtlpReceiver, StatusCodeOf } from '../support/otlp-receiver.ts'
import { freePort, type RunningServer, startServer, waitReady } from '../support/server-process.ts'
import { onCleanup, tempDir } from '../support/temp.ts'
import { eventually } from '../sources/helpers.ts'

const CONFIG = { sandbox: { mode: 'none' } }

function traceparent (): { header: string, traceId: string, parentId: string } {
  const traceId = randomBytes(16).toString('hex')
  const parentId = randomBytes(8).toString('hex')
  return { header: `00-${traceId}-${parentId}-01`, traceId, parentId }
}

async function post (server: RunningServer, url: string, body: unknown, headers: Record<string, string> = {}) {
  const response = await fetch(`${server.base}${url}`, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) })
  return { status: response.status, body: await response.json() as Record<string, unknown> }
}

/** Waits for the spans `select` picks from what was received; fails with what did arrive. */
async function spansWhere (received: () => ReceivedSpan[], select: (spans: ReceivedSpan[]) => ReceivedSpan[], count: number): Promise<ReceivedSpan[]> {
  let found: ReceivedSpan[] = []
  await eventually(() => (found = select(received())).length >= count, 10_000)
  if (found.length < count) throw new Error(`expected ${count} spans, received: ${JSON.stringify(received().map((s) => s.name))}`)
  return found
}

/** Records every @opentelemetry module the server process resolves (a module-resolution hook given through NODE_OPTIONS). */
async function moduleRecorder (): Promise<{ env: Record<string, string>, loaded: () => Promise<string[]> }> {
  const dir = await tempDir('toolport-otel-hook-')
  const log = path.join(dir, 'resolved.txt')
  const hook = path.join(dir, 'hook.mjs')
  await writeFile(log, '')
  await writeFile(hook, `import { registerHooks } from 'node:module'
import { appendFileSync } from 'node:fs'
registerHooks({ resolve (specifier, context, next) {
  const resolved = next(specifier, context)
  if (resolved.url.includes('/@opentelemetry/')) appendFileSync(${JSON.stringify(log)}, resolved.url + '\\n')
  return resolved
} })
`)
  return { env: { NODE_OPTIONS: `--import ${hook}` }, loaded: async () => (await readFile(log, 'utf8')).split('\n').filter(Boolean) }
}

const SDK_MODULE = /\/@opentelemetry\/(sdk-trace|exporter-trace-otlp-[a-z]+|context-async-hooks)\//

async function stop (server: RunningServer): Promise<void> {
  server.child.kill('SIGTERM')
  expect(await server.exited).toEqual({ code: 0, signal: null })
}

describe('tracing to an OTLP/HTTP collector', () => {
  it('http/json: a server span continuing traceparent, execute_tool children with the GenAI attributes, an error status for a failing call', async () => {
    const receiver = await startOtlpReceiver()
    const server = await startServer(CONFIG, { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.base, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_BSP_SCHEDULE_DELAY: '50' })
    await waitReady(server)
    expect((await post(server, '/v1/workspaces', { id: 'traced' })).status).toBe(201)

    const ok = traceparent()
    expect((await post(server, '/v1/tools/write_file/execute', { workspace: 'traced', arguments: { path: 'a.txt', content: 'hi' } }, { traceparent: ok.header })).status).toBe(200)
    const [request] = await spansWhere(receiver.spans, (all) => all.filter((s) => s.traceId === ok.traceId && s.kind === SpanKindOf.server), 1)
    expect(request).toMatchObject({
      name: 'POST /v1/tools/:name/execute',
      parentSpanId: ok.parentId,
      attributes: { 'http.request.method': 'POST', 'http.route': '/v1/tools/:name/execute', 'url.path': '/v1/tools/write_file/execute', 'http.response.status_code': 200 },
      resource: { 'service.name': 'toolport' },
    })
    const [call] = await spansWhere(receiver.spans, (all) => all.filter((s) => s.traceId === ok.traceId && s.name === 'execute_tool write_file'), 1)
    expect(call?.parentSpanId).toBe(request?.spanId)
    expect(call?.kind).toBe(SpanKindOf.internal)
    expect(call?.attributes).toEqual({ 'gen_ai.operation.name': 'execute_tool', 'gen_ai.tool.name': 'write_file', 'toolport.workspace': 'traced' })
    expect(call?.status.code ?? StatusCodeOf.unset).toBe(StatusCodeOf.unset)

    // An ephemeral workspace is not named; a failure carries the problem's code.
    const failing = traceparent()
    const refused = await post(server, '/v1/tools/read_file/execute', { arguments: { path: 'missing.txt' } }, { traceparent: failing.header })
    expect(refused.status).toBeGreaterThanOrEqual(400)
    const [failed] = await spansWhere(receiver.spans, (all) => all.filter((s) => s.traceId === failing.traceId && s.name === 'execute_tool read_file'), 1)
    expect(failed?.attributes).toEqual({ 'gen_ai.operation.name': 'execute_tool', 'gen_ai.tool.name': 'read_file', 'error.type': refused.body['code'] })
    expect(failed?.status.code).toBe(StatusCodeOf.error)
    // A call that fails in a persistent workspace names it, as one that succeeds does.
    const inWorkspace = traceparent()
    expect((await post(server, '/v1/tools/read_file/execute', { workspace: 'traced', arguments: { path: 'missing.txt' } }, { traceparent: inWorkspace.header })).status).toBe(404)
    const [failedThere] = await spansWhere(receiver.spans, (all) => all.filter((s) => s.traceId === inWorkspace.traceId && s.name === 'execute_tool read_file'), 1)
    expect(failedThere?.attributes).toEqual({ 'gen_ai.operation.name': 'execute_tool', 'gen_ai.tool.name': 'read_file', 'toolport.workspace': 'traced', 'error.type': 'FileNotFound' })
    // Also one refused before its workspace is reached (its arguments).
    const refusedEarly = traceparent()
    expect((await post(server, '/v1/tools/read_file/execute', { workspace: 'traced', arguments: { path: 7 } }, { traceparent: refusedEarly.header })).status).toBe(400)
    const [early] = await spansWhere(receiver.spans, (all) => all.filter((s) => s.traceId === refusedEarly.traceId && s.name === 'execute_tool read_file'), 1)
    expect(early?.attributes).toEqual({ 'gen_ai.operation.name': 'execute_tool', 'gen_ai.tool.name': 'read_file', 'toolport.workspace': 'traced', 'error.type': 'InvalidArgs' })

    // A call whose client left is no failure: error.type says it was cancelled, its status is not ERROR.
    const left = traceparent()
    const leaving = new AbortController()
    const cut = fetch(`${server.base}/v1/tools/exec_shell/execute`, { method: 'POST', signal: leaving.signal, headers: { 'content-type': 'application/json', traceparent: left.header }, body: JSON.stringify({ arguments: { command: 'sleep 30' } }) })
    setTimeout(() => { leaving.abort() }, 300)
    await expect(cut).rejects.toThrow()
    const [leftCall] = await spansWhere(receiver.spans, (all) => all.filter((s) => s.traceId === left.traceId && s.name === 'execute_tool exec_shell'), 1)
    expect(leftCall?.attributes).toEqual({ 'gen_ai.operation.name': 'execute_tool', 'gen_ai.tool.name': 'exec_shell', 'error.type': 'cancelled' })
    expect(leftCall?.status.code ?? StatusCodeOf.unset).toBe(StatusCodeOf.unset)

    // A batch: one child per call, each with its call id, the parallel ones too.
    const batch = traceparent()
    const calls = [{ id: 'call_one', name: 'read_file', arguments: { path: 'a.txt' } }, { id: 'toolu_two', type: 'tool_use', name: 'read_file', input: { path: 'a.txt' } }]
    expect((await post(server, '/v1/tool-calls', { workspace: 'traced', parallel: true, calls }, { traceparent: batch.header })).status).toBe(200)
    const [batchRequest] = await spansWhere(receiver.spans, (all) => all.filter((s) => s.traceId === batch.traceId && s.kind === SpanKindOf.server), 1)
    const batchCalls = await spansWhere(receiver.spans, (all) => all.filter((s) => s.traceId === batch.traceId && s.name === 'execute_tool read_file'), 2)
    expect(batchCalls.map((s) => s.attributes['gen_ai.tool.call.id']).sort()).toEqual(['call_one', 'toolu_two'])
    for (const span of batchCalls) expect(span.parentSpanId).toBe(batchRequest?.spanId)
    await stop(server)
  })

  it('http/json: a request forwarded to the instance that runs a process continues the caller\'s trace there', async () => {
    const receiver = await startOtlpReceiver()
    const root = path.join(await tempDir('toolport-shared-'), 'root')
    const env = { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.base, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_BSP_SCHEDULE_DELAY: '50' }
    const instance = async (name: string): Promise<RunningServer> => {
      const port = await freePort()
      const config = { ...CONFIG, tools: { builtin: ['*'] }, workspaces: { root, ephemeral_root: path.join(path.dirname(root), `ephemeral-${name}`) } }
      const server = await startServer(config, { ...env, PORT: String(port), TOOLPORT_ADVERTISE_URL: `http://127.0.0.1:${port}` })
      await waitReady(server)
      return server
    }
    const a = await instance('a')
    const b = await instance('b')
    const started = await post(a, '/v1/workspaces/traced/processes', { command: 'sleep 30' })
    expect(started.status).toBe(201)
    const caller = traceparent()
    expect((await fetch(`${b.base}/v1/workspaces/traced/processes/${String(started.body['id'])}`, { headers: { traceparent: caller.header } })).status).toBe(200)
    // b's server span continues the caller's; a's, serving what b forwarded, continues b's.
    const spans = await spansWhere(receiver.spans, (all) => all.filter((s) => s.traceId === caller.traceId && s.kind === SpanKindOf.server), 2)
    const atB = spans.find((s) => s.parentSpanId === caller.parentId)
    expect(atB?.name).toBe('GET /v1/workspaces/:id/processes/:pid')
    expect(spans.find((s) => s.parentSpanId === atB?.spanId)?.name).toBe('GET /v1/workspaces/:id/processes/:pid')
    // A command called at b runs at a, in the workspace's network: a's span is a child of b's execute_tool span.
    const command = traceparent()
    expect((await post(b, '/v1/tools/exec_shell/execute', { workspace: 'traced', arguments: { command: 'echo here' } }, { traceparent: command.header })).status).toBe(200)
    const inTrace = (all: ReceivedSpan[]) => all.filter((s) => s.traceId === command.traceId)
    const [serverAtB] = await spansWhere(receiver.spans, (all) => inTrace(all).filter((s) => s.parentSpanId === command.parentId), 1)
    const [callAtB] = await spansWhere(receiver.spans, (all) => inTrace(all).filter((s) => s.parentSpanId === serverAtB?.spanId && s.name === 'execute_tool exec_shell'), 1)
    const [serverAtA] = await spansWhere(receiver.spans, (all) => inTrace(all).filter((s) => s.parentSpanId === callAtB?.spanId), 1)
    expect(serverAtA).toMatchObject({ kind: SpanKindOf.server, name: 'POST /v1/tools/:name/execute' })
    await stop(a)
    await stop(b)
  })

  it('http/json: /mcp requests carry mcp.method.name and mcp.session.id, and a tools/call has its execute_tool child', async () => {
    const receiver = await startOtlpReceiver()
    const server = await startServer(CONFIG, { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.base, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_BSP_SCHEDULE_DELAY: '50' })
    await waitReady(server)
    const trace = traceparent()
    const transport = new StreamableHTTPClientTransport(new URL(`${server.base}/mcp`), { requestInit: { headers: { traceparent: trace.header } } })
    const client = new Client({ name: 'toolport-test', version: '1.0.0' })
    await client.connect(transport)
    onCleanup(() => client.close())
    const result = await client.callTool({ name: 'exec_shell', arguments: { command: 'echo traced' } })
    expect(result.isError).toBeFalsy()
    const sessionId = transport.sessionId

    const mine = (all: ReceivedSpan[]) => all.filter((s) => s.traceId === trace.traceId)
    const [initialize] = await spansWhere(receiver.spans, (all) => mine(all).filter((s) => s.attributes['mcp.method.name'] === 'initialize'), 1)
    expect(initialize?.attributes).toMatchObject({ 'http.route': '/mcp', 'mcp.session.id': sessionId })
    const [toolsCall] = await spansWhere(receiver.spans, (all) => mine(all).filter((s) => s.attributes['mcp.method.name'] === 'tools/call'), 1)
    expect(toolsCall).toMatchObject({ name: 'POST /mcp', parentSpanId: trace.parentId, attributes: { 'mcp.session.id': sessionId } })
    const [call] = await spansWhere(receiver.spans, (all) => mine(all).filter((s) => s.name === 'execute_tool exec_shell'), 1)
    expect(call?.parentSpanId).toBe(toolsCall?.spanId)
    expect(call?.attributes).toMatchObject({ 'gen_ai.operation.name': 'execute_tool', 'gen_ai.tool.name': 'exec_shell' })
    await client.close()
    await stop(server)
  })

  it('http/json: cuts an MCP method and session id a caller sends to 256 bytes, and records a request whose client left before any answer as client_closed, not 200', async () => {
    const receiver = await startOtlpReceiver()
    const server = await startServer(CONFIG, { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.base, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_BSP_SCHEDULE_DELAY: '50' })
    await waitReady(server)
    const huge = traceparent()
    const answer = await fetch(`${server.base}/mcp`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', traceparent: huge.header, 'mcp-session-id': 'S'.repeat(10_000) },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'M'.repeat(100_000), params: {} }),
    })
    expect(answer.status).toBeGreaterThanOrEqual(400)
    const [mcp] = await spansWhere(receiver.spans, (all) => all.filter((s) => s.traceId === huge.traceId), 1)
    // 256 bytes, and the ellipsis that says it was cut.
    expect(Buffer.byteLength(String(mcp?.attributes['mcp.method.name']))).toBeLessThanOrEqual(256 + 3)
    expect(String(mcp?.attributes['mcp.method.name'])).toMatch(/^M+…$/)
    expect(String(mcp?.attributes['mcp.session.id'])).toMatch(/^S{200,256}…$/)

    const left = traceparent()
    const controller = new AbortController()
    const call = fetch(`${server.base}/v1/tools/exec_shell/execute`, { method: 'POST', signal: controller.signal, headers: { 'content-type': 'application/json', traceparent: left.header }, body: JSON.stringify({ arguments: { command: 'sleep 5' } }) })
    await new Promise((resolve) => setTimeout(resolve, 300))
    controller.abort()
    await expect(call).rejects.toThrow()
    const [request] = await spansWhere(receiver.spans, (all) => all.filter((s) => s.traceId === left.traceId && s.parentSpanId === left.parentId), 1)
    expect(request?.attributes['http.response.status_code']).toBeUndefined()
    expect(request?.attributes['error.type']).toBe('client_closed')
    expect(request?.status.code).toBe(StatusCodeOf.error)
    await stop(server)
  })

  it('http/json: a request whose URL cannot be decoded (answered before any hook runs) has its server span too', async () => {
    const receiver = await startOtlpReceiver()
    const server = await startServer(CONFIG, { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.base, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json', OTEL_BSP_SCHEDULE_DELAY: '50' })
    await waitReady(server)
    const malformed = traceparent()
    expect((await fetch(`${server.base}/v1/workspaces/%E0%A4%A`, { headers: { traceparent: malformed.header } })).status).toBe(400)
    const [request] = await spansWhere(receiver.spans, (all) => all.filter((s) => s.traceId === malformed.traceId && s.kind === SpanKindOf.server), 1)
    expect(request).toMatchObject({ parentSpanId: malformed.parentId, attributes: { 'http.request.method': 'GET', 'url.path': '/v1/workspaces/%E0%A4%A', 'http.response.status_code': 400 } })
    await stop(server)
  })

  it('http/protobuf by default, to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, flushed at a graceful shutdown', async () => {
    const receiver = await startOtlpReceiver()
    const modules = await moduleRecorder()
    // The batch delay is the SDK's 5 s: the span reaches the collector because the shutdown sends it.
    const server = await startServer(CONFIG, { ...modules.env, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${receiver.base}/v1/traces`, OTEL_SERVICE_NAME: 'toolport-under-test' })
    await waitReady(server)
    const trace = traceparent()
    expect((await post(server, '/v1/tools/exec_shell/execute', { arguments: { command: 'true' } }, { traceparent: trace.header })).status).toBe(200)
    await stop(server)
    expect(receiver.requests.length).toBeGreaterThan(0)
    for (const request of receiver.requests) expect(request.contentType).toBe('application/x-protobuf')
    const body = Buffer.concat(receiver.requests.map((r) => r.body))
    // Protobuf carries ids as raw bytes and names as UTF-8.
    expect(body.includes(Buffer.from(trace.traceId, 'hex'))).toBe(true)
    expect(body.includes(Buffer.from(trace.parentId, 'hex'))).toBe(true)
    for (const text of ['execute_tool exec_shell', 'gen_ai.tool.name', 'POST /v1/tools/:name/execute', 'toolport-under-test']) {
      expect(body.includes(Buffer.from(text)), text).toBe(true)
    }
    expect((await modules.loaded()).some((url) => SDK_MODULE.test(url))).toBe(true)
  })

  it('is off without an endpoint, and with OTEL_SDK_DISABLED: nothing is exported and the SDK is never loaded', async () => {
    const receiver = await startOtlpReceiver()
    const offs: Array<Record<string, string>> = [{}, { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.base, OTEL_SDK_DISABLED: 'true' }]
    for (const env of offs) {
      const modules = await moduleRecorder()
      // A protocol tracing cannot use shows that these variables are not even looked at when it is off.
      const server = await startServer(CONFIG, { ...modules.env, ...env, OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' })
      await waitReady(server)
      const trace = traceparent()
      expect((await post(server, '/v1/tools/exec_shell/execute', { arguments: { command: 'true' } }, { traceparent: trace.header })).status).toBe(200)
      await stop(server)
      expect((await modules.loaded()).filter((url) => SDK_MODULE.test(url))).toEqual([])
    }
    expect(receiver.requests).toEqual([])
  })

  it('refuses to start with a protocol it cannot export over', async () => {
    const server = await startServer(CONFIG, { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4317', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' })
    expect(await server.exited).toEqual({ code: 1, signal: null })
    expect(server.output()).toContain('OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" is not supported; use http/protobuf or http/json')
  })
})
