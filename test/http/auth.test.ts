/**
 * Bearer tokens, tenants and scopes over the REST endpoints: who may call,
 * what each token sees and may run, and that tenants never see each
 * other's workspaces (404, as if absent).
 */
import { existsSync } from 'node:fs'
import { mkdir, readlink, rename, rm, symlink, writeFile } from 'node:fs/promises'
import net from 'node:net'
import path from 'node:path'
import { describe, expect, it, vi } from 'vitest'
import { Limiter } from '../../src/execution/limiter.ts'
import { buildTestApp, onCleanup, tempDir } from '../helper.ts'
import { eventually } from '../sources/helpers.ts'
import { expectProblem } from '../support/problem.ts'
import { execAs, requestAs } from '../support/requests.ts'
import { listening, mcpClient } from '../support/listening.ts'
import { processesWith, survivorsWith, uniqueSleepSeconds } from '../support/processes.ts'
import { tarOf } from '../support/tarball.ts'

type App = Awaited<ReturnType<typeof buildTestApp>>

const TOKENS = [
  { token: 'acme-all', tenant: 'acme', allowed_tools: ['*'] },
  { token: 'acme-read', tenant: 'acme', allowed_tools: ['read_*', 'list_directory'] },
  { token: 'beta-all', tenant: 'beta', allowed_tools: ['*'] },
]

async function authApp (): Promise<App> {
  return buildTestApp({ auth: { tokens: TOKENS } })
}

/** Sends `target` as the request target, byte for byte (no client normalises it), and answers the status and body. */
async function rawRequest (base: string, method: string, target: string, body = ''): Promise<{ status: number, body: string }> {
  const { port } = new URL(base)
  const answer = await new Promise<string>((resolve, reject) => {
    const socket = net.connect(Number(port), '127.0.0.1', () => {
      socket.write(`${method} ${target} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`)
    })
    let text = ''
    socket.on('data', (chunk) => { text += chunk.toString() })
    socket.on('end', () => resolve(text))
    socket.on('error', reject)
  })
  return { status: Number(answer.split(' ')[1]), body: answer.slice(answer.indexOf('\r\n\r\n') + 4) }
}

describe('bearer tokens', () => {
  it('cannot be skipped by spelling the path another way: an absolute URL is 400, a percent-encoded path needs the token of its route', async () => {
    const base = await listening(await authApp())
    const command = JSON.stringify({ arguments: { command: 'echo ran' } })
    for (const target of ['http://x/v1/tools/exec_shell/execute', 'http://127.0.0.1/mcp']) {
      const answer = await rawRequest(base, 'POST', target, command)
      expect(answer.status, target).toBe(400)
      expect(JSON.parse(answer.body)).toMatchObject({ code: 'BadRequest' })
      expect(answer.body).not.toContain('ran')
    }
    for (const target of ['/%761/tools/exec_shell/execute', '/v%31/tools/exec_shell/execute', '/%6Dcp', '/%6dcp']) {
      const answer = await rawRequest(base, 'POST', target, command)
      expect(answer.status, target).toBe(401)
      expect(answer.body).not.toContain('ran')
    }
    expect((await rawRequest(base, 'GET', '/%761/tools')).status).toBe(401)
  })

  it('needs a known Bearer token on every /v1 route; other schemes are 401', async () => {
    const app = await authApp()
    for (const [method, url] of [['GET', '/v1/tools'], ['GET', '/v1/tools/read_file'], ['POST', '/v1/tools/read_file/execute'], ['POST', '/v1/tool-calls'], ['POST', '/v1/workspaces'], ['GET', '/v1/workspaces/x'], ['GET', '/v1/nope']] as const) {
      expectProblem(await requestAs(app, null, method, url, method === 'POST' ? {} : undefined), 401, 'Unauthorized')
      expectProblem(await requestAs(app, 'wrong', method, url, method === 'POST' ? {} : undefined), 401, 'Unauthorized')
    }
    const basic = await requestAs(app, null, 'GET', '/v1/tools', undefined, { authorization: `Basic ${Buffer.from('acme-all:').toString('base64')}` })
    expectProblem(basic, 401, 'Unauthorized')
    // A token that is a prefix, or has a suffix, of a real one is not it.
    expectProblem(await requestAs(app, 'acme-al', 'GET', '/v1/tools'), 401, 'Unauthorized')
    expectProblem(await requestAs(app, 'acme-all2', 'GET', '/v1/tools'), 401, 'Unauthorized')
    expect((await requestAs(app, 'acme-all', 'GET', '/v1/tools')).status).toBe(200)
  })

  it('names the tool in a 401 of a route that names one', async () => {
    const app = await authApp()
    expectProblem(await requestAs(app, null, 'POST', '/v1/tools/read_file/execute', { arguments: {} }), 401, 'Unauthorized', 'read_file')
  })

  it('leaves health, readiness, metrics and the OpenAPI document open', async () => {
    const app = await authApp()
    for (const url of ['/healthz', '/readyz', '/metrics', '/openapi.json']) expect((await requestAs(app, null, 'GET', url)).status, url).toBe(200)
  })
})

