/**
 * Requests that go wrong before a handler runs — an undecodable URL, the
 * wrong content type, a body that is not an object, a value outside a list
 * — each answered with a problem that says what to send instead.
 */
import { describe, expect, it } from 'vitest'
import { buildTestApp } from '../helper.ts'
import { expectProblem } from '../support/problem.ts'

type App = Awaited<ReturnType<typeof buildTestApp>>

async function send (app: App, method: 'GET' | 'POST' | 'PUT', url: string, payload?: string, headers: Record<string, string> = {}) {
  const response = await app.inject({ method, url, payload, headers })
  let body: any = response.body
  try { body = response.json() } catch {}
  return { status: response.statusCode, body, headers: response.headers }
}

describe('request problems', () => {
  it.each(['/v1/workspaces/%FF', '/v1/workspaces/a%', '/v1/tools/%E0%A4%A/execute'])('answers the undecodable URL %s with a BadRequest problem', async (url) => {
    const app = await buildTestApp()
    const answer = await send(app, url.endsWith('execute') ? 'POST' : 'GET', url, url.endsWith('execute') ? '{}' : undefined, { 'content-type': 'application/json' })
    expectProblem(answer, 400, 'BadRequest')
    expect(answer.headers['x-request-id']).toBe(answer.body.request_id)
  })

  it('answers a query string that does not decode to UTF-8 with a BadRequest problem, never taking its bytes as they are', async () => {
    const app = await buildTestApp()
    for (const query of ['toolport_workspace=caf%E9', 'toolport_workspace=100%', 'toolport_workspace=%ED%A0%80', 'format=openai&x=%C0%AF']) {
      const url = query.startsWith('format') ? `/v1/tools?${query}` : `/v1/tools/list_directory/invoke?${query}`
      const answer = await send(app, url.includes('invoke') ? 'POST' : 'GET', url, url.includes('invoke') ? '{"path":"."}' : undefined, { 'content-type': 'application/json' })
      expect(expectProblem(answer, 400, 'BadRequest', url.includes('invoke') ? 'list_directory' : undefined)['detail'], query).toBe('malformed URL: the query string is not percent-encoded UTF-8')
    }
    expect((await app.inject({ method: 'GET', url: '/v1/workspaces/caf%25E9' })).statusCode).toBe(404)
    // Escapes of UTF-8 text, and a plus for a space, are a query like any other.
    const fine = await send(app, 'POST', '/v1/tools/list_directory/invoke?toolport_workspace=caf%C3%A9+x%2By', '{"path":"."}', { 'content-type': 'application/json' })
    expect(fine.status).toBe(200)
    expect((await app.inject({ method: 'GET', url: '/v1/workspaces/caf%C3%A9%20x%2By' })).statusCode).toBe(200)
  })

  it('asks for a Bearer token on every 401', async () => {
    const app = await buildTestApp({ auth: { tokens: [{ token: 't', tenant: 'a' }] } })
    const answer = await send(app, 'GET', '/v1/tools')
    expectProblem(answer, 401, 'Unauthorized')
    expect(answer.headers['www-authenticate']).toMatch(/^Bearer\b/)
  })

  it('names the tool of the route in a refusal that comes before the route runs, and only for the routes that name one', async () => {
    const app = await buildTestApp({ auth: { tokens: [{ token: 't', tenant: 'a' }] } })
    expectProblem(await send(app, 'POST', '/v1/tools/read_file/execute', '{}', { 'content-type': 'application/json' }), 401, 'Unauthorized', 'read_file')
    expectProblem(await send(app, 'GET', '/v1/tools/exec_shell'), 401, 'Unauthorized', 'exec_shell')
    const catalog = await send(app, 'GET', '/v1/tools')
    expectProblem(catalog, 401, 'Unauthorized')
    expect(catalog.body.tool).toBeUndefined()
    const malformed = await send(app, 'POST', '/v1/tools/write_file/execute', '{"arguments":', { 'content-type': 'application/json', authorization: 'Bearer t' })
    expectProblem(malformed, 400, 'BadRequest', 'write_file')
  })

  it('says to send JSON as application/json when the body arrives as text or not at all', async () => {
    const app = await buildTestApp()
    const asText = expectProblem(await send(app, 'POST', '/v1/tools/read_file/execute', '{"arguments":{"path":"a"}}', { 'content-type': 'text/plain' }), 400, 'BadRequest', 'read_file')
    expect(asText['detail']).toMatch(/application\/json/)
    const none = expectProblem(await send(app, 'POST', '/v1/tools/read_file/execute'), 400, 'BadRequest', 'read_file')
    expect(none['detail']).toMatch(/JSON object/)
  })

  it('says the same on /mcp, where an initialize sent as text was told it was no initialize', async () => {
    const app = await buildTestApp()
    const initialize = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'c', version: '1' } } })
    const accept = 'application/json, text/event-stream'
    const asText = expectProblem(await send(app, 'POST', '/mcp', initialize, { 'content-type': 'text/plain', accept }), 400, 'BadRequest')
    expect(asText['detail']).toMatch(/JSON-RPC message or batch, sent with Content-Type: application\/json/)
    expect(expectProblem(await send(app, 'POST', '/mcp', undefined, { accept }), 400, 'BadRequest')['detail']).toMatch(/application\/json/)
    // Sent as JSON, the same message opens a session.
    const opened = await send(app, 'POST', '/mcp', initialize, { 'content-type': 'application/json', accept })
    expect(opened.status).toBe(200)
  })

  it('asks for application/gzip on the archive route', async () => {
    const app = await buildTestApp()
    const answer = expectProblem(await send(app, 'PUT', '/v1/workspaces/w/archive', 'x=1', { 'content-type': 'application/x-www-form-urlencoded' }), 400, 'BadRequest')
    expect(answer['detail']).toMatch(/application\/gzip/)
  })

  it('names the allowed values of a query parameter', async () => {
    const app = await buildTestApp()
    const answer = expectProblem(await send(app, 'GET', '/v1/tools?format=xml'), 400, 'BadRequest')
    expect(answer['detail']).toMatch(/native, openai, responses, anthropic, mcp/)
  })

  it('states the body limit in a 413', async () => {
    const app = await buildTestApp({ server: { body_limit_bytes: 2048 } })
    const answer = expectProblem(await send(app, 'POST', '/v1/tools/write_file/execute', JSON.stringify({ arguments: { path: 'a', content: 'x'.repeat(4096) } }), { 'content-type': 'application/json' }), 413, 'PayloadTooLarge', 'write_file')
    expect(answer['detail']).toMatch(/2048 bytes/)
  })

  it('creates a workspace from an empty JSON body, with the defaults', async () => {
    const app = await buildTestApp()
    const answer = await send(app, 'POST', '/v1/workspaces', '', { 'content-type': 'application/json' })
    expect(answer.status).toBe(201)
    expect(answer.body.id).toMatch(/^[0-9a-f-]{36}$/)
    // Elsewhere an empty JSON body is still refused.
    expectProblem(await send(app, 'POST', '/v1/tool-calls', '', { 'content-type': 'application/json' }), 400, 'BadRequest')
  })
})
