/**
 * MCP sessions are bounded: per tenant at most `server.max_mcp_sessions`
 * (the least recently used goes), and a session unused for
 * `server.mcp_session_idle_seconds` ends; an ended session's workspace goes
 * with it. Requests whose params don't fit their method answer -32602 with a
 * short message. Everything over a real socket, with raw JSON-RPC over fetch.
 */
import { readFile } from 'node:fs/promises'
import path from 'node:path'
import v8 from 'node:v8'
import vm from 'node:vm'
import { describe, expect, it } from 'vitest'
import { buildTestApp } from '../helper.ts'
import { listening } from '../support/listening.ts'
import { eventually } from '../sources/helpers.ts'
import { workspacesIn } from '../support/ephemeral.ts'

type App = Awaited<ReturnType<typeof buildTestApp>>

interface RpcAnswer { status: number, body: { result?: Record<string, unknown>, error?: { code: number, message: string } } | undefined }

const ACCEPT = 'application/json, text/event-stream'

function headersFor (token: string | undefined, sessionId?: string): Record<string, string> {
  return {
    'content-type': 'application/json',
    accept: ACCEPT,
    ...(token ? { authorization: `Bearer ${token}` } : {}),
    ...(sessionId ? { 'mcp-session-id': sessionId, 'mcp-protocol-version': '2025-06-18' } : {}),
  }
}

/** The JSON-RPC message of an answer, whether it came as JSON or as one SSE event. */
async function answerOf (response: Response): Promise<RpcAnswer> {
  const text = await response.text()
  const data = text.split('\n').find((line) => line.startsWith('data: '))
  const json = data !== undefined ? data.slice('data: '.length) : text
  return { status: response.status, body: json.startsWith('{') ? JSON.parse(json) : undefined }
}

/** Opens a session with a raw initialize request; resolves to its id. */
async function initialize (base: string, token?: string): Promise<string> {
  const response = await fetch(`${base}/mcp`, {
    method: 'POST',
    headers: headersFor(token),
    body: JSON.stringify({ jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'test', version: '1' } } }),
  })
  const sessionId = response.headers.get('mcp-session-id')
  const answer = await answerOf(response)
  if (sessionId === null || answer.body?.result === undefined) throw new Error(`initialize failed: ${answer.status}`)
  return sessionId
}

let nextId = 1
async function rpc (base: string, sessionId: string, method: string, params?: unknown, token?: string): Promise<RpcAnswer> {
  const response = await fetch(`${base}/mcp`, {
    method: 'POST',
    headers: headersFor(token, sessionId),
    body: JSON.stringify({ jsonrpc: '2.0', id: nextId++, method, ...(params === undefined ? {} : { params }) }),
  })
  return answerOf(response)
}

const alive = async (base: string, sessionId: string, token?: string): Promise<boolean> =>
  (await rpc(base, sessionId, 'ping', undefined, token)).status === 200

/** Writes `name.txt` holding `name` into the session's workspace. */
async function writeMark (base: string, sessionId: string, name: string, token?: string): Promise<void> {
  const answer = await rpc(base, sessionId, 'tools/call', { name: 'write_file', arguments: { path: 'mark.txt', content: name } }, token)
  expect(answer.body?.result?.['isError']).toBeFalsy()
}

/** The marks found in the ephemeral workspaces on disk, sorted. */
async function marksOnDisk (app: App): Promise<string[]> {
  const root = path.join(app.runtime.workspaces.root, 'ephemeral')
  const dirs = await workspacesIn(root).catch(() => [])
  const marks = await Promise.all(dirs.map(async (dir) => readFile(path.join(root, dir, 'mark.txt'), 'utf8').catch(() => '?')))
  return marks.sort()
}

/** The heap in use after a full collection. */
function settledHeap (): number {
  v8.setFlagsFromString('--expose-gc')
  const gc = vm.runInNewContext('gc') as () => void
  gc()
  gc()
  return process.memoryUsage().heapUsed
}