describe('token scopes', () => {
  it('shows a token only its tools, in every format', async () => {
    const app = await authApp()
    const names = (await requestAs(app, 'acme-read', 'GET', '/v1/tools')).body.tools.map((t: { name: string }) => t.name)
    expect(names).toEqual(['list_directory', 'read_file'])
    const openai = (await requestAs(app, 'acme-read', 'GET', '/v1/tools?format=openai')).body.tools.map((t: { function: { name: string } }) => t.function.name)
    expect(openai).toEqual(['list_directory', 'read_file'])
    // `allowed` narrows the scope further but never widens it.
    const widened = (await requestAs(app, 'acme-read', 'GET', '/v1/tools?allowed=*')).body.tools.map((t: { name: string }) => t.name)
    expect(widened).toEqual(['list_directory', 'read_file'])
    expectProblem(await requestAs(app, 'acme-read', 'GET', '/v1/tools/exec_shell'), 404, 'NotFound', 'exec_shell')
    expect((await requestAs(app, 'acme-read', 'GET', '/v1/tools/read_file')).status).toBe(200)
  })

  it('refuses a call outside the scope with 403, alone or in a batch, and runs nothing', async () => {
    const app = await authApp()
    expectProblem(await execAs(app, 'acme-read', 'write_file', { path: 'x.txt', content: 'no' }, 'scoped'), 403, 'PermissionDenied', 'write_file')
    expectProblem(await execAs(app, 'acme-read', 'WRITE_FILE', { path: 'x.txt', content: 'no' }, 'scoped'), 403, 'PermissionDenied')
    const batch = await requestAs(app, 'acme-read', 'POST', '/v1/tool-calls', {
      workspace: 'scoped',
      calls: [
        { id: 'a', name: 'write_file', arguments: { path: 'y.txt', content: 'no' } },
        { id: 'b', name: 'list_directory', arguments: { path: '.' } },
      ],
    })
    expect(batch.status).toBe(200)
    expect(batch.body.results.map((r: { status: number }) => r.status)).toEqual([403, 200])
    expect(batch.body.results[0].error.code).toBe('PermissionDenied')
    expect(batch.body.results[1].result).toEqual({ entries: [] })
  })
})

describe('reading a whole workspace', () => {
  it('downloads an archive only with a token that may use read_file (it reads every file as read_file does)', async () => {
    const app = await buildTestApp({ auth: { tokens: [...TOKENS, { token: 'acme-search', tenant: 'acme', allowed_tools: ['web_search'] }] } })
    expect((await execAs(app, 'acme-all', 'write_file', { path: 'notes.txt', content: 'private' }, 'team')).status).toBe(200)
    expectProblem(await requestAs(app, 'acme-search', 'GET', '/v1/workspaces/team/archive'), 403, 'PermissionDenied')
    const allowed = await app.inject({ method: 'GET', url: '/v1/workspaces/team/archive', headers: { authorization: 'Bearer acme-read' } })
    expect(allowed.statusCode).toBe(200)
    expect(allowed.headers['content-type']).toBe('application/gzip')
  })
})

