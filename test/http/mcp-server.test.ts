/**
 * /mcp serving the whole catalog — built-ins, executables and proxied MCP
 * tools — to the SDK's own client over a real socket, with REST's auth,
 * scopes and execution path, and one workspace per session.
 */
import path from 'node:path'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { describe, expect, it } from 'vitest'
import { buildTestApp } from '../helper.ts'
import { describeJson, eventually, placeTool, shTool, toolsDir } from '../sources/helpers.ts'
import { listening, mcpClient as connect } from '../support/listening.ts'
import { stdioFixture } from '../sources/mcp-helpers.ts'
import { workspacesIn } from '../support/ephemeral.ts'

type App = Awaited<ReturnType<typeof buildTestApp>>
type CallResult = Awaited<ReturnType<Client['callTool']>>

const textOf = (result: CallResult): string => (result.content as Array<{ text?: string }>).map((c) => c.text ?? '').join('')

/** An app with built-ins, one executable and two fixture MCP servers (one internal). */
async function fullApp (overrides: Record<string, unknown> = {}): Promise<App> {
  const dir = await toolsDir()
  await placeTool(dir, 'greet', shTool(describeJson('greet', 'Say hello', { who: { type: 'string' } }), 'printf \'{"hello": "%s"}\' "$(printf "%s" "$1" | sed \'s/.*"who":"\\([^"]*\\)".*/\\1/\')"'))
  return buildTestApp({
    tools: { dirs: [dir], mcp_servers: { fx: stdioFixture(), pub: stdioFixture({ internal_only: false }) } },
    ...overrides,
  })
}