describe('MCP sessions per tenant', () => {
  it('ends the least recently used sessions beyond server.max_mcp_sessions, and their workspaces', async () => {
    const app = await buildTestApp({ server: { max_mcp_sessions: 3 } })
    const base = await listening(app)
    const ids: string[] = []
    for (const name of ['s1', 's2', 's3', 's4', 's5']) {
      const id = await initialize(base)
      await writeMark(base, id, name)
      ids.push(id)
    }
    const [s1, s2, s3, s4, s5] = ids as [string, string, string, string, string]
    expect(await eventually(async () => (await marksOnDisk(app)).join() === 's3,s4,s5')).toBe(true)
    for (const gone of [s1, s2]) {
      const answer = await rpc(base, gone, 'tools/list')
      expect(answer.status).toBe(404)
    }
    for (const kept of [s3, s4, s5]) expect(await alive(base, kept)).toBe(true)
  })

  it('counts a use as recent: the session used last is not the one that goes', async () => {
    const app = await buildTestApp({ server: { max_mcp_sessions: 3 } })
    const base = await listening(app)
    const [first, second, third] = [await initialize(base), await initialize(base), await initialize(base)]
    expect((await rpc(base, first, 'tools/list')).status).toBe(200)
    const fourth = await initialize(base)
    expect(await alive(base, second)).toBe(false)
    for (const kept of [first, third, fourth]) expect(await alive(base, kept)).toBe(true)
  })

  it('counts a session with a call under way as in use: the least recently used of the others goes', async () => {
    const app = await buildTestApp({ server: { max_mcp_sessions: 2 }, tools: { builtin: ['*'] } })
    const base = await listening(app)
    const [busy, idle] = [await initialize(base), await initialize(base)]
    const call = rpc(base, busy, 'tools/call', { name: 'exec_shell', arguments: { command: 'echo busy > mark.txt; sleep 1.5; echo done' } })
    expect(await eventually(async () => (await marksOnDisk(app)).includes('busy\n'))).toBe(true)
    // Used after the call began: by time alone, the busy session would be the one to go.
    expect(await alive(base, idle)).toBe(true)
    const third = await initialize(base)
    const answer = await call
    expect(answer.body?.result?.['isError']).toBeFalsy()
    expect(JSON.stringify(answer.body?.result)).toContain('done')
    expect(await alive(base, idle)).toBe(false)
    for (const kept of [busy, third]) expect(await alive(base, kept)).toBe(true)
  })

  it('gives each tenant its own limit', async () => {
    const app = await buildTestApp({
      server: { max_mcp_sessions: 2 },
      auth: { tokens: [{ token: 'ta', tenant: 'a', allowed_tools: ['*'] }, { token: 'tb', tenant: 'b', allowed_tools: ['*'] }] },
    })
    const base = await listening(app)
    const a1 = await initialize(base, 'ta')
    const a2 = await initialize(base, 'ta')
    const b1 = await initialize(base, 'tb')
    const b2 = await initialize(base, 'tb')
    for (const [id, token] of [[a1, 'ta'], [a2, 'ta'], [b1, 'tb'], [b2, 'tb']] as const) expect(await alive(base, id, token)).toBe(true)
    const a3 = await initialize(base, 'ta')
    expect(await alive(base, a1, 'ta')).toBe(false)
    for (const [id, token] of [[a2, 'ta'], [a3, 'ta'], [b1, 'tb'], [b2, 'tb']] as const) expect(await alive(base, id, token)).toBe(true)
  })

  it('keeps at most the cap alive through thousands of initialize requests, in bounded memory', async () => {
    const app = await buildTestApp({ server: { max_mcp_sessions: 100 } })
    const base = await listening(app)
    await initialize(base)
    const before = settledHeap()
    const ids: string[] = []
    for (let i = 0; i < 2000; i++) {
      // Some initializes the transport refuses (no Accept for SSE): they must leave nothing behind either.
      if (i % 10 === 0) {
        const refused = await fetch(`${base}/mcp`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', accept: 'application/json' },
          body: JSON.stringify({ jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'test', version: '1' } } }),
        })
        expect(refused.status).toBe(406)
        await refused.text()
      }
      ids.push(await initialize(base))
    }
    const grown = settledHeap() - before
    const live: string[] = []
    for (const id of ids) if (await alive(base, id)) live.push(id)
    expect(live).toEqual(ids.slice(-100))
    // A session costs tens of kilobytes: 2,000 of them would be far beyond this.
    expect(grown).toBeLessThan(24 * 1024 * 1024)
  }, 120_000)
})