describe('tenants', () => {
  it('never lets one tenant see, use, download or delete another tenant\'s workspace', async () => {
    const app = await authApp()
    expect((await requestAs(app, 'acme-all', 'POST', '/v1/workspaces', { id: 'plans' })).status).toBe(201)
    expect((await execAs(app, 'acme-all', 'write_file', { path: 'secret.txt', content: 'acme only' }, 'plans')).status).toBe(200)
    const acmeDir = app.runtime.workspaces.get('acme', 'plans').dir

    expectProblem(await requestAs(app, 'beta-all', 'GET', '/v1/workspaces/plans'), 404, 'NotFound')
    expectProblem(await requestAs(app, 'beta-all', 'GET', '/v1/workspaces/plans/archive'), 404, 'NotFound')
    expectProblem(await requestAs(app, 'beta-all', 'DELETE', '/v1/workspaces/plans'), 404, 'NotFound')
    // Beta naming the same id gets a workspace of its own, empty.
    expectProblem(await execAs(app, 'beta-all', 'read_file', { path: 'secret.txt' }, 'plans'), 404, 'FileNotFound', 'read_file')
    const upload = await requestAs(app, 'beta-all', 'PUT', '/v1/workspaces/plans/archive', tarOf([{ name: 'secret.txt', content: 'overwritten by beta' }]), { 'content-type': 'application/gzip' })
    expect(upload.status).toBe(200)
    expect((await requestAs(app, 'beta-all', 'POST', '/v1/workspaces', { id: 'plans' })).status).toBe(409)

    expect(existsSync(acmeDir)).toBe(true)
    expect((await execAs(app, 'acme-all', 'read_file', { path: 'secret.txt' }, 'plans')).body.result.content).toBe('acme only')
    expect(app.runtime.workspaces.get('beta', 'plans').dir).not.toBe(acmeDir)
  })

  it('shares workspaces between the tokens of one tenant', async () => {
    const app = await authApp()
    expect((await execAs(app, 'acme-all', 'write_file', { path: 'note.txt', content: 'shared' }, 'team')).status).toBe(200)
    expect((await execAs(app, 'acme-read', 'read_file', { path: 'note.txt' }, 'team')).body.result.content).toBe('shared')
    expect((await requestAs(app, 'acme-read', 'GET', '/v1/workspaces/team')).body).toMatchObject({ id: 'team', files: 1 })
  })
})

