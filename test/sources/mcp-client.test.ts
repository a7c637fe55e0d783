/**
 * Upstream MCP servers over stdio: the project's fixture (which can crash,
 * refuse to start, answer isError and change its tool list) and the
 * published @modelcontextprotocol/server-everything, run as real processes.
 */
import { readFile, rm, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { exec, tempDir } from '../helper.ts'
import { FAIL_TEXT, LONG_TOOL_NAME } from '../fixtures/mcp-server.mjs'
import { expectProblem } from '../support/problem.ts'
import { alive } from '../support/processes.ts'
import { freePort } from '../support/server-process.ts'
import { parseConfig } from '../../src/config.ts'
import { McpClientSource } from '../../src/sources/mcp-client.ts'
import { capturingLogger, eventually } from './helpers.ts'
import { catalogNames, EVERYTHING, FIXTURE, mcpApp, statsOf, stdioFixture, textOf } from './mcp-helpers.ts'

const FIXTURE_TOOLS = ['add', 'crash', 'echo', 'env', 'fail', 'grow', 'slow', 'stats', 'storm']

describe('MCP servers over stdio', () => {
  it('registers tools as {server}__{tool}; internal_only (the default) hides them unless allowed selects them', async () => {
    const app = await mcpApp({ fx: stdioFixture(), pub: stdioFixture({ internal_only: false }) })
    const visible = await catalogNames(app)
    expect(visible.filter((n) => n.startsWith('fx__'))).toEqual([])
    expect(visible.filter((n) => n.startsWith('pub__'))).toEqual(FIXTURE_TOOLS.map((t) => `pub__${t}`))
    expect(await catalogNames(app, 'fx__*')).toEqual(FIXTURE_TOOLS.map((t) => `fx__${t}`))
    expect(await catalogNames(app, 'fx__e*,read_file')).toEqual(['fx__echo', 'fx__env', 'read_file'])
    const entry = (await app.inject({ method: 'GET', url: '/v1/tools?allowed=pub__add&format=openai' })).json().tools[0]
    expect(entry.function).toMatchObject({ name: 'pub__add', description: 'Add two numbers', parameters: { required: ['a', 'b'] } })

    const echoed = await exec(app, 'fx__echo', { text: 'hi' })
    expect(echoed.body).toMatchObject({ tool: 'fx__echo', result: { content: [{ type: 'text', text: 'echo: hi' }] } })
    expect((await exec(app, 'pub__add', { a: 2, b: 3 })).body.result).toEqual({ content: [{ type: 'text', text: 'sum=5' }], structuredContent: { sum: 5 } })
    // The upstream schema is enforced before the server is asked.
    expectProblem(await exec(app, 'fx__add', { a: 'two' }), 400, 'InvalidArgs', 'fx__add')
    // The configured env reaches the server; the service's own environment does not.
    const env = await mcpApp({ fx: stdioFixture({}, { FIXTURE_FLAVOUR: 'lemon' }) })
    expect(textOf((await exec(env, 'fx__env', { name: 'FIXTURE_FLAVOUR' })).body.result)).toBe('lemon')
  })

  it('answers isError with 500 ExecutionFailed carrying the server\'s text, capped', async () => {
    const app = await mcpApp({ fx: stdioFixture() })
    const body = expectProblem(await exec(app, 'fx__fail', {}), 500, 'ExecutionFailed', 'fx__fail')
    expect(body['detail']).toBe(FAIL_TEXT)
    const long = expectProblem(await exec(app, 'fx__fail', { repeat: 1000 }), 500, 'ExecutionFailed', 'fx__fail')
    expect(String(long['detail']).startsWith(FAIL_TEXT + FAIL_TEXT)).toBe(true)
    expect(Buffer.byteLength(String(long['detail']))).toBeLessThanOrEqual(4096 + 3)
    // JSON-RPC's server errors share their codes with the SDK's own timeout (-32001) and closed connection
    // (-32000): a server that sends one failed, in its own words, and answered in time.
    for (const code of [-32000, -32001, -32099]) {
      expect(expectProblem(await exec(app, 'fx__fail', { code }), 500, 'ExecutionFailed', 'fx__fail')['detail']).toBe(`MCP server fx: ${FAIL_TEXT}`)
    }
  })

  it('keeps serving when other servers fail to start; /readyz and /metrics report each one', async () => {
    const dir = await tempDir('toolport-mcp-')
    const down = path.join(dir, 'down')
    await writeFile(down, '')
    const app = await mcpApp({
      good: stdioFixture({ internal_only: false }),
      missing: { command: path.join(dir, 'no-such-server') },
      exits: stdioFixture({}, { FIXTURE_DOWN_FILE: down }),
      refused: { url: `http://127.0.0.1:${await freePort()}/mcp` },
    })
    const ready = await app.inject({ method: 'GET', url: '/readyz' })
    expect(ready.statusCode).toBe(200)
    expect(ready.json().mcp_servers).toEqual({ good: 'up', missing: 'down', exits: 'down', refused: 'down' })
    expect(textOf((await exec(app, 'good__echo', { text: 'still here' })).body.result)).toBe('echo: still here')
    expect((await exec(app, 'read_file', { path: 'x' })).status).toBe(404)
    const metrics = (await app.inject({ method: 'GET', url: '/metrics' })).body
    expect(metrics).toContain('toolport_mcp_server_up{server="good"} 1')
    for (const name of ['missing', 'exits', 'refused']) expect(metrics).toContain(`toolport_mcp_server_up{server="${name}"} 0`)
  })

  it('leaves out a tool whose name, with the server\'s prefix, is longer than the service takes, whose name or input schema no catalog takes, or that is no tool, with a warning; the rest are published', async () => {
    const { log, lines } = capturingLogger()
    const config = parseConfig({ tools: { mcp_servers: { odd: { command: process.execPath, args: [FIXTURE, 'stdio', 'odd'] } } } }).tools.mcp_servers['odd']
    if (!config) throw new Error('no config')
    let names: string[] = []
    const source = new McpClientSource({ name: 'odd', config, log, onChange: (tools) => { names = tools.map((tool) => tool.name) } })
    try {
      await source.start()
      expect(source.state).toBe('up')
      // Listed, it could never be called: every route and batch takes names of at most 256 characters.
      expect(names).toContain('odd__nested')
      expect(names.some((name) => name.includes(LONG_TOOL_NAME))).toBe(false)
      expect(names.every((name) => name.length <= 256)).toBe(true)
      // As is one whose schema nests past what can be serialised again: it broke the catalog for every caller.
      expect(names).not.toContain('odd__deep_schema')
      // And one whose input schema MCP's Tool refuses: one such tool made the SDK refuse the whole listing (the server was down).
      for (const name of ['odd__array_schema', 'odd__bad_properties', 'odd__bad_required', 'odd__undefined']) expect(names).not.toContain(name)
      // And one whose name model APIs refuse (they refuse the whole request then).
      expect(names.every((name) => /^[A-Za-z0-9_.-]+$/.test(name))).toBe(true)
      expect(names).toContain('odd__helper')
      expect(lines).toEqual([expect.objectContaining({ left_out: 8, msg: expect.stringContaining('longer than 256 characters, or that are no tools, or have names of other characters') })])
    } finally {
      await source.close()
    }
  })

  it('stops listing a server whose cursors never repeat at 1000 pages, and publishes what it listed, with a warning', async () => {
    const config = parseConfig({ tools: { mcp_servers: { endless: { command: process.execPath, args: [FIXTURE, 'stdio', 'endless'] } } } }).tools.mcp_servers['endless']
    if (!config) throw new Error('no config')
    const { log, lines } = capturingLogger()
    let names: string[] = []
    const source = new McpClientSource({ name: 'endless', config, log, onChange: (tools) => { names = tools.map((tool) => tool.name) } })
    try {
      await source.start()
      expect(source.state).toBe('up')
      expect(names).toHaveLength(1000)
      expect(names.at(-1)).toBe('endless__t999')
      expect(lines.map((line) => line.msg)).toContain('the MCP server lists more than 1000 pages or 10000 tools: only the first are published')
    } finally {
      await source.close()
    }
  })

  it('reconnects a crashed server with backoff; meanwhile its tools answer ExecutionFailed', async () => {
    const dir = await tempDir('toolport-mcp-')
    const startLog = path.join(dir, 'starts')
    const down = path.join(dir, 'down')
    const starts = async () => (await readFile(startLog, 'utf8')).trim().split('\n').map(Number)
    const app = await mcpApp({ fx: stdioFixture({}, { FIXTURE_START_LOG: startLog, FIXTURE_DOWN_FILE: down }) })
    const first = await statsOf(app, 'fx')
    expect(await starts()).toEqual([first.pid])

    await writeFile(down, '')
    const crashed = expectProblem(await exec(app, 'fx__crash', {}), 500, 'ExecutionFailed', 'fx__crash')
    expect(crashed['detail']).toMatch(/MCP server fx/)
    expect(await eventually(async () => !(await alive(first.pid)))).toBe(true)
    const meanwhile = expectProblem(await exec(app, 'fx__echo', { text: 'x' }), 500, 'ExecutionFailed', 'fx__echo')
    expect(meanwhile['detail']).toBe('MCP server fx is not connected')
    expect((await app.inject({ method: 'GET', url: '/readyz' })).json().mcp_servers).toEqual({ fx: 'down' })
    expect((await app.inject({ method: 'GET', url: '/metrics' })).body).toContain('toolport_mcp_server_up{server="fx"} 0')
    // Its tools stay listed while it is down.
    expect(await catalogNames(app, 'fx__echo')).toEqual(['fx__echo'])

    // Two failed restarts, then let it come back.
    expect(await eventually(async () => (await starts()).length >= 3)).toBe(true)
    await rm(down)
    expect(await eventually(async () => (await exec(app, 'fx__echo', { text: 'back' })).status === 200, 10_000)).toBe(true)
    const second = await statsOf(app, 'fx')
    expect(second.pid).not.toBe(first.pid)
    expect((await app.inject({ method: 'GET', url: '/readyz' })).json().mcp_servers).toEqual({ fx: 'up' })
    expect((await app.inject({ method: 'GET', url: '/metrics' })).body).toContain('toolport_mcp_server_up{server="fx"} 1')
    // Backoff, not a busy loop: a handful of starts over several seconds.
    expect((await starts()).length).toBeLessThan(8)
  })

  it('refreshes the catalog on notifications/tools/list_changed', async () => {
    const app = await mcpApp({ fx: stdioFixture({ internal_only: false }) })
    expect(await catalogNames(app, 'fx__grown')).toEqual([])
    expectProblem(await exec(app, 'fx__grown', {}), 404, 'NotFound', 'fx__grown')
    expect((await exec(app, 'fx__grow', {})).status).toBe(200)
    expect(await eventually(async () => (await catalogNames(app)).includes('fx__grown'))).toBe(true)
    expect(textOf((await exec(app, 'fx__grown', {})).body.result)).toBe('I am new')
  })

  it('lists again at most once at a time, and once more after a storm of list_changed notifications, not once for each', async () => {
    const app = await mcpApp({ fx: stdioFixture({ internal_only: false }) })
    const before = (await statsOf(app, 'fx')).listings
    expect((await exec(app, 'fx__storm', { times: 50 })).status).toBe(200)
    // One listing under way and one queued behind it: the last notification is never missed.
    expect(await eventually(async () => (await statsOf(app, 'fx')).listings > before)).toBe(true)
    await new Promise((resolve) => setTimeout(resolve, 500))
    expect((await statsOf(app, 'fx')).listings - before).toBeLessThanOrEqual(2)
  })

  it('answers a call over the per-call timeout with 504 Timeout and cancels it upstream', async () => {
    const app = await mcpApp({ fx: stdioFixture({ timeout_ms: 300 }) })
    const body = expectProblem(await exec(app, 'fx__slow', { ms: 20_000 }), 504, 'Timeout', 'fx__slow')
    expect(body['detail']).toBe('MCP server fx did not answer within 300 ms')
    expect(await eventually(async () => (await statsOf(app, 'fx')).cancelled === 1)).toBe(true)
  })

  it('closes every session at shutdown: the server processes are gone', async () => {
    const app = await mcpApp({ a: stdioFixture(), b: stdioFixture() })
    const pids = [(await statsOf(app, 'a')).pid, (await statsOf(app, 'b')).pid]
    expect(await Promise.all(pids.map(alive))).toEqual([true, true])
    await app.close()
    expect(app.runtime.mcpStates()).toEqual({ a: 'closed', b: 'closed' })
    expect(await Promise.all(pids.map(alive))).toEqual([false, false])
  })

  it('ends what a stdio server started with it at shutdown (the SDK ends only the server\'s own process)', async () => {
    const app = await mcpApp({ odd: { command: process.execPath, args: [FIXTURE, 'stdio', 'odd'], internal_only: false } })
    const helper = Number(textOf((await exec(app, 'odd__helper', {})).body.result))
    expect(await alive(helper)).toBe(true)
    await app.close()
    expect(await eventually(async () => !(await alive(helper)))).toBe(true)
  })

  it('works with the published @modelcontextprotocol/server-everything', async () => {
    const app = await mcpApp({ everything: { command: process.execPath, args: [EVERYTHING, 'stdio'] } })
    const names = await catalogNames(app, 'everything__*')
    expect(names).toEqual(expect.arrayContaining(['everything__echo', 'everything__get-sum']))
    expect(textOf((await exec(app, 'everything__echo', { message: 'hello' })).body.result)).toBe('Echo: hello')
    expect(textOf((await exec(app, 'everything__get-sum', { a: 2, b: 40 })).body.result)).toMatch(/\b42\b/)
    expectProblem(await exec(app, 'everything__echo', {}), 400, 'InvalidArgs', 'everything__echo')
  })
})
