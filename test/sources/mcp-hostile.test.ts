/**
 * Upstream MCP servers that misbehave: an HTTP server whose answer never
 * ends (a JSON body, one endless event, or keep-alives forever), one whose
 * tools/list cursors never end, a stdio server that crashes leaving a child
 * behind, and errors of the SDK's own checks. The HTTP server here is a few
 * lines of JSON-RPC over node:http, so the test sees every byte it wrote.
 */
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { describe, expect, it } from 'vitest'
import { exec, onCleanup } from '../helper.ts'
import { expectProblem } from '../support/problem.ts'
import { alive } from '../support/processes.ts'
import { parseConfig } from '../../src/config.ts'
import { McpClientSource } from '../../src/sources/mcp-client.ts'
import { boundedFetch, MAX_MESSAGE_BYTES } from '../../src/sources/mcp-fetch.ts'
import { capturingLogger, eventually } from './helpers.ts'
import { FIXTURE, mcpApp, textOf } from './mcp-helpers.ts'

interface Hostile { url: string, written: () => number, openAnswers: () => number, notifications: string[] }

/** A Streamable HTTP server (stateless, JSON answers) whose tools answer as `answer` says; tools/list pages forever with `endlessCursors`. */
async function hostileServer (options: { endlessCursors?: boolean, redirect?: boolean } = {}): Promise<Hostile> {
  let written = 0
  const notifications: string[] = []
  const open = new Set<http.ServerResponse>()
  const tools = ['flood_json', 'flood_event', 'keepalive', 'bad_result'].map((name) => ({ name, inputSchema: { type: 'object' } }))
  const chunk = Buffer.alloc(256 * 1024, 'a')
  const pump = (response: http.ServerResponse, piece: () => Buffer): void => {
    open.add(response)
    response.on('close', () => open.delete(response))
    const more = (): void => {
      while (!response.destroyed) {
        const next = piece()
        written += next.length
        if (!response.write(next)) { response.once('drain', more); return }
      }
    }
    more()
  }
  const server = http.createServer((request, response) => {
    // As Starlette does: the endpoint without its trailing slash redirects to it.
    if (options.redirect === true && request.url === '/mcp') {
      response.writeHead(307, { location: '/mcp/' }).end()
      return
    }
    if (request.method !== 'POST') {
      response.writeHead(405).end()
      return
    }
    const body: Buffer[] = []
    request.on('data', (data: Buffer) => body.push(data))
    request.on('end', () => {
      const message = JSON.parse(Buffer.concat(body).toString('utf8')) as { id?: number, method: string, params?: { name?: string, cursor?: string, protocolVersion?: string } }
      if (message.id === undefined) {
        notifications.push(message.method)
        response.writeHead(202).end()
        return
      }
      const answer = (result: unknown): void => { response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ jsonrpc: '2.0', id: message.id, result })) }
      if (message.method === 'initialize') return answer({ protocolVersion: message.params?.protocolVersion, capabilities: { tools: {} }, serverInfo: { name: 'hostile', version: '1' } })
      if (message.method === 'tools/list') {
        const page = Number(message.params?.cursor ?? 0)
        return answer(options.endlessCursors ? { tools: [{ ...tools[0], name: `t${page}` }], nextCursor: String(page + 1) } : { tools })
      }
      switch (message.params?.name) {
        case 'flood_json':
          response.writeHead(200, { 'content-type': 'application/json' })
          response.write(`{"jsonrpc":"2.0","id":${message.id},"result":{"content":[{"type":"text","text":"`)
          return pump(response, () => chunk)
        case 'flood_event':
          response.writeHead(200, { 'content-type': 'text/event-stream' })
          response.write('event: message\ndata: ')
          return pump(response, () => chunk)
        case 'keepalive':
          response.writeHead(200, { 'content-type': 'text/event-stream' })
          open.add(response)
          response.on('close', () => open.delete(response))
          {
            const timer = setInterval(() => response.write(': still here\n\n'), 50)
            response.on('close', () => clearInterval(timer))
          }
          return
        default:
          return answer({ content: 'not-an-array', isError: 'maybe' })
      }
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  onCleanup(() => new Promise((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }))
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`, written: () => written, openAnswers: () => open.size, notifications }
}

describe('an HTTP MCP server whose answer never ends', () => {
  it('is read up to 10 MiB a message: an endless JSON body fails the call, and the rest is not read', async () => {
    const upstream = await hostileServer()
    const app = await mcpApp({ h: { url: upstream.url, internal_only: false, timeout_ms: 20_000 } })
    const problem = expectProblem(await exec(app, 'h__flood_json', {}), 500, 'ExecutionFailed', 'h__flood_json')
    expect(problem['detail']).toMatch(/longer than 10 MiB/)
    expect(await eventually(() => upstream.openAnswers() === 0)).toBe(true)
    expect(upstream.written()).toBeLessThan(64 * 1024 * 1024)
  })

  it('is read up to 10 MiB an event: an endless event is cut, and the call fails at once, saying why (not at its timeout)', async () => {
    const upstream = await hostileServer()
    const app = await mcpApp({ h: { url: upstream.url, internal_only: false, timeout_ms: 20_000 } })
    const problem = expectProblem(await exec(app, 'h__flood_event', {}), 500, 'ExecutionFailed', 'h__flood_event')
    expect(problem['detail']).toMatch(/longer than 10 MiB/)
    expect(await eventually(() => upstream.openAnswers() === 0)).toBe(true)
    expect(upstream.written()).toBeLessThan(64 * 1024 * 1024)
  })

  it('stops reading a call\'s answer once the call timed out', async () => {
    const upstream = await hostileServer()
    const app = await mcpApp({ h: { url: upstream.url, internal_only: false, timeout_ms: 300 } })
    for (let i = 0; i < 3; i++) expectProblem(await exec(app, 'h__keepalive', {}), 504, 'Timeout', 'h__keepalive')
    expect(await eventually(() => upstream.openAnswers() === 0, 3000)).toBe(true)
    // The connection serves on.
    expect(app.runtime.mcpStates()).toEqual({ h: 'up' })
  })

  it('stops reading a call\'s answer once the call timed out, also behind a redirect the SDK follows', async () => {
    const upstream = await hostileServer({ redirect: true })
    const app = await mcpApp({ h: { url: upstream.url, internal_only: false, timeout_ms: 300 } })
    for (let i = 0; i < 3; i++) expectProblem(await exec(app, 'h__keepalive', {}), 504, 'Timeout', 'h__keepalive')
    expect(await eventually(() => upstream.openAnswers() === 0, 3000)).toBe(true)
  })

  it('says in one line what the SDK found wrong with a result', async () => {
    const upstream = await hostileServer()
    const app = await mcpApp({ h: { url: upstream.url, internal_only: false } })
    const detail = String(expectProblem(await exec(app, 'h__bad_result', {}), 500, 'ExecutionFailed', 'h__bad_result')['detail'])
    expect(detail).toMatch(/^MCP server h: .*content/)
    expect(detail).not.toContain('\n')
  })
})

/** An MCP source of `upstream` with a connect timeout of `connectTimeoutMs`, started (closed after the test), and its log lines. */
async function startedSource (upstream: Hostile, connectTimeoutMs: number): Promise<{ source: McpClientSource, lines: ReturnType<typeof capturingLogger>['lines'] }> {
  const { log, lines } = capturingLogger()
  const config = parseConfig({ tools: { mcp_servers: { h: { url: upstream.url } } } }).tools.mcp_servers['h']
  if (!config) throw new Error('no config')
  const source = new McpClientSource({ name: 'h', config, log, onChange: () => {}, connectTimeoutMs })
  onCleanup(() => source.close())
  await source.start()
  return { source, lines }
}

describe('a server whose tools/list cursors never end', () => {
  it('is down once the listing has taken its connect timeout, saying why', async () => {
    const upstream = await hostileServer({ endlessCursors: true })
    // A tenth of a second: far less than the bound of pages takes (test/sources/mcp-client.test.ts), which is then not reached.
    const { source, lines } = await startedSource(upstream, 100)
    expect(source.state).toBe('down')
    expect(source.lastError).toMatch(/^listing the tools took longer than 0\.1 s \(\d+ pages, \d+ tools so far\)$/)
    expect(lines.some((line) => line.msg === 'MCP server unavailable; retrying in the background')).toBe(true)
  })
})

describe('a listing', () => {
  it('cancels none of its requests once it is over, when its deadline passes', async () => {
    const upstream = await hostileServer()
    const { source } = await startedSource(upstream, 200)
    expect(source.state).toBe('up')
    await new Promise((resolve) => setTimeout(resolve, 500))
    expect(upstream.notifications).not.toContain('notifications/cancelled')
  })
})

describe('a stdio server that exits by itself', () => {
  it('takes what it started with it (its process group is ended)', async () => {
    const app = await mcpApp({ odd: { command: process.execPath, args: [FIXTURE, 'stdio', 'odd'], internal_only: false } })
    const helper = Number(textOf((await exec(app, 'odd__helper', {})).body.result))
    expect(await alive(helper)).toBe(true)
    expectProblem(await exec(app, 'odd__crash', {}), 500, 'ExecutionFailed', 'odd__crash')
    expect(await eventually(async () => !(await alive(helper)))).toBe(true)
  })

  it('is seen gone, and its group ended, also when a child holds its stdio open', async () => {
    const app = await mcpApp({ odd: { command: process.execPath, args: [FIXTURE, 'stdio', 'odd'], internal_only: false, timeout_ms: 3000 } })
    const helper = Number(textOf((await exec(app, 'odd__clinging_helper', {})).body.result))
    expect(await alive(helper)).toBe(true)
    await exec(app, 'odd__crash', {})
    expect(await eventually(async () => !(await alive(helper)))).toBe(true)
    // Reconnected: a new server answers.
    expect(await eventually(async () => (await exec(app, 'odd__helper', {})).status === 200, 10_000)).toBe(true)
  })

  it('that cannot start is down with its own complaint', async () => {
    const { log } = capturingLogger()
    const config = parseConfig({ tools: { mcp_servers: { missing: { command: '/nonexistent/mcp-server' } } } }).tools.mcp_servers['missing']
    if (!config) throw new Error('no config')
    const source = new McpClientSource({ name: 'missing', config, log, onChange: () => {} })
    onCleanup(() => source.close())
    await source.start()
    expect(source.state).toBe('down')
    expect(source.lastError).toMatch(/its stderr: .*\/nonexistent\/mcp-server: No such file or directory/)
  })

  it('that cannot start is down with its whole last line, also when it came in pieces', async () => {
    const { log } = capturingLogger()
    // The last character's first byte in one chunk, its others in the next.
    const script = "process.stderr.write('first line\\nwhy it failed'); process.stderr.write(Buffer.from([0xc3])); setTimeout(() => { process.stderr.write(Buffer.from([0xa9])); process.stderr.write(': the rest of it\\n\\n'); setTimeout(() => process.exit(1), 100) }, 100)"
    const config = parseConfig({ tools: { mcp_servers: { broken: { command: process.execPath, args: ['-e', script] } } } }).tools.mcp_servers['broken']
    if (!config) throw new Error('no config')
    const source = new McpClientSource({ name: 'broken', config, log, onChange: () => {} })
    onCleanup(() => source.close())
    await source.start()
    expect(source.state).toBe('down')
    expect(source.lastError).toMatch(/\(its stderr: why it failedé: the rest of it\)$/)
  })
})

describe('the bound on an event stream', () => {
  /** Serves `body` as an event stream, written in pieces of 1 to 4,096 bytes, so events and line ends fall across chunks. */
  async function eventStream (body: Buffer): Promise<string> {
    const server = http.createServer((_request, response) => {
      response.writeHead(200, { 'content-type': 'text/event-stream' })
      let at = 0
      const more = (): void => {
        while (at < body.length) {
          const size = 1 + Math.floor(Math.random() * 4096)
          const ok = response.write(body.subarray(at, at + size))
          at += size
          if (!ok) { response.once('drain', more); return }
        }
        response.end()
      }
      more()
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    onCleanup(() => new Promise((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }))
    return `http://127.0.0.1:${(server.address() as AddressInfo).port}/`
  }

  for (const [name, end] of [['LF', '\n'], ['CR LF', '\r\n'], ['CR', '\r']] as const) {
    it(`counts each event, not the stream (lines ending with ${name})`, async () => {
      const event = `data: ${'x'.repeat(1000)}${end}${end}`
      const body = Buffer.from(event.repeat(Math.ceil((MAX_MESSAGE_BYTES * 1.5) / event.length)))
      const response = await boundedFetch(await eventStream(body), {})
      expect((await response.arrayBuffer()).byteLength).toBe(body.length)
    })
  }

  it('fails a stream at an event longer than the bound', async () => {
    const body = Buffer.from(`data: small\n\ndata: ${'y'.repeat(MAX_MESSAGE_BYTES)}\n\n`)
    const response = await boundedFetch(await eventStream(body), {})
    await expect(response.arrayBuffer()).rejects.toThrow(/longer than 10 MiB/)
  })
})
