/**
 * Processes over a real socket: the REST resources (cursor paging, long-poll,
 * Server-Sent Events read by undici's EventSource with a resume, stdin, kill
 * of trees, timeout, overflow, limits, tenants and scopes) and the process
 * tools through execute, a batch and the MCP SDK client.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { execFileSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { readdir } from 'node:fs/promises'
import path from 'node:path'
import { EventSource } from 'undici'
import { describe, expect, it } from 'vitest'
import { buildTestApp, onCleanup, tempDir } from '../helper.ts'
import { eventually } from '../sources/helpers.ts'
import { alive, processesWith, survivorsWith, uniqueSleepSeconds } from '../support/processes.ts'

type Json = Record<string, any>

async function server (overrides: Record<string, unknown> = {}) {
  const app = await buildTestApp({ tools: { builtin: ['*'], processes: { max_per_workspace: 3, max_output_bytes: 4096, keep_ended: 4 } }, ...overrides })
  await app.listen({ host: '127.0.0.1', port: 0 })
  const address = app.server.address()
  if (address === null || typeof address === 'string') throw new Error('not listening')
  const base = `http://127.0.0.1:${address.port}`
  const call = async (method: string, path: string, body?: unknown, token?: string): Promise<{ status: number, body: Json }> => {
    const headers: Record<string, string> = body === undefined ? {} : { 'content-type': 'application/json' }
    if (token) headers['authorization'] = `Bearer ${token}`
    const response = await fetch(base + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) })
    const text = await response.text()
    return { status: response.status, body: (text === '' ? {} : JSON.parse(text)) as Json }
  }
  return { app, base, call }
}

type Server = Awaited<ReturnType<typeof server>>

const procs = (ws: string) => `/v1/workspaces/${ws}/processes`

/**
 * Holds every call of `target[method]` until `release()`: `entered` resolves when the first one
 * arrives; `restore()` puts the method back.
 */
function holdCalls<T extends object, K extends keyof T> (target: T, method: K): { entered: Promise<void>, release: () => void, restore: () => void } {
  const original = target[method] as (...args: unknown[]) => Promise<unknown>
  let arrived!: () => void
  const entered = new Promise<void>((resolve) => { arrived = resolve })
  let release!: () => void
  const gate = new Promise<void>((resolve) => { release = resolve })
  target[method] = (async (...args: unknown[]) => { arrived(); await gate; return original.apply(target, args) }) as T[K]
  return { entered, release, restore: () => { target[method] = original as T[K] } }
}

async function start (s: Server, ws: string, command: string, extra: Json = {}, token?: string): Promise<Json> {
  const started = await s.call('POST', procs(ws), { command, ...extra }, token)
  expect(started.status, JSON.stringify(started.body)).toBe(201)
  return started.body
}

async function ended (s: Server, ws: string, id: string): Promise<Json> {
  for (;;) {
    const got = await s.call('GET', `${procs(ws)}/${id}/output?after=999999999&wait_ms=5000`)
    if (got.body['process'].state !== 'running') return got.body['process']
  }
}