describe('without tokens', () => {
  const command = { arguments: { command: 'echo ran' } }
  const call = async (app: App, headers: Record<string, string>, url = '/v1/tools/exec_shell/execute') => {
    const response = await app.inject({ method: 'POST', url, headers: { 'content-type': 'application/json', ...headers }, payload: command })
    return { status: response.statusCode, body: response.json() as Record<string, unknown>, headers: response.headers, text: response.body }
  }

  it('serves /v1 and /mcp only to requests that name a loopback host, so that a re-pointed DNS name (rebinding) reaches nothing', async () => {
    const app = await buildTestApp()
    for (const host of ['attacker.example', 'attacker.example:8080', '127.0.0.1.attacker.example', 'localhost@attacker.example', 'attacker@127.0.0.1', '127.0.0.1/x', '127.0.0.1#x', '10.0.0.5:8080', 'localhost.localdomain']) {
      const answer = await call(app, { host })
      expectProblem(answer, 403, 'PermissionDenied')
      expect(answer.text, host).not.toContain('ran')
    }
    const mcp = await app.inject({ method: 'POST', url: '/mcp', headers: { host: 'attacker.example', 'content-type': 'application/json', accept: 'application/json, text/event-stream' }, payload: { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'x', version: '1' } } } })
    expect(mcp.statusCode).toBe(403)
    expect((await app.inject({ url: '/v1/tools', headers: { host: 'attacker.example' } })).statusCode).toBe(403)
    for (const host of ['127.0.0.1:8080', '127.7.0.1', 'localhost', 'LOCALHOST.:9', 'app.localhost:3000', '[::1]:8080', '[::ffff:127.0.0.1]']) {
      expect((await call(app, { host })).status, host).toBe(200)
    }
    // What no token guards elsewhere stays open: health, metrics, the OpenAPI document.
    expect((await app.inject({ url: '/healthz', headers: { host: 'attacker.example' } })).statusCode).toBe(200)
  })

  it('opens MCP sessions for every Host the rest of the service serves, however it is written', async () => {
    const initialize = { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'x', version: '1' } } }
    const mcp = (app: App, headers: Record<string, string>) => app.inject({ method: 'POST', url: '/mcp', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers }, payload: initialize })
    // The SDK's transport answered these with a bare 400 of its own, where /v1 served them.
    const cases: Array<[App, Record<string, string>]> = [
      [await buildTestApp(), { host: '[::ffff:127.0.0.1]' }],
      [await buildTestApp(), { host: '[0:0::1]:8080' }],
      [await authApp(), { host: 'b\u00fccher.example', authorization: 'Bearer acme-all' }],
      [await authApp(), { host: '[fd00:0:0::1]:8080', authorization: 'Bearer acme-all' }],
    ]
    for (const [app, headers] of cases) {
      const answer = await mcp(app, headers)
      expect(answer.statusCode, headers['host']).toBe(200)
      expect(answer.headers['mcp-session-id'], headers['host']).toEqual(expect.any(String))
    }
    const junk = await mcp(await authApp(), { host: 'a b', authorization: 'Bearer acme-all' })
    expectProblem({ status: junk.statusCode, body: junk.json(), headers: junk.headers }, 400, 'BadRequest')
  })

  it('refuses the pages of other sites (Origin), and serves pages of loopback hosts', async () => {
    const app = await buildTestApp()
    for (const origin of ['http://attacker.example', 'https://127.0.0.1.attacker.example', 'null', 'not a URL']) {
      const answer = await call(app, { host: '127.0.0.1:8080', origin })
      expectProblem(answer, 403, 'PermissionDenied')
      expect(answer.text, origin).not.toContain('ran')
    }
    for (const origin of ['http://localhost:3000', 'http://127.0.0.1:8080', 'http://[::1]:5173']) {
      expect((await call(app, { host: '127.0.0.1:8080', origin })).status, origin).toBe(200)
    }
  })

  it('serves any host when auth is disabled on purpose, and leaves the check to the tokens when there are some', async () => {
    expect((await call(await buildTestApp({ auth: { disabled: true } }), { host: 'toolport.internal:8080', origin: 'http://dashboard.internal' })).status).toBe(200)
    const withTokens = await authApp()
    expect((await call(withTokens, { host: 'toolport.example', authorization: 'Bearer acme-all' })).status).toBe(200)
    expect((await call(withTokens, { host: 'toolport.example' })).status).toBe(401)
  })
})