describe('/mcp as an MCP server', () => {
  it('serves the same catalog as REST: built-ins, executables and MCP-proxied tools', async () => {
    const app = await fullApp()
    const base = await listening(app)
    const rest = async (query: string) => (await app.inject({ method: 'GET', url: `/v1/tools?format=mcp${query}` })).json().tools
    const client = await connect(base)
    const { tools } = await client.listTools()
    expect(tools).toEqual(await rest(''))
    const names = tools.map((t) => t.name)
    expect(names).toEqual(expect.arrayContaining(['read_file', 'exec_shell', 'greet', 'pub__echo']))
    expect(names.some((n) => n.startsWith('fx__'))).toBe(false)
    // `allowed` on the session URL selects internal_only tools, as on REST.
    const selective = await connect(base, { query: '?allowed=fx__*,greet' })
    const selected = (await selective.listTools()).tools
    expect(selected).toEqual(await rest('&allowed=fx__*,greet'))
    expect(selected.map((t) => t.name)).toEqual(['fx__add', 'fx__crash', 'fx__echo', 'fx__env', 'fx__fail', 'fx__grow', 'fx__slow', 'fx__stats', 'fx__storm', 'greet'])
    // An empty `allowed=` (a URL template left blank) filters nothing, on /mcp as on REST.
    for (const query of ['?allowed=', '?allowed=%20,%20']) {
      const unfiltered = (await (await connect(base, { query })).listTools()).tools
      expect(unfiltered).toEqual(tools)
      expect(unfiltered).toEqual(await rest(`&${query.slice(1)}`))
    }
  })

  it('runs every kind of tool through the same execution path', async () => {
    const app = await fullApp()
    const client = await connect(await listening(app))
    const greeted = await client.callTool({ name: 'greet', arguments: { who: 'mcp' } })
    expect(greeted.structuredContent).toEqual({ hello: 'mcp' })
    const echoed = await client.callTool({ name: 'fx__echo', arguments: { text: 'proxied' } })
    expect(echoed.structuredContent).toEqual({ content: [{ type: 'text', text: 'echo: proxied' }] })
    const failed = await client.callTool({ name: 'pub__fail', arguments: {} })
    expect(failed.isError).toBe(true)
    expect(textOf(failed)).toMatch(/the widget is jammed/)
    const invalid = await client.callTool({ name: 'greet', arguments: { who: 42 } })
    expect(invalid.isError).toBe(true)
    const missing = await client.callTool({ name: 'no_such_tool', arguments: {} })
    expect(missing.isError).toBe(true)
    // The calls were counted where REST calls are.
    const metrics = (await app.inject({ method: 'GET', url: '/metrics' })).body
    expect(metrics).toContain('toolport_tool_calls_total{tool="greet",code="ok"} 1')
    expect(metrics).toContain('toolport_tool_calls_total{tool="greet",code="InvalidArgs"} 1')
    expect(metrics).toContain('toolport_tool_calls_total{tool="fx__echo",code="ok"} 1')
  })

  it('needs the same tokens as REST and applies their tool scopes', async () => {
    const app = await fullApp({
      auth: { tokens: [{ token: 'narrow', tenant: 'a', allowed_tools: ['greet', 'fx__*'] }, { token: 'other', tenant: 'b', allowed_tools: ['*'] }] },
    })
    const base = await listening(app)
    await expect(connect(base)).rejects.toThrow()
    await expect(connect(base, { token: 'wrong' })).rejects.toThrow()
    const narrow = await connect(base, { token: 'narrow', query: '?allowed=*' })
    expect((await narrow.listTools()).tools.map((t) => t.name)).toEqual(['fx__add', 'fx__crash', 'fx__echo', 'fx__env', 'fx__fail', 'fx__grow', 'fx__slow', 'fx__stats', 'fx__storm', 'greet'])
    const refused = await narrow.callTool({ name: 'pub__echo', arguments: { text: 'x' } })
    expect(refused.isError).toBe(true)
    expect(textOf(refused)).toMatch(/^permission denied/)
    expect((await narrow.callTool({ name: 'fx__echo', arguments: { text: 'in scope' } })).isError).toBeFalsy()
    // A session belongs to the token that opened it.
    const sessionId = (narrow.transport as StreamableHTTPClientTransport).sessionId ?? ''
    const stolen = await fetch(`${base}/mcp`, {
      method: 'POST',
      headers: { authorization: 'Bearer other', 'mcp-session-id': sessionId, 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 9, method: 'tools/list' }),
    })
    expect(stolen.status).toBe(404)
    expect(stolen.headers.get('content-type')).toMatch(/^application\/problem\+json/)
  })

  it('answers a tools/list cursor it never gave with -32602 (every tool is in the one page)', async () => {
    const client = await connect(await listening(await buildTestApp()))
    const listed = await client.listTools()
    expect(listed.nextCursor).toBeUndefined()
    await expect(client.listTools({ cursor: 'page-2' })).rejects.toMatchObject({ code: -32602, message: expect.stringMatching(/unknown cursor/) })
    expect((await client.listTools()).tools).toEqual(listed.tools)
  })

  it('keeps one workspace per session and removes it when the session ends', async () => {
    const app = await buildTestApp()
    const base = await listening(app)
    const root = path.join(app.runtime.workspaces.root, 'ephemeral')
    const first = await connect(base)
    const second = await connect(base)
    await first.callTool({ name: 'write_file', arguments: { path: 'a.txt', content: 'one' } })
    await second.callTool({ name: 'write_file', arguments: { path: 'a.txt', content: 'two' } })
    expect((await first.callTool({ name: 'read_file', arguments: { path: 'a.txt' } })).structuredContent).toEqual({ content: 'one' })
    expect(await workspacesIn(root)).toHaveLength(2)
    await (first.transport as StreamableHTTPClientTransport).terminateSession()
    expect(await eventually(async () => (await workspacesIn(root)).length === 1)).toBe(true)
    expect((await second.callTool({ name: 'read_file', arguments: { path: 'a.txt' } })).structuredContent).toEqual({ content: 'two' })
  })

  it('removes the workspace of a session that expires, and forgets the session', async () => {
    const app = await buildTestApp({ server: { mcp_session_idle_seconds: 1 } })
    const base = await listening(app)
    const root = path.join(app.runtime.workspaces.root, 'ephemeral')
    const client = await connect(base)
    await client.callTool({ name: 'write_file', arguments: { path: 'a.txt', content: 'x' } })
    expect(await workspacesIn(root)).toHaveLength(1)
    expect(await eventually(async () => (await workspacesIn(root)).length === 0, 8000)).toBe(true)
    await expect(client.callTool({ name: 'read_file', arguments: { path: 'a.txt' } })).rejects.toThrow(/404|session/i)
  })
})
