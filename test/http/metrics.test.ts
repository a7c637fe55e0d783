/**
 * GET /metrics: every line of the exposition parses as Prometheus text format
 * 0.0.4, and it carries what operators need — calls by tool and code, the
 * duration histogram, in-flight, queue depth, limiter rejections, the sandbox
 * mode, MCP servers up and down, and the default process metrics.
 */
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import type { FastifyInstance } from 'fastify'
import { describe, expect, it } from 'vitest'
import { buildApp } from '../../src/app.ts'
import { parseConfig } from '../../src/config.ts'
import { ToolError } from '../../src/errors.ts'
import { acquireAll } from '../../src/execution/execute.ts'
import { onCleanup, tempDir } from '../helper.ts'

const FIXTURE = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'fixtures', 'mcp-server.mjs')

interface Sample { name: string, labels: Record<string, string>, value: number }
interface Exposition { types: Map<string, string>, samples: Sample[] }

const NAME = '[a-zA-Z_:][a-zA-Z0-9_:]*'
const LABEL = '[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\\\\n]|\\\\[\\\\"n])*"'
const SAMPLE = new RegExp(`^(${NAME})(?:\\{((?:${LABEL})(?:,${LABEL})*,?)?\\})? (\\S+)(?: -?\\d+)?$`)
const VALUE = /^(?:[+-]?(?:\d+\.?\d*(?:[eE][+-]?\d+)?|\.\d+)|NaN|[+-]Inf)$/
const SUFFIXES: Record<string, string[]> = { histogram: ['_bucket', '_sum', '_count'], summary: ['', '_sum', '_count'] }

/** A strict parser of the text format: throws on the first line that does not parse. */
function parseExposition (text: string): Exposition {
  const types = new Map<string, string>()
  const samples: Sample[] = []
  const lines = text.split('\n')
  expect(lines.at(-1)).toBe('')
  for (const line of lines.slice(0, -1)) {
    // The format ignores empty lines (prom-client puts one after each family).
    if (line === '') continue
    const comment = /^# (HELP|TYPE) (\S+) (.*)$/.exec(line)
    if (comment) {
      expect(comment[2]).toMatch(new RegExp(`^${NAME}$`))
      if (comment[1] === 'TYPE') {
        expect(['counter', 'gauge', 'histogram', 'summary', 'untyped'], line).toContain(comment[3])
        expect(types.has(comment[2]!), `duplicate TYPE: ${line}`).toBe(false)
        types.set(comment[2]!, comment[3]!)
      }
      continue
    }
    const match = SAMPLE.exec(line)
    if (!match) throw new Error(`unparsable line: ${JSON.stringify(line)}`)
    const [, name = '', labelText = '', value = ''] = match
    if (!VALUE.test(value)) throw new Error(`bad value: ${JSON.stringify(line)}`)
    const family = [...types].find(([base, type]) => (SUFFIXES[type] ?? ['']).some((suffix) => `${base}${suffix}` === name))
    if (!family) throw new Error(`sample without a TYPE: ${JSON.stringify(line)}`)
    const labels = Object.fromEntries([...labelText.matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)].map((m) => [m[1], m[2]]))
    samples.push({ name, labels, value: Number(value.replace('Inf', 'Infinity')) })
  }
  return { types, samples }
}

const valueOf = (exposition: Exposition, name: string, labels: Record<string, string> = {}) =>
  exposition.samples.find((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))?.value

async function scrape (app: FastifyInstance): Promise<Exposition> {
  const response = await app.inject({ method: 'GET', url: '/metrics' })
  expect(response.statusCode).toBe(200)
  expect(response.headers['content-type']).toMatch(/^text\/plain; version=0\.0\.4/)
  return parseExposition(response.body)
}

async function buildMetricsApp (): Promise<FastifyInstance> {
  const root = await tempDir('toolport-ws-')
  const config = parseConfig({
    workspaces: { root },
    sandbox: { mode: 'none' },
    limits: { max_concurrent: 1, max_queue: 1, queue_timeout_ms: 30_000 },
    tools: {
      mcp_servers: {
        fixture: { command: process.execPath, args: [FIXTURE, 'stdio'] },
        broken: { command: process.execPath, args: ['-e', 'process.exit(1)'], timeout_ms: 2000 },
      },
    },
  })
  const app = await buildApp(config, { defaultMetrics: true })
  onCleanup(() => app.close())
  await app.runtime.whenReady()
  return app
}

const call = (app: FastifyInstance, tool: string, args: unknown) =>
  app.inject({ method: 'POST', url: `/v1/tools/${tool}/execute`, payload: { arguments: args } })

