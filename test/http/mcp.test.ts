/** Toolport as an MCP server, driven by the SDK's own client over a real socket. */
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { describe, expect, it } from 'vitest'
import { eventually } from '../sources/helpers.ts'
import { listening } from '../support/listening.ts'
import { heldCommand } from '../support/held.ts'
import { buildTestApp, onCleanup } from '../helper.ts'
import { workspacesIn } from '../support/ephemeral.ts'

async function connect (base: string, token?: string): Promise<Client> {
  const headers: Record<string, string> = token ? { authorization: `Bearer ${token}` } : {}
  const transport = new StreamableHTTPClientTransport(new URL(`${base}/mcp`), { requestInit: { headers } })
  const client = new Client({ name: 'toolport-test', version: '1.0.0' })
  await client.connect(transport)
  onCleanup(() => client.close())
  return client
}

const textOf = (result: Awaited<ReturnType<Client['callTool']>>): string =>
  (result.content as Array<{ type: string, text: string }>).map((c) => c.text).join('')

describe('/mcp', () => {
  it('lists the same catalog as REST, in the mcp format', async () => {
    const app = await buildTestApp()
    const client = await connect(await listening(app))
    const { tools } = await client.listTools()
    const rest = (await app.inject({ method: 'GET', url: '/v1/tools?format=mcp' })).json().tools
    expect(tools.map((t) => t.name)).toEqual(rest.map((t: { name: string }) => t.name))
    expect(tools.find((t) => t.name === 'read_file')?.inputSchema).toMatchObject({ type: 'object', required: ['path'] })
  })

  it('keeps one workspace for a session, and a new one for another session', async () => {
    const app = await buildTestApp()
    const base = await listening(app)
    const client = await connect(base)
    const written = await client.callTool({ name: 'write_file', arguments: { path: 'a.txt', content: 'in session' } })
    expect(written.isError).toBeFalsy()
    const read = await client.callTool({ name: 'read_file', arguments: { path: 'a.txt' } })
    expect(read.structuredContent).toEqual({ content: 'in session' })
    const other = await connect(base)
    const missing = await other.callTool({ name: 'read_file', arguments: { path: 'a.txt' } })
    expect(missing.isError).toBe(true)
    expect(textOf(missing)).toMatch(/^file not found/)
  })

  it('answers tool failures as isError results', async () => {
    const app = await buildTestApp()
    const client = await connect(await listening(app))
    const denied = await client.callTool({ name: 'exec_shell', arguments: { command: 'true || sudo ls' } })
    expect(denied.isError).toBe(true)
    expect(textOf(denied)).toMatch(/^permission denied/)
    const invalid = await client.callTool({ name: 'read_file', arguments: {} })
    expect(invalid.isError).toBe(true)
  })

  it('applies the token scope and needs a token when auth is on', async () => {
    const app = await buildTestApp({ auth: { tokens: [{ token: 'reader', tenant: 't', allowed_tools: ['read_*'] }] } })
    const base = await listening(app)
    await expect(connect(base)).rejects.toThrow()
    const client = await connect(base, 'reader')
    expect((await client.listTools()).tools.map((t) => t.name)).toEqual(['read_file'])
    const refused = await client.callTool({ name: 'write_file', arguments: { path: 'a', content: 'b' } })
    expect(refused.isError).toBe(true)
    expect(textOf(refused)).toMatch(/^permission denied/)
  })

  it('removes the session workspace when the session ends', async () => {
    const app = await buildTestApp()
    const client = await connect(await listening(app))
    await client.callTool({ name: 'write_file', arguments: { path: 'a.txt', content: 'x' } })
    const root = `${app.runtime.workspaces.root}/ephemeral`
    expect((await workspacesIn(root)).length).toBe(1)
    await (client.transport as StreamableHTTPClientTransport).terminateSession()
    await client.close()
    const deadline = Date.now() + 3000
    while ((await workspacesIn(root)).length > 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50))
    expect(await workspacesIn(root)).toEqual([])
  })
})