describe('processes over REST', () => {
  it('pages output with a cursor and reassembles it exactly, multi-byte characters included', async () => {
    const s = await server()
    const p = await start(s, 'w', "for i in $(seq 1 200); do printf '%s€é\\n' $i; printf 'e%s😀\\n' $i >&2; done")
    const end = await ended(s, 'w', p.id)
    expect(end).toMatchObject({ state: 'exited', exit_code: 0 })
    let cursor = 0
    let stdout = ''
    let stderr = ''
    while (cursor < end.next) {
      const page = await s.call('GET', `${procs('w')}/${p.id}/output?after=${cursor}&max_bytes=7`)
      for (const chunk of page.body['chunks']) {
        expect(chunk.data).not.toContain('\uFFFD')
        if (chunk.stream === 'stdout') stdout += chunk.data
        else stderr += chunk.data
      }
      expect(page.body['next']).toBeGreaterThan(cursor)
      cursor = page.body['next']
    }
    expect(stdout).toBe(Array.from({ length: 200 }, (_, i) => `${i + 1}€é\n`).join(''))
    expect(stderr).toBe(Array.from({ length: 200 }, (_, i) => `e${i + 1}😀\n`).join(''))
    expect(Buffer.byteLength(stdout + stderr)).toBe(end.next)
  })

  it('long-poll answers as soon as output arrives, not at wait_ms', async () => {
    const s = await server()
    const p = await start(s, 'w', `sleep 1; echo late; sleep ${uniqueSleepSeconds()}`)
    const asked = Date.now()
    const got = await s.call('GET', `${procs('w')}/${p.id}/output?after=0&wait_ms=20000`)
    expect(got.body['chunks']).toEqual([{ stream: 'stdout', offset: 0, data: 'late\n' }])
    expect(Date.now() - asked).toBeLessThan(10_000)
  })

  it('streams Server-Sent Events to undici\'s EventSource, which resumes from Last-Event-ID', async () => {
    const s = await server()
    const p = await start(s, 'w', 'echo one; sleep 0.5; echo two >&2; sleep 0.5; echo three; exit 2')
    const seen: Array<{ type: string, id: string, data: string }> = []
    const end = await new Promise<Json>((resolve, reject) => {
      const source = new EventSource(`${s.base}${procs('w')}/${p.id}/output`)
      onCleanup(async () => { source.close() })
      let dropped = false
      const onChunk = (event: Event) => {
        const message = event as MessageEvent
        seen.push({ type: message.type, id: message.lastEventId, data: JSON.parse(message.data) })
        // Drop the connection after the first event: EventSource reconnects with Last-Event-ID.
        if (!dropped) {
          dropped = true
          s.app.server.closeAllConnections()
        }
      }
      source.addEventListener('stdout', onChunk)
      source.addEventListener('stderr', onChunk)
      source.addEventListener('end', (event) => { source.close(); resolve(JSON.parse((event as MessageEvent).data)) })
      setTimeout(() => reject(new Error(`no end event; saw ${JSON.stringify(seen)}`)), 10_000).unref()
    })
    expect(seen.map((e) => [e.type, e.data, e.id])).toEqual([['stdout', 'one\n', '4'], ['stderr', 'two\n', '8'], ['stdout', 'three\n', '14']])
    expect(end).toMatchObject({ id: p.id, state: 'exited', exit_code: 2, next: 14 })
  })

  it('takes a Last-Event-ID only as the query takes a cursor (digits), else starts from after', async () => {
    const s = await server()
    const p = await start(s, 'w', 'printf abcdef')
    await s.call('GET', `${procs('w')}/${p.id}?wait_ms=5000`)
    const streamed = async (lastEventId: string, query = ''): Promise<string> => {
      const text = await fetch(`${s.base}${procs('w')}/${p.id}/output${query}`, { headers: { accept: 'text/event-stream', 'last-event-id': lastEventId } }).then((response) => response.text())
      return [...text.matchAll(/^event: stdout\nid: \d+\ndata: (.*)$/gm)].map((match) => JSON.parse(match[1] as string) as string).join('')
    }
    expect(await streamed('3')).toBe('def')
    for (const odd of ['0x3', '3.0', '3e0', '-3', '+3', '99999999999999999999']) {
      expect(await streamed(odd), odd).toBe('abcdef')
      expect(await streamed(odd, '?after=2'), odd).toBe('cdef')
    }
  })

  it('starts an event stream asked for a cursor past the output at that cursor, never before it', async () => {
    const s = await server()
    const p = await start(s, 'w', 'sleep 0.5; printf abcdef; sleep 0.5; printf ghij')
    const text = await fetch(`${s.base}${procs('w')}/${p.id}/output`, { headers: { accept: 'text/event-stream', 'last-event-id': '3' } }).then((response) => response.text())
    const chunks = [...text.matchAll(/^event: stdout\nid: (\d+)\ndata: (.*)$/gm)].map((match) => [Number(match[1]), JSON.parse(match[2] as string)])
    expect(chunks.map(([, data]) => data).join('')).toBe('defghij')
    expect(chunks.at(-1)?.[0]).toBe(10)
    // The long-poll and the stream keep such a cursor alike: `next` only grows.
    const later = await start(s, 'w', 'sleep 0.3; printf 0123456789; sleep 0.3; printf abcdefghij')
    const first = await s.call('GET', `${procs('w')}/${later.id}/output?after=15&wait_ms=5000`)
    expect(first.body['next']).toBeGreaterThanOrEqual(15)
    expect(first.body['chunks'].map((c: Json) => c.data).join('')).toBe(first.body['next'] > 15 ? 'fghij'.slice(0, first.body['next'] - 15) : '')
  })

  it('sends no keep-alive for output before a cursor asked for past it', async () => {
    const s = await server()
    const p = await start(s, 'w', 'i=0; while [ $i -lt 50 ]; do echo x; sleep 0.01; i=$((i+1)); done')
    const text = await fetch(`${s.base}${procs('w')}/${p.id}/output?after=100000000`, { headers: { accept: 'text/event-stream' } }).then((response) => response.text())
    expect(text).toMatch(/event: end\n/)
    expect(text).not.toContain('keep-alive')
  })

  it('takes kill, input and a workspace creation with no body at all (curl -X POST), as with an empty JSON one', async () => {
    const s = await server()
    const p = await start(s, 'w', `sleep ${uniqueSleepSeconds()}`, { stdin: true })
    const bare = (path: string) => fetch(s.base + path, { method: 'POST' }).then(async (response) => ({ status: response.status, body: await response.json() as Json }))
    expect((await bare(`${procs('w')}/${p.id}/input`)).body).toMatchObject({ id: p.id, state: 'running' })
    expect((await bare(`${procs('w')}/${p.id}/kill`)).body).toMatchObject({ id: p.id, state: 'killed', signal: 'TERM' })
    expect((await bare('/v1/workspaces')).status).toBe(201)
    // A body that is there must still be JSON.
    const text = await fetch(s.base + '/v1/workspaces', { method: 'POST', body: 'id=x', headers: { 'content-type': 'text/plain' } })
    expect(text.status).toBeGreaterThanOrEqual(400)
    expect(text.status).toBeLessThan(500)
  })

  it('stops the processes when the service drains: a stream gets its end event and a long-poll its answer', async () => {
    const s = await server()
    const p = await start(s, 'w', `sleep ${uniqueSleepSeconds()}`)
    const stream = fetch(`${s.base}${procs('w')}/${p.id}/output`, { headers: { accept: 'text/event-stream' } }).then((response) => response.text())
    const poll = s.call('GET', `${procs('w')}/${p.id}/output?after=999999&wait_ms=30000`)
    // Both have reached the server (nothing else is under way) before it drains.
    expect(await eventually(() => s.app.runtime.activeRequests === 2)).toBe(true)
    const drained = s.app.runtime.drain(60_000)
    const ended = (await poll).body['process']
    expect(ended).toMatchObject({ id: p.id, state: 'killed', signal: 'TERM' })
    expect(await stream).toMatch(/event: end\ndata: .*"state":"killed"/)
    // Nothing else is under way, so the drain is over once they have their answers.
    await drained
    expect(s.app.runtime.activeRequests).toBe(0)
    expect((await s.call('POST', procs('w'), { command: 'true' })).body).toMatchObject({ code: 'Overloaded' })
  })

  it('keeps an expired workspace that a process start renews while the sweep waits for its turn', async () => {
    const s = await server()
    expect((await s.call('POST', '/v1/workspaces', { id: 'old', ttl_seconds: 1 })).status).toBe(201)
    await new Promise((resolve) => setTimeout(resolve, 1200))
    const store = s.app.runtime.workspaces
    const held = holdCalls(store, 'acquire')
    const mark = uniqueSleepSeconds()
    const starting = s.call('POST', procs('old'), { command: `sleep ${mark}` })
    await held.entered
    const sweeping = store.sweep()
    held.release()
    const started = await starting
    expect(started.status, JSON.stringify(started.body)).toBe(201)
    expect(await sweeping).toBe(0)
    expect((await s.call('GET', `${procs('old')}/${started.body['id']}`)).body).toMatchObject({ state: 'running' })
    expect(await survivorsWith(`sleep ${mark}`, 0)).toHaveLength(1)
    held.restore()
  })

  it('starts nothing once the service has begun stopping, also a start that was preparing then (503)', async () => {
    const s = await server()
    const held = holdCalls(s.app.runtime.runner, 'prepare')
    const mark = uniqueSleepSeconds()
    const starting = s.call('POST', procs('w'), { command: `sleep ${mark}` })
    await held.entered
    const stopping = s.app.runtime.processes.stopAll('KILL')
    held.release()
    expect((await starting).body).toMatchObject({ status: 503, code: 'Overloaded' })
    await stopping
    expect(await survivorsWith(`sleep ${mark}`, 1000)).toEqual([])
    held.restore()
  })

  it('runs nothing in a workspace another instance deleted and made again while the start was prepared (404)', async () => {
    const s = await server()
    expect((await s.call('POST', '/v1/workspaces', { id: 'raced' })).status).toBe(201)
    const held = holdCalls(s.app.runtime.runner, 'prepare')
    const mark = uniqueSleepSeconds()
    const starting = s.call('POST', procs('raced'), { command: `echo old > from-old.txt; sleep ${mark}` })
    await held.entered
    // Another instance on the same root (a second pod on the volume, a process of its own) deletes it and makes it again.
    const script = `
      import { pino } from 'pino'
      import { WorkspaceStore } from ${JSON.stringify(new URL('../../src/workspaces/store.ts', import.meta.url).pathname)}
      const store = new WorkspaceStore({ root: ${JSON.stringify(s.app.runtime.workspaces.root)}, ephemeralRoot: ${JSON.stringify(path.join(await tempDir('toolport-pod-'), 'ephemeral'))}, ttlSeconds: 3600, sweepIntervalSeconds: 3600, log: pino({ level: 'silent' }) })
      await store.init()
      await store.delete('default', 'raced')
      console.log((await store.create('default', { id: 'raced' })).dir)
      await store.close()
    `
    const remadeDir = execFileSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', cwd: new URL('../..', import.meta.url).pathname }).trim()
    held.release()
    expect((await starting).body).toMatchObject({ status: 404, code: 'NotFound' })
    expect(await survivorsWith(`sleep ${mark}`, 1000)).toEqual([])
    expect(await readdir(remadeDir)).toEqual([])
    held.restore()
  })

  it('sends an event stream\'s status and headers at once, before a quiet process writes anything', async () => {
    const s = await server()
    const quiet = await start(s, 'w', `sleep ${uniqueSleepSeconds()}`)
    const abort = new AbortController()
    onCleanup(async () => { abort.abort() })
    const response = await fetch(`${s.base}${procs('w')}/${quiet.id}/output`, { headers: { accept: 'text/event-stream' }, signal: AbortSignal.any([abort.signal, AbortSignal.timeout(3000)]) })
    expect(response.status).toBe(200)
    expect(response.headers.get('content-type')).toMatch(/^text\/event-stream/)
    abort.abort()
  })

  it('feeds stdin to cat and closes it; input is 409 without stdin, after eof and after the end', async () => {
    const s = await server()
    const cat = await start(s, 'w', 'cat', { stdin: true })
    expect((await s.call('POST', `${procs('w')}/${cat.id}/input`, { data: 'hello ✓\n' })).status).toBe(200)
    const echoed = await s.call('GET', `${procs('w')}/${cat.id}/output?after=0&wait_ms=5000`)
    expect(echoed.body['chunks'].map((c: Json) => c.data).join('')).toBe('hello ✓\n')
    expect((await s.call('POST', `${procs('w')}/${cat.id}/input`, { eof: true })).status).toBe(200)
    expect(await ended(s, 'w', cat.id)).toMatchObject({ state: 'exited', exit_code: 0 })
    expect((await s.call('POST', `${procs('w')}/${cat.id}/input`, { data: 'x' })).body).toMatchObject({ code: 'Conflict' })
    const closed = await start(s, 'w', `sleep ${uniqueSleepSeconds()}`, { stdin: true })
    await s.call('POST', `${procs('w')}/${closed.id}/input`, { eof: true })
    expect((await s.call('POST', `${procs('w')}/${closed.id}/input`, { data: 'x' })).status).toBe(409)
    const none = await start(s, 'w', `sleep ${uniqueSleepSeconds()}`)
    expect((await s.call('POST', `${procs('w')}/${none.id}/input`, { data: 'x' })).status).toBe(409)
  })

  it('keeps what a command has not read of its input bounded: past 1 MiB waiting, input is 409 until it reads', async () => {
    const s = await server()
    const chunk = 'x'.repeat(600 * 1024)
    const send = async (id: string) => (await s.call('POST', `${procs('w')}/${id}/input`, { data: chunk })).status
    // sleep never reads: the pipe takes what it holds, the rest waits in the service.
    const deaf = await start(s, 'w', `sleep ${uniqueSleepSeconds()}`, { stdin: true })
    expect([await send(deaf.id), await send(deaf.id)]).toEqual([200, 200])
    const refused = await s.call('POST', `${procs('w')}/${deaf.id}/input`, { data: chunk })
    expect(refused.status).toBe(409)
    expect(refused.body).toMatchObject({ code: 'Conflict', detail: expect.stringContaining('not read') })
    // A command that reads takes as much as it is sent.
    const reader = await start(s, 'w', 'wc -c', { stdin: true })
    for (let i = 0; i < 8; i++) {
      let status = await send(reader.id)
      while (status === 409) {
        await new Promise((resolve) => setTimeout(resolve, 20))
        status = await send(reader.id)
      }
      expect(status).toBe(200)
    }
    await s.call('POST', `${procs('w')}/${reader.id}/input`, { eof: true })
    await ended(s, 'w', reader.id)
    const counted = await s.call('GET', `${procs('w')}/${reader.id}/output?after=0`)
    expect(counted.body['chunks'].map((c: Json) => c.data).join('').trim()).toBe(String(8 * chunk.length))
  })

  for (const mode of ['none', 'bwrap'] as const) {
    it(`kill (sandbox ${mode}): a TERM-trapping command gets KILL after 2 s, and a setsid grandchild goes too`, async () => {
      const s = await server({ sandbox: { mode } })
      const mark = uniqueSleepSeconds()
      const p = await start(s, 'w', `trap '' TERM; setsid sleep ${mark} & sleep ${mark}`)
      let pids: number[] = []
      for (let i = 0; i < 100 && pids.length < 2; i++) {
        pids = processesWith(mark).filter((pid) => { try { return readFileSync(`/proc/${pid}/comm`, 'utf8').trim() === 'sleep' } catch { return false } })
        await new Promise((resolve) => setTimeout(resolve, 50))
      }
      expect(pids.length).toBe(2)
      const asked = Date.now()
      const killed = await s.call('POST', `${procs('w')}/${p.id}/kill`, {})
      expect(Date.now() - asked).toBeGreaterThanOrEqual(1500)
      expect(killed.body).toMatchObject({ state: 'killed', signal: 'KILL', exit_code: null })
      expect(await survivorsWith(mark)).toEqual([])
      for (const pid of pids) expect(await alive(pid)).toBe(false)
    })
  }

  it('kills at once on a KILL asked for while an earlier TERM\'s grace runs, not at the grace\'s end', async () => {
    const s = await server()
    const mark = uniqueSleepSeconds()
    // A TERM handler that takes a second, then says so: a KILL at once leaves it no time to.
    const p = await start(s, 'w', `trap 'sleep 1; echo handled' TERM; echo ready; sleep ${mark} & wait; sleep ${mark}`)
    expect((await s.call('GET', `${procs('w')}/${p.id}/output?after=0&wait_ms=5000`)).body['chunks'][0].data).toBe('ready\n')
    const term = s.call('POST', `${procs('w')}/${p.id}/kill`, { signal: 'TERM' })
    await new Promise((resolve) => setTimeout(resolve, 100))
    const killed = await s.call('POST', `${procs('w')}/${p.id}/kill`, { signal: 'KILL' })
    expect(killed.body).toMatchObject({ state: 'killed' })
    expect((await term).body).toMatchObject({ state: 'killed' })
    const output = await s.call('GET', `${procs('w')}/${p.id}/output?after=0`)
    expect(output.body['chunks'].map((chunk: Json) => chunk.data).join('')).toBe('ready\n')
    expect(await survivorsWith(mark)).toEqual([])
  })

  it('times out (timed_out, never exited 0), and keeps the last bytes of a flood with dropped_bytes', async () => {
    const s = await server()
    const slow = await start(s, 'w', `trap 'exit 0' TERM; sleep ${uniqueSleepSeconds()} & wait`, { timeout: 1 })
    expect(await ended(s, 'w', slow.id)).toMatchObject({ state: 'timed_out', exit_code: null })
    const flood = await start(s, 'w', 'seq 1 20000')
    const end = await ended(s, 'w', flood.id)
    const all = Array.from({ length: 20000 }, (_, i) => `${i + 1}\n`).join('')
    expect(end.next).toBe(all.length)
    const first = await s.call('GET', `${procs('w')}/${flood.id}/output?after=0`)
    expect(first.body['dropped_bytes']).toBe(all.length - 4096)
    expect(first.body['chunks'].map((c: Json) => c.data).join('')).toBe(all.slice(-4096))
  })

  it('keeps at most four workspaces\' fill of ended output over all of them: past it, the oldest ended processes go first', async () => {
    // Each ended process here holds 1 KiB: four workspaces' fill is 4 × 2 × 1 KiB, eight of them.
    const s = await server({ tools: { builtin: ['*'], processes: { max_output_bytes: 1024, keep_ended: 2 } } })
    const ids: Array<[string, string]> = []
    for (let w = 0; w < 5; w++) {
      for (let n = 0; n < 2; n++) {
        const { id } = await start(s, `fill${w}`, 'echo out')
        await ended(s, `fill${w}`, id as string)
        ids.push([`fill${w}`, id as string])
      }
    }
    // The oldest went as the last end was seen: no wait.
    const statuses = await Promise.all(ids.map(async ([ws, id]) => (await s.call('GET', `${procs(ws)}/${id}`)).status))
    expect(statuses).toEqual([404, 404, 200, 200, 200, 200, 200, 200, 200, 200])
    expect((await s.call('GET', procs('fill0'))).body['processes']).toEqual([])
  })

  it('keeps the keep_ended that ended last: a long command that ends after quick ones stays, the first quick one goes', async () => {
    const s = await server()
    const long = await start(s, 'build', 'cat; echo built', { stdin: true })
    const quick: string[] = []
    for (let n = 0; n < 4; n++) {
      const { id } = await start(s, 'build', `echo quick${n}`)
      await ended(s, 'build', id as string)
      quick.push(id as string)
    }
    expect((await s.call('POST', `${procs('build')}/${long['id']}/input`, { eof: true })).status).toBe(200)
    expect((await ended(s, 'build', long['id'] as string)).state).toBe('exited')
    // Listed as soon as its end is seen, the one that ended first is already gone.
    const listed = (await s.call('GET', procs('build'))).body['processes'].map((each: Json) => each['id'])
    expect(listed).toEqual([long['id'], ...quick.slice(1)])
    const kept = await s.call('GET', `${procs('build')}/${long['id']}/output`)
    expect(kept.body['chunks'].map((c: Json) => c.data).join('')).toBe('built\n')
    expect((await s.call('GET', `${procs('build')}/${quick[0]}`)).status).toBe(404)
  })

  it('refuses a denylisted command and more than max_per_workspace running (403)', async () => {
    const s = await server({ tools: { builtin: ['*'], exec_shell: { denylist: ['forbid-me'] }, processes: { max_per_workspace: 2 } } })
    expect((await s.call('POST', procs('w'), { command: 'echo FORBID-ME' })).body).toMatchObject({ code: 'PermissionDenied' })
    const mark = uniqueSleepSeconds()
    await start(s, 'w', `sleep ${mark}`)
    await start(s, 'w', `sleep ${mark}`)
    expect((await s.call('POST', procs('w'), { command: `sleep ${mark}` })).body).toMatchObject({ code: 'PermissionDenied' })
    await start(s, 'other', `sleep ${mark}`)
    expect((await s.call('DELETE', '/v1/workspaces/w')).status).toBe(204)
    expect(await survivorsWith(`sleep ${mark}`, 3000)).toHaveLength(1)
  })

  for (const held of ['holding its workspace', 'preparing its sandbox'] as const) {
    it(`takes turns with a removal of the workspace while a process start is ${held}: no process outlives the workspace`, async () => {
      const s = await server()
      expect((await s.call('POST', '/v1/workspaces', { id: 'doomed' })).status).toBe(201)
      // The start is held at that step while the removal is asked for.
      const hold = held === 'holding its workspace' ? holdCalls(s.app.runtime.workspaces, 'acquire') : holdCalls(s.app.runtime.runner, 'prepare')
      const mark = uniqueSleepSeconds()
      const starting = s.call('POST', procs('doomed'), { command: `sleep ${mark}` })
      await hold.entered
      const deleting = s.call('DELETE', '/v1/workspaces/doomed')
      await new Promise((resolve) => setTimeout(resolve, 100))
      hold.release()
      const [started, deleted] = await Promise.all([starting, deleting])
      // The start came first; the removal, after it, killed its process.
      expect(started.status, JSON.stringify(started.body)).toBe(201)
      expect(deleted.status).toBe(204)
      expect(await survivorsWith(`sleep ${mark}`, 3000)).toEqual([])
      hold.restore()
      // The id made again is a new workspace: none of the old one's processes, and room for its own.
      expect((await s.call('POST', '/v1/workspaces', { id: 'doomed' })).status).toBe(201)
      expect((await s.call('GET', procs('doomed'))).body).toMatchObject({ processes: [] })
      await start(s, 'doomed', `sleep ${mark}`)
      expect((await s.call('DELETE', '/v1/workspaces/doomed')).status).toBe(204)
      expect(await survivorsWith(`sleep ${mark}`, 3000)).toEqual([])
    })
  }

  it('keeps tenants apart, counts each endpoint as its tool, and is 404 when the tools are off', async () => {
    const s = await server({
      auth: {
        tokens: [
          { token: 'acme', tenant: 'acme', allowed_tools: ['*'] },
          { token: 'nokill', tenant: 'acme', allowed_tools: ['process_start', 'process_output'] },
          { token: 'beta', tenant: 'beta', allowed_tools: ['*'] },
        ],
      },
    })
    const p = await start(s, 'w', `sleep ${uniqueSleepSeconds()}`, {}, 'acme')
    expect((await s.call('GET', `${procs('w')}/${p.id}`, undefined, 'beta')).status).toBe(404)
    expect((await s.call('POST', `${procs('w')}/${p.id}/kill`, {}, 'beta')).status).toBe(404)
    expect((await s.call('POST', `${procs('w')}/${p.id}/kill`, {}, 'nokill')).body).toMatchObject({ code: 'PermissionDenied' })
    expect((await s.call('GET', procs('w'), undefined, 'nokill')).status).toBe(403)
    expect((await s.call('GET', `${procs('w')}/${p.id}`, undefined, 'nokill')).body).toMatchObject({ state: 'running' })
    const off = await server({ tools: {} })
    expect((await off.call('POST', procs('w'), { command: 'true' })).body).toMatchObject({ code: 'NotFound' })
    expect((await off.call('GET', '/v1/tools')).body['tools'].map((t: Json) => t.name)).not.toContain('process_start')
  })
})