describe('GET /metrics', () => {
  it('parses line by line and carries calls, durations, in-flight, queue, rejections, sandbox, MCP and process metrics', async () => {
    const app = await buildMetricsApp()
    expect((await call(app, 'write_file', { path: 'a.txt', content: 'x' })).statusCode).toBe(200)
    expect((await call(app, 'read_file', { path: 'missing.txt' })).statusCode).toBe(404)

    // One call holds the only slot, one waits in the queue, the third is refused.
    const slow = call(app, 'exec_shell', { command: 'sleep 1' })
    const deadline = Date.now() + 5000
    while (app.runtime.limiter.inFlight === 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10))
    const queued = call(app, 'exec_shell', { command: 'true' })
    while (app.runtime.limiter.queued === 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10))
    const busy = await scrape(app)
    expect(valueOf(busy, 'toolport_calls_in_flight')).toBe(1)
    expect(valueOf(busy, 'toolport_limiter_queue_depth')).toBe(1)
    expect((await call(app, 'read_file', { path: 'a.txt' })).statusCode).toBe(503)
    expect((await slow).statusCode).toBe(200)
    expect((await queued).statusCode).toBe(200)

    const metrics = await scrape(app)
    expect(metrics.types.get('toolport_tool_calls_total')).toBe('counter')
    expect(valueOf(metrics, 'toolport_tool_calls_total', { tool: 'write_file', code: 'ok' })).toBe(1)
    expect(valueOf(metrics, 'toolport_tool_calls_total', { tool: 'read_file', code: 'FileNotFound' })).toBe(1)
    expect(valueOf(metrics, 'toolport_tool_calls_total', { tool: 'read_file', code: 'Overloaded' })).toBe(1)
    expect(valueOf(metrics, 'toolport_tool_calls_total', { tool: 'exec_shell', code: 'ok' })).toBe(2)
    expect(metrics.types.get('toolport_tool_call_duration_seconds')).toBe('histogram')
    expect(valueOf(metrics, 'toolport_tool_call_duration_seconds_count', { tool: 'exec_shell', code: 'ok' })).toBe(2)
    expect(valueOf(metrics, 'toolport_tool_call_duration_seconds_bucket', { tool: 'exec_shell', code: 'ok', le: '+Inf' })).toBe(2)
    // Both took a second or more: one slept, the other waited for the slot (queue time counts).
    expect(valueOf(metrics, 'toolport_tool_call_duration_seconds_bucket', { tool: 'exec_shell', code: 'ok', le: '0.5' })).toBe(0)
    expect(valueOf(metrics, 'toolport_tool_call_duration_seconds_sum', { tool: 'exec_shell', code: 'ok' })).toBeGreaterThanOrEqual(1)
    expect(valueOf(metrics, 'toolport_calls_in_flight')).toBe(0)
    expect(valueOf(metrics, 'toolport_limiter_queue_depth')).toBe(0)
    expect(valueOf(metrics, 'toolport_limiter_rejections_total', { limiter: 'service' })).toBe(1)
    expect(valueOf(metrics, 'toolport_sandbox_mode', { mode: 'none' })).toBe(1)
    expect(valueOf(metrics, 'toolport_mcp_server_up', { server: 'fixture' })).toBe(1)
    expect(valueOf(metrics, 'toolport_mcp_server_up', { server: 'broken' })).toBe(0)
    for (const name of ['toolport_process_cpu_seconds_total', 'toolport_process_resident_memory_bytes', 'toolport_nodejs_eventloop_lag_seconds', 'toolport_nodejs_heap_size_used_bytes']) {
      expect(metrics.types.has(name), name).toBe(true)
    }
  })

  it('answers scrapes that come together with numbers, never Nan (each scrape resets the event-loop monitor the others read)', async () => {
    const app = await buildMetricsApp()
    await scrape(app)
    const answers = await Promise.all(Array.from({ length: 12 }, () => app.inject({ method: 'GET', url: '/metrics' })))
    for (const answer of answers) {
      expect(answer.statusCode).toBe(200)
      expect(answer.body).not.toMatch(/ Nan$/m)
      expect(valueOf(parseExposition(answer.body), 'toolport_nodejs_eventloop_lag_mean_seconds')).toBeGreaterThanOrEqual(0)
    }
  })

  it('keeps unknown tool names out of the labels', async () => {
    const app = await buildMetricsApp()
    expect((await call(app, 'no_such_tool_xyz', {})).statusCode).toBe(404)
    const metrics = await scrape(app)
    expect(metrics.samples.some((s) => Object.values(s.labels).includes('no_such_tool_xyz'))).toBe(false)
    expect(valueOf(metrics, 'toolport_tool_calls_total', { tool: '(unknown)', code: 'NotFound' })).toBe(1)
  })

  it('counts a refusal of a real tool outside the token\'s scope under that tool, not (unknown)', async () => {
    const config = parseConfig({ workspaces: { root: await tempDir('toolport-ws-') }, sandbox: { mode: 'none' }, auth: { tokens: [{ token: 'narrow', tenant: 'a', allowed_tools: ['read_file'] }] } })
    const app = await buildApp(config)
    onCleanup(() => app.close())
    const refused = await app.inject({ method: 'POST', url: '/v1/tools/EXEC_SHELL/execute', headers: { authorization: 'Bearer narrow' }, payload: { arguments: { command: 'true' } } })
    expect(refused.statusCode).toBe(403)
    const metrics = await scrape(app)
    expect(valueOf(metrics, 'toolport_tool_calls_total', { tool: 'exec_shell', code: 'PermissionDenied' })).toBe(1)
    expect(metrics.samples.some((s) => s.labels['tool'] === '(unknown)')).toBe(false)
  })

  it('counts no limiter rejection for a call cancelled before it asked for a slot (its client gone, not the service full)', async () => {
    const app = await buildMetricsApp()
    const release = await acquireAll([app.runtime.limiter], AbortSignal.abort(), app.runtime.metrics, 'default').catch((error: unknown) => error)
    expect(release).toBeInstanceOf(ToolError)
    expect(valueOf(await scrape(app), 'toolport_limiter_rejections_total', { limiter: 'service' }) ?? 0).toBe(0)
  })

  it('the parser rejects a malformed exposition', () => {
    expect(() => parseExposition('# TYPE a counter\na{b="c} 1\n')).toThrow(/unparsable/)
    expect(() => parseExposition('# TYPE a counter\na 1x\n')).toThrow(/bad value/)
    expect(() => parseExposition('b 1\n')).toThrow(/without a TYPE/)
  })
})
