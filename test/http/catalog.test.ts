import { describe, expect, it } from 'vitest'
import { buildTestApp } from '../helper.ts'
import { expectProblem } from '../support/problem.ts'

const CLAWFT = ['edit_file', 'exec_shell', 'list_directory', 'memory_read', 'memory_write', 'read_file', 'spawn', 'web_fetch', 'web_search', 'write_file']

async function catalog (app: Awaited<ReturnType<typeof buildTestApp>>, query = '', headers: Record<string, string> = {}) {
  const response = await app.inject({ method: 'GET', url: `/v1/tools${query}`, headers })
  expect(response.statusCode, response.body).toBe(200)
  return response.json().tools as Array<Record<string, any>>
}

describe('GET /v1/tools', () => {
  it('lists the clawft built-ins by default, sorted, with source builtin', async () => {
    const app = await buildTestApp()
    const tools = await catalog(app)
    expect(tools.map((t) => t.name)).toEqual(CLAWFT)
    for (const tool of tools) {
      expect(tool).toEqual({ name: expect.any(String), description: expect.any(String), parameters: expect.objectContaining({ type: 'object' }), source: 'builtin', annotations: expect.any(Object) })
    }
  })

  it('serves the same schemas in the openai, anthropic and mcp envelopes', async () => {
    const app = await buildTestApp()
    const native = await catalog(app)
    const openai = await catalog(app, '?format=openai')
    const anthropic = await catalog(app, '?format=anthropic')
    const mcp = await catalog(app, '?format=mcp')
    expect(openai).toEqual(native.map((t) => ({ type: 'function', function: { name: t.name, description: t.description, parameters: t.parameters } })))
    expect(anthropic).toEqual(native.map((t) => ({ name: t.name, description: t.description, input_schema: t.parameters })))
    expect(mcp).toEqual(native.map((t) => ({ name: t.name, description: t.description, inputSchema: t.parameters, outputSchema: expect.objectContaining({ type: 'object' }), annotations: t.annotations })))
  })

  it('filters with allowed globs', async () => {
    const app = await buildTestApp()
    expect((await catalog(app, '?allowed=read_*,write_file')).map((t) => t.name)).toEqual(['read_file', 'write_file'])
    expect((await catalog(app, '?format=openai&allowed=memory_*')).map((t) => t.function.name)).toEqual(['memory_read', 'memory_write'])
    // An empty `allowed=` filters nothing.
    expect(await catalog(app, '?allowed=')).toEqual(await catalog(app, ''))
  })

  it('matches a crafted allowed glob at once and refuses one past 1024 characters, on REST and on /mcp (400)', async () => {
    const app = await buildTestApp()
    // Compiled to a regular expression by a glob library, this one held the event loop for seconds.
    expect(await catalog(app, `?allowed=${encodeURIComponent('+(*)'.repeat(8) + 'X')}`)).toEqual([])
    expect(await catalog(app, `?allowed=${encodeURIComponent('*?'.repeat(30) + 'X,read_*')}`)).toEqual(await catalog(app, '?allowed=read_*'))
    const long = `allowed=${'*'.repeat(1025)}`
    const rest = await app.inject({ method: 'GET', url: `/v1/tools?${long}` })
    expectProblem({ status: rest.statusCode, body: rest.json(), headers: rest.headers }, 400, 'BadRequest')
    const initialize = { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } } }
    const mcp = await app.inject({ method: 'POST', url: `/mcp?${long}`, payload: initialize, headers: { accept: 'application/json, text/event-stream', host: '127.0.0.1' } })
    expectProblem({ status: mcp.statusCode, body: mcp.json(), headers: mcp.headers }, 400, 'BadRequest')
    expect(mcp.json().detail).toMatch(/allowed is longer than 1024/)
    // Given twice: REST's schema refuses it, and so does /mcp (it was read as no filter at all).
    const twice = await app.inject({ method: 'POST', url: '/mcp?allowed=read_file&allowed=exec_shell', payload: initialize, headers: { accept: 'application/json, text/event-stream', host: '127.0.0.1' } })
    expectProblem({ status: twice.statusCode, body: twice.json(), headers: twice.headers }, 400, 'BadRequest')
  })

  it('refuses an unknown format with a 400', async () => {
    const app = await buildTestApp()
    const response = await app.inject({ method: 'GET', url: '/v1/tools?format=xml' })
    expectProblem({ status: response.statusCode, body: response.json(), headers: response.headers }, 400, 'BadRequest')
  })

  it('tools.builtin globs choose among all built-ins; ["*"] adds omega\'s four', async () => {
    const some = await buildTestApp({ tools: { builtin: ['read_*', 'write_file', 'list_directory', 'exec_shell'] } })
    expect((await catalog(some)).map((t) => t.name)).toEqual(['exec_shell', 'list_directory', 'read_file', 'write_file'])
    const all = await buildTestApp({ tools: { builtin: ['*'] } })
    expect((await catalog(all)).map((t) => t.name)).toEqual([...CLAWFT, 'bash', 'edit', 'read', 'write', 'process_input', 'process_kill', 'process_list', 'process_output', 'process_start'].sort())
  })

  it('lists message when a channel is configured', async () => {
    const app = await buildTestApp({ channels: { ops: { webhook: 'http://127.0.0.1:9/hook' } } })
    const message = (await catalog(app)).find((t) => t.name === 'message')
    expect(message).toMatchObject({ source: 'builtin', parameters: { required: ['channel', 'chat_id', 'content'] } })
  })

  it('hides the tools outside a token\'s scope', async () => {
    const app = await buildTestApp({ auth: { tokens: [{ token: 'reader', tenant: 't', allowed_tools: ['read_*', 'list_directory'] }] } })
    expect((await catalog(app, '', { authorization: 'Bearer reader' })).map((t) => t.name)).toEqual(['list_directory', 'read_file'])
    const hidden = await app.inject({ method: 'GET', url: '/v1/tools/write_file', headers: { authorization: 'Bearer reader' } })
    expectProblem({ status: hidden.statusCode, body: hidden.json(), headers: hidden.headers }, 404, 'NotFound', 'write_file')
  })
})

describe('GET /v1/tools/{name}', () => {
  it('answers one tool, and a 404 problem naming an unknown one', async () => {
    const app = await buildTestApp()
    const response = await app.inject({ method: 'GET', url: '/v1/tools/read_file' })
    expect(response.json()).toMatchObject({ name: 'read_file', source: 'builtin', parameters: { properties: { path: { type: 'string' } }, required: ['path'] } })
    const missing = await app.inject({ method: 'GET', url: '/v1/tools/nope_zz' })
    expectProblem({ status: missing.statusCode, body: missing.json(), headers: missing.headers }, 404, 'NotFound', 'nope_zz')
  })

  it('finds built-ins case-insensitively', async () => {
    const app = await buildTestApp()
    expect((await app.inject({ method: 'GET', url: '/v1/tools/READ_File' })).json().name).toBe('read_file')
  })
})