describe('process tools', () => {
  it('run through execute and a batch, continuing where the last output stopped; an ephemeral workspace is 400', async () => {
    const s = await server()
    const exec = (name: string, args: Json, workspace?: string) => s.call('POST', `/v1/tools/${name}/execute`, { arguments: args, workspace })
    expect((await exec('process_start', { command: 'true' })).body).toMatchObject({ code: 'InvalidArgs' })
    const started = (await exec('process_start', { command: `echo first; sleep 1; echo second; sleep ${uniqueSleepSeconds()}`, yield_ms: 300 }, 'w')).body['result']
    expect(started).toMatchObject({ state: 'running', exit_code: null, output: 'first\n', next: 6 })
    const batch = await s.call('POST', '/v1/tool-calls', {
      workspace: 'w',
      calls: [
        { id: 'a', name: 'process_output', arguments: { process_id: started.process_id, wait_ms: 5000 } },
        { id: 'b', name: 'process_kill', arguments: { process_id: started.process_id } },
        { id: 'c', name: 'process_list', arguments: {} },
      ],
    })
    const [output, kill, list] = batch.body['results'].map((r: Json) => r.result)
    expect(output).toMatchObject({ output: 'second\n', next: 13, state: 'running', dropped_bytes: 0 })
    expect(kill).toMatchObject({ state: 'killed', output: '', next: 13 })
    expect(list.processes).toEqual([expect.objectContaining({ process_id: started.process_id, state: 'killed', exit_code: null })])
  })

  it('answer output that is not UTF-8 within the result limit and the REST max_bytes (each such byte is three as U+FFFD)', async () => {
    const s = await server({ tools: { builtin: ['*'], processes: { max_output_bytes: 65_536 } }, limits: { max_result_bytes: 65_536 } })
    const exec = (name: string, args: Json) => s.call('POST', `/v1/tools/${name}/execute`, { arguments: args, workspace: 'bytes' })
    const started = (await exec('process_start', { command: 'head -c 60000 /dev/zero | tr "\\000" "\\377"', yield_ms: 5000 })).body['result']
    expect(started.state).toBe('exited')
    const output = await exec('process_output', { process_id: started.process_id, after: 0 })
    expect(output.status).toBe(200)
    expect(Buffer.byteLength(JSON.stringify(output.body['result']))).toBeLessThanOrEqual(65_536)
    expect(output.body['result'].output).toMatch(/^\uFFFD{1000,}$/)
    expect(output.body['truncated']).toBe(true)
    const page = await s.call('GET', `${procs('bytes')}/${started.process_id}/output?after=0&max_bytes=10`)
    expect(page.body['chunks'].map((c: Json) => c.data).join('')).toBe('\uFFFD'.repeat(3))
    expect(page.body['next']).toBe(3)
  })

  it('keep their default cursor where the last output returned ended: a cursor asked for past the end moves it nowhere', async () => {
    const s = await server()
    const exec = (name: string, args: Json) => s.call('POST', `/v1/tools/${name}/execute`, { arguments: args, workspace: 'cursor' })
    const started = (await exec('process_start', { command: `echo first; sleep 0.5; echo second; sleep ${uniqueSleepSeconds()}`, yield_ms: 200 })).body['result']
    expect(started).toMatchObject({ output: 'first\n', next: 6 })
    expect((await exec('process_output', { process_id: started.process_id, after: 40 })).body['result']).toMatchObject({ output: '', next: 40 })
    expect((await exec('process_output', { process_id: started.process_id, wait_ms: 5000 })).body['result']).toMatchObject({ output: 'second\n', next: 13 })
    expect((await exec('process_output', { process_id: started.process_id, after: 2 ** 60 })).status).toBe(400)
    expect((await exec('process_kill', { process_id: started.process_id })).body['result']).toMatchObject({ state: 'killed', output: '', next: 13 })
  })

  it('run on /mcp in the session\'s workspace, through the MCP SDK client, and end with the session', async () => {
    const s = await server()
    const client = new Client({ name: 'toolport-test', version: '1.0.0' })
    const transport = new StreamableHTTPClientTransport(new URL(`${s.base}/mcp`))
    await client.connect(transport)
    const mark = uniqueSleepSeconds()
    const started = await client.callTool({ name: 'process_start', arguments: { command: `read line; echo "got $line"; sleep ${mark}`, stdin: true, yield_ms: 0 } })
    expect(started.isError).toBeFalsy()
    const id = (started.structuredContent as Json)['process_id']
    const answered = await client.callTool({ name: 'process_input', arguments: { process_id: id, input: 'ping\n', wait_ms: 5000 } })
    expect(answered.structuredContent).toMatchObject({ output: 'got ping\n', state: 'running' })
    expect(processesWith(mark).length).toBeGreaterThan(0)
    await transport.terminateSession()
    await client.close()
    expect(await survivorsWith(mark)).toEqual([])
  })
})