describe('a tokens file', () => {
  /** A directory laid out as a kubelet mounts a Secret: `tokens.yaml → ..data/tokens.yaml`, `..data → ..<version>`. */
  async function secretMount (): Promise<{ file: string, publish: (version: string, text: string) => Promise<void> }> {
    const dir = await tempDir('toolport-secret-')
    const publish = async (version: string, text: string): Promise<void> => {
      const previous = existsSync(path.join(dir, '..data')) ? await readlink(path.join(dir, '..data')) : undefined
      await mkdir(path.join(dir, version))
      await writeFile(path.join(dir, version, 'tokens.yaml'), text)
      // Swapped as the kubelet does: a new link renamed over the old, then the old version removed.
      await symlink(version, path.join(dir, '..data_tmp'))
      await rename(path.join(dir, '..data_tmp'), path.join(dir, '..data'))
      if (previous !== undefined) await rm(path.join(dir, previous), { recursive: true })
    }
    await publish('..v1', '- { token: first-token, tenant: acme }\n')
    await symlink('..data/tokens.yaml', path.join(dir, 'tokens.yaml'))
    return { file: path.join(dir, 'tokens.yaml'), publish }
  }

  const statusWith = async (app: App, token: string): Promise<number> =>
    (await app.inject({ url: '/v1/tools', headers: { authorization: `Bearer ${token}` } })).statusCode

  it('is followed: a token rotated out stops working and its successor works, without a restart; a broken update keeps the last tokens', async () => {
    const { file, publish } = await secretMount()
    const app = await buildTestApp({ auth: { tokens: [{ token: 'inline-token', tenant: 'ops' }], tokens_file: file } })
    expect([await statusWith(app, 'first-token'), await statusWith(app, 'second-token'), await statusWith(app, 'inline-token')]).toEqual([200, 401, 200])
    await publish('..v2', '- { token: second-token, tenant: acme }\n')
    await vi.waitFor(async () => { expect(await statusWith(app, 'first-token')).toBe(401) }, { timeout: 5000, interval: 100 })
    expect([await statusWith(app, 'second-token'), await statusWith(app, 'inline-token')]).toEqual([200, 200])
    // Not valid (a token twice, or no tenant): the tokens read before stay in use.
    await publish('..v3', '- { token: inline-token, tenant: other }\n')
    await publish('..v4', '- { token: third-token }\n')
    await new Promise((resolve) => setTimeout(resolve, 2500))
    expect([await statusWith(app, 'second-token'), await statusWith(app, 'third-token'), await statusWith(app, 'inline-token')]).toEqual([200, 401, 200])
  })

  it('keeps the MCP sessions of a token a change leaves as it was, and ends the sessions, streams and calls of a token it revokes', async () => {
    const { file, publish } = await secretMount()
    await publish('..both', '- { token: first-token, tenant: acme }\n- { token: other-token, tenant: acme }\n')
    const app = await buildTestApp({ tools: { builtin: ['*'] }, auth: { tokens_file: file } })
    const base = await listening(app)
    const kept = await mcpClient(base, { token: 'first-token' })
    const doomed = await mcpClient(base, { token: 'other-token' })
    const marker = uniqueSleepSeconds()
    await doomed.callTool({ name: 'process_start', arguments: { command: `sleep ${marker}`, yield_ms: 0 } })
    expect(processesWith(marker).length).toBeGreaterThan(0)
    // A process followed as an event stream, and a long-poll of it, with the token to be revoked.
    const other = { authorization: 'Bearer other-token', 'content-type': 'application/json' }
    const started = await (await fetch(`${base}/v1/workspaces/ticks/processes`, { method: 'POST', headers: other, body: JSON.stringify({ command: 'while true; do echo tick; sleep 0.2; done' }) })).json() as { id: string }
    const stream = await fetch(`${base}/v1/workspaces/ticks/processes/${started.id}/output`, { headers: { ...other, accept: 'text/event-stream' } })
    const streamEnded = (async () => { for await (const chunk of stream.body ?? []) void chunk })()
    const quiet = await (await fetch(`${base}/v1/workspaces/ticks/processes`, { method: 'POST', headers: other, body: JSON.stringify({ command: 'sleep 30' }) })).json() as { id: string }
    const poll = fetch(`${base}/v1/workspaces/ticks/processes/${quiet.id}/output?wait_ms=30000`, { headers: other })

    // A change that leaves first-token as it was, and removes other-token.
    await publish('..one', '# rotated\n- { token: first-token, tenant: acme }\n')
    await vi.waitFor(async () => { expect(await statusWith(app, 'other-token')).toBe(401) }, { timeout: 5000, interval: 100 })
    expect((await kept.listTools()).tools.length).toBeGreaterThan(0)
    await expect(doomed.listTools()).rejects.toThrow()
    expect(await survivorsWith(marker)).toEqual([])
    await streamEnded
    expect((await poll).status).toBe(401)
    await app.inject({ method: 'DELETE', url: '/v1/workspaces/ticks', headers: { authorization: 'Bearer first-token' } })
  })

  it('answers a call cut by its token\'s revocation 401, and keeps no answer for its Idempotency-Key: the retry with the new token runs', async () => {
    const { file, publish } = await secretMount()
    const app = await buildTestApp({ auth: { tokens_file: file } })
    const base = await listening(app)
    // The shell's command line carries the marker, so the test sees the call's command start.
    const marker = `rotation-${process.pid}-${Date.now()}`
    const body = JSON.stringify({ arguments: { command: `sleep 3; echo ran # ${marker}` } })
    const headers = (token: string) => ({ authorization: `Bearer ${token}`, 'content-type': 'application/json', 'idempotency-key': 'rotation-1' })
    const cut = fetch(`${base}/v1/tools/exec_shell/execute`, { method: 'POST', headers: headers('first-token'), body })
    await vi.waitFor(() => { expect(processesWith(marker).length).toBeGreaterThan(0) }, { timeout: 5000, interval: 50 })
    await publish('..v2', '- { token: second-token, tenant: acme }\n')
    const answer = await cut
    expect(answer.status).toBe(401)
    expect(await answer.json()).toMatchObject({ code: 'Unauthorized', detail: 'the token was revoked while the request ran' })
    const retry = await fetch(`${base}/v1/tools/exec_shell/execute`, { method: 'POST', headers: headers('second-token'), body })
    expect(retry.status).toBe(200)
    expect(retry.headers.get('idempotent-replayed')).toBeNull()
    expect(JSON.stringify(await retry.json())).toContain('ran')
  }, 30_000)

  it('keeps the answer of a batch some of whose calls ran before its token\'s revocation cut the rest: a retry replays it, nothing runs twice', async () => {
    const { file, publish } = await secretMount()
    const app = await buildTestApp({ auth: { tokens_file: file } })
    const base = await listening(app)
    const marker = `batch-rotation-${process.pid}-${Date.now()}`
    const body = JSON.stringify({
      workspace: 'rotated',
      calls: [
        { id: 'a', name: 'exec_shell', arguments: { command: 'echo ran >> log.txt' } },
        { id: 'b', name: 'exec_shell', arguments: { command: `sleep 3; echo second >> log.txt # ${marker}` } },
      ],
    })
    const headers = (token: string) => ({ authorization: `Bearer ${token}`, 'content-type': 'application/json', 'idempotency-key': 'batch-1' })
    const cut = fetch(`${base}/v1/tool-calls`, { method: 'POST', headers: headers('first-token'), body })
    await vi.waitFor(() => { expect(processesWith(marker).length).toBeGreaterThan(0) }, { timeout: 5000, interval: 50 })
    await publish('..v2', '- { token: second-token, tenant: acme }\n')
    const answer = await cut
    expect(answer.status).toBe(200)
    expect(((await answer.json()) as { results: Array<{ status: number }> }).results.map((r) => r.status)).toEqual([200, 401])
    const retry = await fetch(`${base}/v1/tool-calls`, { method: 'POST', headers: headers('second-token'), body })
    expect(retry.headers.get('idempotent-replayed')).toBe('true')
    const log = await app.inject({ method: 'POST', url: '/v1/tools/read_file/execute', headers: { authorization: 'Bearer second-token' }, payload: { workspace: 'rotated', arguments: { path: 'log.txt' } } })
    expect(log.json().result.content).toBe('ran\n')
  }, 30_000)

  it('answers 401 to a download its token\'s revocation cuts while it waits for a slot (not a 500 "cancelled")', async () => {
    const { file, publish } = await secretMount()
    await publish('..both', '- { token: first-token, tenant: acme }\n- { token: other-token, tenant: acme }\n')
    // The downloads' limiter is the archive routes' own: it is found as the one the first download takes a slot of.
    const acquire = vi.spyOn(Limiter.prototype, 'acquire')
    onCleanup(async () => { acquire.mockRestore() })
    const app = await buildTestApp({ auth: { tokens_file: file }, limits: { max_concurrent: 1, queue_timeout_ms: 30_000 } })
    const base = await listening(app)
    expect((await execAs(app, 'first-token', 'exec_shell', { command: 'head -c 48000000 /dev/urandom > big' }, 'large')).status).toBe(200)
    // The only download slot is held by a client of the token that stays, which reads nothing yet.
    const holder = await fetch(`${base}/v1/workspaces/large/archive`, { headers: { authorization: 'Bearer first-token' } })
    expect(holder.status).toBe(200)
    const downloads = (acquire.mock.contexts as Limiter[]).find((limiter) => limiter.options.name === 'archive downloads')
    expect(downloads).toBeDefined()
    const queued = fetch(`${base}/v1/workspaces/large/archive`, { headers: { authorization: 'Bearer other-token' } })
    // The token goes once the second download waits for the slot.
    expect(await eventually(() => downloads?.queued === 1)).toBe(true)
    await publish('..one', '- { token: first-token, tenant: acme }\n')
    const answer = await queued
    expect(answer.status).toBe(401)
    expect(await answer.json()).toMatchObject({ code: 'Unauthorized', detail: 'the token was revoked while the request ran' })
    await holder.body?.cancel()
  }, 30_000)

  it('ends an archive download whose token it revokes, as it ends calls and streams', async () => {
    const { file, publish } = await secretMount()
    const app = await buildTestApp({ auth: { tokens_file: file } })
    const base = await listening(app)
    // Random bytes do not compress: far more than the socket buffers hold, so the download is still going when the token goes.
    expect((await execAs(app, 'first-token', 'exec_shell', { command: 'head -c 48000000 /dev/urandom > big' }, 'large')).status).toBe(200)
    const download = await fetch(`${base}/v1/workspaces/large/archive`, { headers: { authorization: 'Bearer first-token' } })
    expect(download.status).toBe(200)
    const reader = (download.body as ReadableStream<Uint8Array>).getReader()
    let received = (await reader.read()).value?.length ?? 0
    await publish('..v2', '- { token: second-token, tenant: acme }\n')
    await vi.waitFor(async () => { expect(await statusWith(app, 'first-token')).toBe(401) }, { timeout: 5000, interval: 100 })
    // Read on slowly: the stream is cut (an error, not its end) long before the 48 MB.
    const outcome = await (async () => {
      for (;;) {
        const chunk = await reader.read()
        if (chunk.done) return 'complete'
        received += chunk.value.length
        await new Promise((resolve) => setTimeout(resolve, 1))
      }
    })().catch(() => 'cut')
    expect(outcome).toBe('cut')
    expect(received).toBeLessThan(48_000_000)
  }, 30_000)

  it('means auth is on even while it holds no token: every call is 401 until one is added', async () => {
    const { file, publish } = await secretMount()
    await publish('..empty', '[]\n')
    const app = await buildTestApp({ auth: { tokens_file: file } })
    expect((await app.inject({ url: '/v1/tools', headers: { host: '127.0.0.1' } })).statusCode).toBe(401)
    expect(await statusWith(app, 'first-token')).toBe(401)
    await publish('..again', '- { token: first-token, tenant: acme }\n')
    await vi.waitFor(async () => { expect(await statusWith(app, 'first-token')).toBe(200) }, { timeout: 5000, interval: 100 })
  })
})