describe('/mcp requests a session cannot take', () => {
  /** A raw session: its id, and a POST of `body` in it (its status and text, read to the end). */
  async function rawSession (base: string): Promise<(body: unknown, signal?: AbortSignal) => Promise<{ status: number, text: string }>> {
    const headers = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' }
    const init = await fetch(`${base}/mcp`, { method: 'POST', headers, body: JSON.stringify({ jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } } }) })
    await init.text()
    const session = init.headers.get('mcp-session-id') as string
    const post = async (body: unknown, signal?: AbortSignal): Promise<{ status: number, text: string }> => {
      const answer = await fetch(`${base}/mcp`, { method: 'POST', headers: { ...headers, 'mcp-session-id': session, 'mcp-protocol-version': '2025-06-18' }, body: JSON.stringify(body), signal })
      return { status: answer.status, text: await answer.text() }
    }
    await post({ jsonrpc: '2.0', method: 'notifications/initialized' })
    return post
  }

  it('answers an initialize without the Accept the transport needs with its JSON-RPC 406 (as README says), opening no session', async () => {
    const app = await buildTestApp()
    const base = await listening(app)
    const initialize = { jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } } }
    const answer = await fetch(`${base}/mcp`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(initialize) })
    expect(answer.status).toBe(406)
    expect(answer.headers.get('mcp-session-id')).toBeNull()
    expect(await answer.json()).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: -32000, message: expect.stringMatching(/application\/json and text\/event-stream/) } })
  })

  it('refuses an id a request still to be answered has, answering both, and an empty batch (JSON-RPC Invalid Request)', async () => {
    const app = await buildTestApp()
    const post = await rawSession(await listening(app))
    const call = (command: string) => ({ jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'exec_shell', arguments: { command } } })
    // The first call runs until the second has been refused: neither it nor the second outruns the other.
    const held = await heldCommand('first')
    const first = post(call(held.command))
    expect(await eventually(held.running)).toBe(true)
    const second = await post(call('echo second'))
    expect(second.status).toBe(400)
    expect(JSON.parse(second.text)).toMatchObject({ jsonrpc: '2.0', id: null, error: { code: -32600 } })
    await held.release()
    const answered = await first
    expect(answered.status).toBe(200)
    expect(answered.text).toContain('first')
    // Answered, its id may come again; and two requests of one batch may not share one.
    expect((await post(call('echo again'))).text).toContain('again')
    expect((await post([call('echo a'), call('echo b')])).status).toBe(400)
    const empty = await post([])
    expect(empty.status).toBe(400)
    expect(JSON.parse(empty.text)).toMatchObject({ error: { code: -32600 } })
  })

  it('keeps the id of a call whose client left until the call is answered: a retry with it is refused, not given the first call\'s answer', async () => {
    const app = await buildTestApp()
    const post = await rawSession(await listening(app))
    const call = (command: string) => ({ jsonrpc: '2.0', id: 9, method: 'tools/call', params: { name: 'exec_shell', arguments: { command } } })
    const left = new AbortController()
    // The first call runs until the retry has been refused; its client leaves once it has begun.
    const held = await heldCommand('FIRST')
    const first = post(call(held.command), left.signal).catch(() => undefined)
    expect(await eventually(held.running)).toBe(true)
    left.abort()
    await first
    const retry = await post(call('echo SECOND'))
    expect(retry.status).toBe(400)
    expect(retry.text).not.toContain('FIRST')
    // Once the first call has ended (its process gone, its slot given back), the id is free again.
    await held.release()
    expect(await eventually(() => !held.running() && app.runtime.limiter.inFlight === 0)).toBe(true)
    const again = await post(call('echo THIRD'))
    expect(again.text).toContain('THIRD')
    expect(again.text).not.toContain('FIRST')
  })
})