describe('MCP session idle time', () => {
  it('ends a session unused for server.mcp_session_idle_seconds, and its workspace', async () => {
    const app = await buildTestApp({ server: { mcp_session_idle_seconds: 1 } })
    const base = await listening(app)
    const id = await initialize(base)
    await writeMark(base, id, 'idle')
    expect(await marksOnDisk(app)).toEqual(['idle'])
    expect(await eventually(async () => (await marksOnDisk(app)).length === 0, 10_000)).toBe(true)
    expect((await rpc(base, id, 'tools/list')).status).toBe(404)
  })

  it('keeps a session whose call outlasts the idle time', async () => {
    const app = await buildTestApp({ server: { mcp_session_idle_seconds: 1 }, tools: { builtin: ['*'] } })
    const base = await listening(app)
    const id = await initialize(base)
    const answer = await rpc(base, id, 'tools/call', { name: 'exec_shell', arguments: { command: 'sleep 2.5; echo done' } })
    expect(answer.body?.result?.['isError']).toBeFalsy()
    expect(JSON.stringify(answer.body?.result)).toContain('done')
    expect(await alive(base, id)).toBe(true)
  })

  it('keeps a session that is used more often than that', async () => {
    const app = await buildTestApp({ server: { mcp_session_idle_seconds: 2 } })
    const base = await listening(app)
    const used = await initialize(base)
    const unused = await initialize(base)
    await writeMark(base, used, 'used')
    await writeMark(base, unused, 'unused')
    // Any request would be a use: the unused session is watched on disk, while the other is used.
    expect(await eventually(async () => {
      expect(await alive(base, used)).toBe(true)
      return (await marksOnDisk(app)).join() === 'used'
    }, 15_000)).toBe(true)
    expect((await rpc(base, unused, 'tools/list')).status).toBe(404)
    expect(await alive(base, used)).toBe(true)
  })
})

describe('MCP requests with params that do not fit their method', () => {
  it('answer -32602 Invalid params with a short message, and the session goes on', async () => {
    const app = await buildTestApp()
    const base = await listening(app)
    const id = await initialize(base)
    const cases: Array<[string, unknown]> = [
      ['tools/call', { name: 'read_file', arguments: 'a.txt' }],
      ['tools/call', { name: 'read_file', arguments: 42 }],
      ['tools/call', { name: 42, arguments: {} }],
      ['tools/call', {}],
      ['tools/call', undefined],
      ['tools/list', { cursor: 5 }],
    ]
    for (const [method, params] of cases) {
      const answer = await rpc(base, id, method, params)
      const error = answer.body?.error
      expect(error?.code, `${method} ${JSON.stringify(params)}`).toBe(-32602)
      expect(error?.message).toMatch(new RegExp(`^Invalid params for ${method}: `))
      expect(error?.message.length).toBeLessThan(200)
      expect(error?.message).not.toMatch(/invalid_type|"code"|\[\s*\{|\n/)
    }
    const argumentsError = (await rpc(base, id, 'tools/call', { name: 'read_file', arguments: 'a.txt' })).body?.error?.message
    expect(argumentsError).toMatch(/arguments/)
    expect(argumentsError).toMatch(/object/)
    expect(argumentsError).toMatch(/string/)
    const listed = await rpc(base, id, 'tools/list')
    expect(listed.body?.result?.['tools']).toEqual(expect.arrayContaining([expect.objectContaining({ name: 'read_file' })]))
  })
})
