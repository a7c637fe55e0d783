/**
 * Two real server processes sharing one workspace root, as pods sharing a
 * ReadWriteMany volume: a process started through one is read, written to,
 * followed and killed through the other (forwarded with the caller's own
 * credentials), its tools answer through either, and once its instance is
 * gone (stopped, or restarted without it) it is `lost` everywhere.
 */
import http from 'node:http'
import net from 'node:net'
import { readdir, readFile, stat } from 'node:fs/promises'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { freePort, type RunningServer, startServer, waitReady } from '../support/server-process.ts'
import { setTimeout as sleep } from 'node:timers/promises'
import { alive, processesWith, survivorsWith, uniqueSleepSeconds } from '../support/processes.ts'
import { tempDir } from '../support/temp.ts'
import { WorkspaceLayout } from '../../src/workspaces/meta.ts'

type Json = Record<string, any>

const TOKENS = [{ token: 'token-acme', tenant: 'acme' }, { token: 'token-other', tenant: 'other' }]

interface Instance { server: RunningServer, port: number }

async function instance (root: string, name: string, port?: number, workspaces: Json = {}, advertised?: number, serverConfig: Json = {}): Promise<Instance> {
  const chosen = port ?? await freePort()
  const config = {
    server: serverConfig,
    workspaces: { root, ephemeral_root: path.join(path.dirname(root), `ephemeral-${name}`), ...workspaces },
    auth: { tokens: TOKENS },
    tools: { builtin: ['*'] },
    logging: { level: 'warn' },
  }
  const server = await startServer(config, { PORT: String(chosen), TOOLPORT_ADVERTISE_URL: `http://127.0.0.1:${advertised ?? chosen}` })
  await waitReady(server)
  return { server, port: chosen }
}

async function call (at: Instance, method: string, url: string, body?: unknown, token = 'token-acme', extra: Record<string, string> = {}): Promise<{ status: number, body: Json }> {
  const headers: Record<string, string> = { authorization: `Bearer ${token}`, ...extra }
  if (body !== undefined) headers['content-type'] = 'application/json'
  const response = await fetch(at.server.base + url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), signal: AbortSignal.timeout(20_000) })
  const text = await response.text()
  return { status: response.status, body: (text === '' ? {} : JSON.parse(text)) as Json }
}

/** A TCP relay in front of an instance, as the network between pods: it can be cut and mended at the same port. */
async function linkTo (target: number): Promise<{ port: number, cut: () => Promise<void>, mend: () => Promise<void> }> {
  const sockets = new Set<net.Socket>()
  const server = net.createServer((socket) => {
    const upstream = net.connect(target, '127.0.0.1')
    for (const each of [socket, upstream]) {
      sockets.add(each)
      each.once('close', () => sockets.delete(each))
      each.on('error', () => {})
    }
    socket.pipe(upstream).pipe(socket)
  })
  const port = await freePort()
  const listen = (): Promise<void> => new Promise((resolve) => server.listen(port, '127.0.0.1', resolve))
  await listen()
  return {
    port,
    cut: async () => {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()))
      for (const socket of sockets) socket.destroy()
      await closed
    },
    mend: listen,
  }
}

/** Output through `at` from `after` until `text` has come (or the process ended). */
async function outputUntil (at: Instance, id: string, text: string, after = 0, workspace = 'w1'): Promise<{ data: string, next: number }> {
  let data = ''
  let cursor = after
  for (let round = 0; round < 20 && !data.includes(text); round++) {
    const got = await call(at, 'GET', `/v1/workspaces/${workspace}/processes/${id}/output?after=${cursor}&wait_ms=2000`)
    expect(got.status, JSON.stringify(got.body)).toBe(200)
    data += got.body['chunks'].map((chunk: Json) => chunk['data']).join('')
    cursor = got.body['next']
    if (got.body['process'].state !== 'running') break
  }
  return { data, next: cursor }
}

/** Reads an event stream through `at` until `text` has come; answers what came. */
async function eventsUntil (at: Instance, id: string, text: string): Promise<string> {
  const stop = new AbortController()
  const response = await fetch(`${at.server.base}/v1/workspaces/w1/processes/${id}/output`, {
    headers: { authorization: 'Bearer token-acme', accept: 'text/event-stream' },
    signal: stop.signal,
  })
  expect(response.status).toBe(200)
  expect(response.headers.get('content-type')).toContain('text/event-stream')
  let seen = ''
  const decoder = new TextDecoder()
  for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
    seen += decoder.decode(chunk, { stream: true })
    if (seen.includes(text)) break
  }
  stop.abort()
  return seen
}

describe('processes across instances sharing one root', () => {
  it('answers for a process another instance runs, with the caller\'s credentials, and reports it lost once that instance is gone', async () => {
    const root = path.join(await tempDir('toolport-shared-'), 'root')
    const a = await instance(root, 'a')
    const b = await instance(root, 'b')

    const started = await call(a, 'POST', '/v1/workspaces/w1/processes', { command: 'echo ready; cat', stdin: true })
    expect(started.status).toBe(201)
    const id = started.body['id'] as string

    // Status, output, input and the event stream through the other instance.
    expect(await call(b, 'GET', `/v1/workspaces/w1/processes/${id}`)).toMatchObject({ status: 200, body: { id, state: 'running', command: 'echo ready; cat' } })
    const first = await outputUntil(b, id, 'ready')
    expect(first.data).toBe('ready\n')
    expect(await call(b, 'POST', `/v1/workspaces/w1/processes/${id}/input`, { data: 'through b\n' })).toMatchObject({ status: 200, body: { id, state: 'running' } })
    expect((await outputUntil(b, id, 'through b', first.next)).data).toBe('through b\n')
    const events = await eventsUntil(b, id, 'through b')
    expect(events).toContain('event: stdout')
    expect(events).toMatch(/^data: "ready\\n(through b\\n)?"$/m)
    expect(events).toContain('through b\\n"')

    // The tools too, through execute on the other instance.
    const viaTool = await call(b, 'POST', '/v1/tools/process_output/execute', { arguments: { process_id: id, after: 0 }, workspace: 'w1' })
    expect(viaTool.status, JSON.stringify(viaTool.body)).toBe(200)
    expect(viaTool.body['result']).toMatchObject({ process_id: id, state: 'running', output: 'ready\nthrough b\n' })
    const listed = await call(b, 'POST', '/v1/tools/process_list/execute', { arguments: {}, workspace: 'w1' })
    expect(listed.body['result'].processes).toEqual([expect.objectContaining({ process_id: id, state: 'running' })])

    // Input through a batch on the other instance: the call is answered by the owner, its output with it.
    const batch = await call(b, 'POST', '/v1/tool-calls', { workspace: 'w1', calls: [{ id: 'c1', name: 'process_input', arguments: { process_id: id, input: 'via batch\n', wait_ms: 2000 } }] })
    expect(batch.status, JSON.stringify(batch.body)).toBe(200)
    expect(batch.body['results'][0]).toMatchObject({ ok: true, result: { process_id: id, state: 'running', output: 'via batch\n' } })

    // Another tenant does not see it, on either instance.
    expect((await call(b, 'GET', `/v1/workspaces/w1/processes/${id}`, undefined, 'token-other')).status).toBe(404)
    expect((await call(a, 'GET', `/v1/workspaces/w1/processes/${id}`, undefined, 'token-other')).status).toBe(404)
    // `a` requires a token too: the forwarded requests above carried the caller's own. A wrong one goes nowhere.
    expect((await call(b, 'GET', `/v1/workspaces/w1/processes/${id}`, undefined, 'wrong')).status).toBe(401)

    // What a caller adds to the URL is not passed on: the owner is asked with the route's own checked parts.
    expect(await call(b, 'GET', `/v1/workspaces/w1/processes/${id}?wait_ms=abc`)).toMatchObject({ status: 200, body: { id, state: 'running' } })
    expect(await call(b, 'GET', `/v1/workspaces/w1/processes/${id}?wait_ms=-20000`)).toMatchObject({ status: 200, body: { id, state: 'running' } })

    // Killed through the other instance: killed, never exited.
    const killed = await call(b, 'POST', `/v1/workspaces/w1/processes/${id}/kill?wait_ms=abc`, {})
    expect(killed).toMatchObject({ status: 200, body: { id, state: 'killed', signal: 'TERM', exit_code: null } })
    expect(await call(a, 'GET', `/v1/workspaces/w1/processes/${id}`)).toMatchObject({ body: { state: 'killed' } })
    const killedTool = await call(b, 'POST', '/v1/tools/process_kill/execute', { arguments: { process_id: id }, workspace: 'w1' })
    expect(killedTool.body['result']).toMatchObject({ process_id: id, state: 'killed', exit_code: null })

    // A process on `a`, then `a` stops: it is lost, as seen from `b`.
    const marker = uniqueSleepSeconds()
    const sleeper = await call(a, 'POST', '/v1/workspaces/w1/processes', { command: `sleep ${marker}` })
    expect(sleeper.status).toBe(201)
    const sleeperId = sleeper.body['id'] as string
    expect(await call(b, 'GET', `/v1/workspaces/w1/processes/${sleeperId}`)).toMatchObject({ body: { state: 'running' } })
    const pids = processesWith(marker)
    expect(pids.length).toBeGreaterThan(0)
    a.server.child.kill('SIGTERM')
    await a.server.exited
    for (const pid of pids) expect(await alive(pid)).toBe(false)

    // Its instance ended it as it stopped and noted when: the record says so, though nothing else of it is known.
    const lost = { id: sleeperId, state: 'lost', exit_code: null, signal: null, ended_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT/) }
    // Something else now answers at `a`'s address (a pod's IP is reused): it is never sent the caller's token.
    const seen: Array<string | undefined> = []
    const squatter = http.createServer((request, response) => {
      seen.push(request.headers.authorization)
      response.setHeader('content-type', 'application/json')
      response.end(JSON.stringify({ id: sleeperId, state: 'running', status: 'ok' }))
    })
    await new Promise<void>((resolve) => squatter.listen(a.port, '127.0.0.1', resolve))
    expect(await call(b, 'GET', `/v1/workspaces/w1/processes/${sleeperId}`)).toMatchObject({ status: 200, body: lost })
    expect(seen.length).toBeGreaterThan(0)
    expect(seen.every((header) => header === undefined)).toBe(true)
    await new Promise<void>((resolve) => squatter.close(() => resolve()))

    expect(await call(b, 'GET', `/v1/workspaces/w1/processes/${sleeperId}`)).toMatchObject({ status: 200, body: lost })
    expect(await call(b, 'GET', `/v1/workspaces/w1/processes/${sleeperId}/output?after=5&wait_ms=2000`)).toMatchObject({ status: 200, body: { process: lost, chunks: [], next: 5, dropped_bytes: 0 } })
    expect(await call(b, 'POST', `/v1/workspaces/w1/processes/${sleeperId}/input`, { data: 'x' })).toMatchObject({ status: 409, body: { code: 'Conflict' } })
    expect(await call(b, 'POST', `/v1/workspaces/w1/processes/${sleeperId}/kill`, {})).toMatchObject({ status: 200, body: lost })
    const lostEvents = await eventsUntil(b, sleeperId, 'event: end')
    expect(lostEvents).toContain('"state":"lost"')
    expect((await call(b, 'GET', '/v1/workspaces/w1/processes')).body['processes'].map((each: Json) => [each['id'], each['state']])).toEqual([[id, 'lost'], [sleeperId, 'lost']])
    expect((await call(b, 'POST', '/v1/tools/process_output/execute', { arguments: { process_id: sleeperId }, workspace: 'w1' })).body['result']).toMatchObject({ process_id: sleeperId, state: 'lost', output: '' })

    // `a` back at the same address, without the processes of its former life: lost there and here.
    const again = await instance(root, 'a', a.port)
    expect(await call(again, 'GET', `/v1/workspaces/w1/processes/${sleeperId}`)).toMatchObject({ status: 200, body: lost })
    expect(await call(b, 'GET', `/v1/workspaces/w1/processes/${sleeperId}`)).toMatchObject({ status: 200, body: lost })
  }, 60_000)

  it('keeps a process whose instance was out of reach for a moment: lost while it does not answer, running again once it does', async () => {
    const root = await tempDir('instances-')
    const aPort = await freePort()
    const link = await linkTo(aPort)
    // `a` is reached by the others through the link, as a pod through the network.
    const a = await instance(root, 'a', aPort, {}, link.port)
    const b = await instance(root, 'b')
    try {
      const marker = uniqueSleepSeconds()
      const started = await call(a, 'POST', '/v1/workspaces/w1/processes', { command: `sleep ${marker}` })
      expect(started.status).toBe(201)
      const id = started.body['id'] as string
      expect(await call(b, 'GET', `/v1/workspaces/w1/processes/${id}`)).toMatchObject({ status: 200, body: { id, state: 'running' } })

      await link.cut()
      expect(await call(b, 'GET', `/v1/workspaces/w1/processes/${id}`)).toMatchObject({ status: 200, body: { id, state: 'lost' } })
      expect((await call(b, 'GET', '/v1/workspaces/w1/processes')).body['processes']).toMatchObject([{ id, state: 'lost' }])
      const tool = await call(b, 'POST', '/v1/tools/process_output/execute', { arguments: { process_id: id }, workspace: 'w1' })
      expect(tool.body['result']).toMatchObject({ process_id: id, state: 'lost' })

      await link.mend()
      expect(await call(b, 'GET', `/v1/workspaces/w1/processes/${id}`)).toMatchObject({ status: 200, body: { id, state: 'running' } })
      expect((await call(b, 'GET', '/v1/workspaces/w1/processes')).body['processes']).toMatchObject([{ id, state: 'running' }])
      expect(await call(b, 'POST', `/v1/workspaces/w1/processes/${id}/kill`, {})).toMatchObject({ status: 200, body: { id, state: 'killed' } })
      expect(processesWith(marker)).toEqual([])
    } finally {
      await link.cut().catch(() => {})
      for (const each of [a, b]) each.server.child.kill('SIGTERM')
      await Promise.all([a.server.exited, b.server.exited])
    }
  }, 60_000)

  it('keeps a workspace with a running process from expiring on every instance, and ends the process when another instance deletes the workspace', async () => {
    const root = path.join(await tempDir('toolport-shared-'), 'root')
    const short = { ttl_seconds: 2, sweep_interval_seconds: 1 }
    const a = await instance(root, 'a', undefined, short)
    const b = await instance(root, 'b', undefined, short)
    const marker = uniqueSleepSeconds()
    const started = await call(a, 'POST', '/v1/workspaces/w1/processes', { command: `sleep ${marker}` })
    expect(started.status).toBe(201)
    const id = started.body['id'] as string

    // Three TTLs later, with both sweepers running every second, the workspace and its process are still there for `b`.
    await sleep(6000)
    expect((await call(b, 'GET', '/v1/workspaces/w1')).status).toBe(200)
    expect(await call(b, 'GET', `/v1/workspaces/w1/processes/${id}`)).toMatchObject({ status: 200, body: { state: 'running' } })
    expect(processesWith(marker).length).toBeGreaterThan(0)

    // Deleted through `b`: `a` notices at its next sweep and ends the process; nothing is left running.
    expect((await call(b, 'DELETE', '/v1/workspaces/w1')).status).toBe(204)
    expect(await survivorsWith(marker, 10_000)).toEqual([])
    expect((await call(a, 'GET', '/v1/workspaces/w1')).status).toBe(404)
  }, 60_000)

  it('ends a process of a workspace deleted and made again elsewhere when this instance first looks the id up, never showing it in the new one', async () => {
    const root = path.join(await tempDir('toolport-shared-'), 'root')
    // Sweeps far apart: the lookup, not a sweep, is what must notice.
    const slow = { sweep_interval_seconds: 3600 }
    const a = await instance(root, 'a', undefined, slow)
    const b = await instance(root, 'b', undefined, slow)
    const marker = uniqueSleepSeconds()
    const started = await call(a, 'POST', '/v1/workspaces/w9/processes', { command: `sleep ${marker}` })
    expect(started.status).toBe(201)
    expect((await call(b, 'DELETE', '/v1/workspaces/w9')).status).toBe(204)
    expect((await call(b, 'POST', '/v1/workspaces', { id: 'w9' })).status).toBe(201)
    // Past the lookup's recheck, so `a` reads the new workspace's metadata.
    await sleep(1200)
    const listed = await call(a, 'GET', '/v1/workspaces/w9/processes')
    expect(listed.status).toBe(200)
    expect(listed.body['processes'].filter((p: Json) => p.state === 'running')).toEqual([])
    expect(await survivorsWith(marker, 10_000)).toEqual([])
  }, 60_000)

  it('runs a workspace\'s commands on the instance that runs its processes, so they share its network', async () => {
    const root = path.join(await tempDir('toolport-shared-'), 'root')
    const a = await instance(root, 'a')
    const b = await instance(root, 'b')
    const port = 20_000 + Math.floor(Math.random() * 20_000)
    const server = `python3 -u -c "import http.server as h; s = h.HTTPServer(('127.0.0.1', ${port}), h.SimpleHTTPRequestHandler); print('ready'); s.serve_forever()"`
    const client = `python3 -c "
import urllib.request
try: print(urllib.request.urlopen('http://127.0.0.1:${port}/', timeout=5).status)
except Exception as e: print('unreachable', e)"`
    const started = await call(a, 'POST', '/v1/workspaces/w2/processes', { command: server })
    expect(started.status).toBe(201)
    const id = started.body['id'] as string
    expect((await outputUntil(a, id, 'ready', 0, 'w2')).data).toContain('ready')

    // exec_shell and a batch through `b` run where the server runs, and reach it.
    const direct = await call(b, 'POST', '/v1/tools/exec_shell/execute', { arguments: { command: client }, workspace: 'w2' })
    expect(direct.body['result']).toMatchObject({ exit_code: 0, stdout: '200\n' })
    const batch = await call(b, 'POST', '/v1/tool-calls', { workspace: 'w2', calls: [{ id: 'c1', name: 'exec_shell', arguments: { command: client } }] })
    expect(batch.body['results'][0]).toMatchObject({ ok: true, result: { stdout: '200\n' } })
    // A process started through `b` joins them on `a`, and its status comes from `a`.
    const second = await call(b, 'POST', '/v1/tools/process_start/execute', { arguments: { command: client, yield_ms: 10_000 }, workspace: 'w2' })
    expect(second.body['result']).toMatchObject({ state: 'exited', exit_code: 0, output: '200\n' })
    expect(await call(a, 'GET', `/v1/workspaces/w2/processes/${second.body['result'].process_id as string}`)).toMatchObject({ status: 200, body: { state: 'exited' } })
    // So does one started through `b`'s process endpoint.
    const third = await call(b, 'POST', '/v1/workspaces/w2/processes', { command: client })
    expect(third.status, JSON.stringify(third.body)).toBe(201)
    expect((await outputUntil(a, third.body['id'] as string, '200', 0, 'w2')).data).toBe('200\n')
    // Another workspace, through either instance, does not reach it.
    expect((await call(b, 'POST', '/v1/tools/exec_shell/execute', { arguments: { command: client }, workspace: 'w3' })).body['result'].stdout).toContain('unreachable')
    // A client that marks its request as forwarded (which would run it where it lands, in another network,
    // and count only that instance's processes) is refused, and starts nothing.
    const listed = (await call(a, 'GET', '/v1/workspaces/w2/processes')).body['processes'].length
    for (const marked of ['yes', '0'.repeat(64), '2']) {
      const refused = await call(b, 'POST', '/v1/tools/exec_shell/execute', { arguments: { command: client }, workspace: 'w2' }, 'token-acme', { 'toolport-forwarded': marked })
      expect(refused).toMatchObject({ status: 403, body: { code: 'PermissionDenied' } })
      expect(await call(b, 'POST', '/v1/workspaces/w2/processes', { command: 'sleep 60' }, 'token-acme', { 'toolport-forwarded': marked })).toMatchObject({ status: 403, body: { code: 'PermissionDenied' } })
    }
    // What an instance of an earlier version sends (during an update): retried once the update is over, never run.
    expect(await call(b, 'POST', '/v1/workspaces/w2/processes', { command: 'sleep 60' }, 'token-acme', { 'toolport-forwarded': '1' })).toMatchObject({ status: 503, body: { code: 'Overloaded' } })
    expect((await call(a, 'GET', '/v1/workspaces/w2/processes')).body['processes'].length).toBe(listed)
    // The instances' key is a file of the shared root that only they read; with it, the request is taken as forwarded.
    const keyFile = path.join(root, '.peer-key')
    expect((await stat(keyFile)).mode & 0o777).toBe(0o600)
    const key = (await readFile(keyFile, 'utf8')).trim()
    const forwarded = await call(b, 'POST', '/v1/tools/exec_shell/execute', { arguments: { command: client }, workspace: 'w2' }, 'token-acme', { 'toolport-forwarded': key })
    expect(forwarded.body['result'].stdout).toContain('unreachable')

    // Once the process has ended, commands run where they land again.
    expect((await call(b, 'POST', `/v1/workspaces/w2/processes/${id}/kill`, {})).body).toMatchObject({ state: 'killed' })
    expect((await call(b, 'POST', '/v1/tools/exec_shell/execute', { arguments: { command: client }, workspace: 'w2' })).body['result'].stdout).toContain('unreachable')
  }, 60_000)

  it('starts the first processes of a workspace, asked through two instances at the same moment, on one of them (one network)', async () => {
    const root = path.join(await tempDir('toolport-shared-'), 'root')
    const a = await instance(root, 'a')
    const b = await instance(root, 'b')
    const owners = async (workspace: string): Promise<string[]> => {
      const dir = new WorkspaceLayout(root).processesDir('acme', workspace)
      const names = (await readdir(dir)).filter((name) => name.endsWith('.json'))
      return [...new Set(await Promise.all(names.map(async (name) => (JSON.parse(await readFile(path.join(dir, name), 'utf8')) as Json)['owner'] as string)))]
    }
    const command = `sleep ${uniqueSleepSeconds()}`
    for (let round = 0; round < 6; round++) {
      // Through the endpoint, and through the tool.
      const [viaA, viaB] = await Promise.all([a, b].map(async (at) => await call(at, 'POST', `/v1/workspaces/rest${round}/processes`, { command })))
      expect([viaA?.status, viaB?.status]).toEqual([201, 201])
      expect(await owners(`rest${round}`)).toHaveLength(1)
      const tools = await Promise.all([a, b].map(async (at) => await call(at, 'POST', '/v1/tools/process_start/execute', { arguments: { command, yield_ms: 0 }, workspace: `tool${round}` })))
      expect(tools.map((each) => each.body['result']?.state)).toEqual(['running', 'running'])
      expect(await owners(`tool${round}`)).toHaveLength(1)
    }

    // So do they where the instance that ran the workspace's processes died (its records still say it runs them).
    const c = await instance(root, 'c')
    for (let round = 0; round < 8; round++) expect((await call(c, 'POST', `/v1/workspaces/dead${round}/processes`, { command })).status).toBe(201)
    c.server.child.kill('SIGKILL')
    await c.server.exited
    for (let round = 0; round < 8; round++) {
      const [viaA, viaB] = await Promise.all([a, b].map(async (at) => await call(at, 'POST', `/v1/workspaces/dead${round}/processes`, { command })))
      expect([viaA?.status, viaB?.status]).toEqual([201, 201])
      expect((await owners(`dead${round}`)).filter((owner) => owner !== `http://127.0.0.1:${c.port}`)).toHaveLength(1)
    }
  }, 60_000)

  it('answers a start that another instance\'s deletion of its workspace overtook as NotFound, never a 500', async () => {
    const root = path.join(await tempDir('toolport-shared-'), 'root')
    const a = await instance(root, 'a')
    const b = await instance(root, 'b')
    const command = `sleep ${uniqueSleepSeconds()}`
    for (let round = 0; round < 12; round++) {
      expect((await call(a, 'POST', '/v1/workspaces', { id: `gone${round}` })).status).toBe(201)
      const [start, deleted] = await Promise.all([
        round % 2 === 0
          ? call(a, 'POST', `/v1/workspaces/gone${round}/processes`, { command })
          : call(a, 'POST', '/v1/tools/process_start/execute', { arguments: { command, yield_ms: 0 }, workspace: `gone${round}` }),
        call(b, 'DELETE', `/v1/workspaces/gone${round}`),
      ])
      expect(deleted.status).toBe(204)
      expect([200, 201, 404], JSON.stringify(start.body)).toContain(start.status)
    }
    expect(a.server.output()).not.toContain('"level":50')
  }, 60_000)

  it('answers a call whose instance stopped answering during it as a failure of unknown outcome, which a retry under its Idempotency-Key does not run again', async () => {
    const root = path.join(await tempDir('toolport-shared-'), 'root')
    const a = await instance(root, 'a')
    const b = await instance(root, 'b')
    expect((await call(a, 'POST', '/v1/workspaces/w4/processes', { command: `sleep ${uniqueSleepSeconds()}` })).status).toBe(201)
    const send = (): Promise<Response> => fetch(`${b.server.base}/v1/tools/exec_shell/execute`, {
      method: 'POST',
      headers: { authorization: 'Bearer token-acme', 'content-type': 'application/json', 'idempotency-key': 'unknown-outcome' },
      body: JSON.stringify({ arguments: { command: 'echo ran >> count; sleep 30' }, workspace: 'w4' }),
      signal: AbortSignal.timeout(20_000),
    })
    const first = send()
    // Forwarded to `a`, it has run there when `a` goes.
    const count = async (): Promise<unknown> => (await call(b, 'POST', '/v1/tools/read_file/execute', { arguments: { path: 'count' }, workspace: 'w4' })).body['result']?.content
    for (let round = 0; round < 100 && await count() !== 'ran\n'; round++) await sleep(100)
    a.server.child.kill('SIGKILL')
    await a.server.exited
    const failed = await first
    expect(failed.status).toBe(500)
    expect(await failed.json()).toMatchObject({ code: 'ExecutionFailed', detail: expect.stringContaining('the outcome is unknown') })
    // Not an invitation to retry (no 503): a retry with the key gets that answer again, and nothing runs twice.
    const retried = await send()
    expect(retried.headers.get('idempotent-replayed')).toBe('true')
    expect(retried.status).toBe(500)
    expect(await count()).toBe('ran\n')
  }, 60_000)

  it('cuts a call it forwarded to the instance that runs the workspace\'s processes when its own drain runs out: 503 with Retry-After, and the command there ends', async () => {
    const root = path.join(await tempDir('toolport-shared-'), 'root')
    const a = await instance(root, 'a')
    const b = await instance(root, 'b', undefined, {}, undefined, { drain_timeout_ms: 500 })
    expect((await call(a, 'POST', '/v1/workspaces/w6/processes', { command: `sleep ${uniqueSleepSeconds()}` })).status).toBe(201)
    const marker = uniqueSleepSeconds()
    const forwarded = call(b, 'POST', '/v1/tools/exec_shell/execute', { arguments: { command: `sleep ${marker}` }, workspace: 'w6' })
    // A process it started there outlives the cut: not a 503 that invites starting it again.
    const build = uniqueSleepSeconds()
    const started = call(b, 'POST', '/v1/tools/process_start/execute', { arguments: { command: `sleep ${build}`, yield_ms: 20_000 }, workspace: 'w6' })
    for (let round = 0; round < 100 && (processesWith(marker).length === 0 || processesWith(build).length === 0); round++) await sleep(50)
    expect(processesWith(marker)).not.toEqual([])
    b.server.child.kill('SIGTERM')
    expect(await forwarded).toMatchObject({ status: 503, body: { code: 'Overloaded', detail: expect.stringContaining('shutting down') } })
    expect(await started).toMatchObject({ status: 500, body: { code: 'ExecutionFailed', detail: expect.stringContaining('the process may have started there') } })
    expect(processesWith(build)).not.toEqual([])
    expect((await b.server.exited).code).toBe(0)
    // The call's own connection to `a` closed with it: `a` ended the command, as a client that leaves ends one.
    for (let round = 0; round < 100 && processesWith(marker).length > 0; round++) await sleep(50)
    expect(processesWith(marker)).toEqual([])
    expect(b.server.output()).not.toContain('AbortError')
  }, 60_000)

  it('takes a workspace another instance deleted a moment ago as gone at once: absent, or made afresh by a call', async () => {
    const root = path.join(await tempDir('toolport-shared-'), 'root')
    const a = await instance(root, 'a')
    const b = await instance(root, 'b')
    expect((await call(a, 'POST', '/v1/tools/write_file/execute', { arguments: { path: 'old.txt', content: 'x' }, workspace: 'w8' })).status).toBe(200)
    expect((await call(b, 'DELETE', '/v1/workspaces/w8')).status).toBe(204)
    // At once on `a`, whose cache had it a moment ago.
    expect(await call(a, 'GET', '/v1/workspaces/w8')).toMatchObject({ status: 404, body: { code: 'NotFound' } })
    expect(await call(a, 'POST', '/v1/tools/write_file/execute', { arguments: { path: 'new.txt', content: 'y' }, workspace: 'w8' })).toMatchObject({ status: 200 })
    expect((await call(b, 'DELETE', '/v1/workspaces/w8')).status).toBe(204)
    const listed = await call(a, 'POST', '/v1/tools/exec_shell/execute', { arguments: { command: 'ls -A' }, workspace: 'w8' })
    expect(listed).toMatchObject({ status: 200, body: { result: { exit_code: 0, stdout: '' } } })
    expect((await call(b, 'DELETE', '/v1/workspaces/w8')).status).toBe(204)
    expect(await call(a, 'POST', '/v1/tools/list_directory/execute', { arguments: { path: '.' }, workspace: 'w8' })).toMatchObject({ status: 200 })
  }, 60_000)

  it('ends an event stream followed through another instance as a lost process\'s when the instance that runs it dies', async () => {
    const root = path.join(await tempDir('toolport-shared-'), 'root')
    const a = await instance(root, 'a')
    const b = await instance(root, 'b')
    const started = await call(a, 'POST', '/v1/workspaces/w1/processes', { command: 'while true; do echo tick; sleep 0.2; done' })
    expect(started.status).toBe(201)
    const response = await fetch(`${b.server.base}/v1/workspaces/w1/processes/${started.body['id'] as string}/output`, {
      headers: { authorization: 'Bearer token-acme', accept: 'text/event-stream' },
      signal: AbortSignal.timeout(20_000),
    })
    expect(response.status).toBe(200)
    let seen = ''
    const decoder = new TextDecoder()
    for await (const chunk of response.body as unknown as AsyncIterable<Uint8Array>) {
      seen += decoder.decode(chunk, { stream: true })
      // Killed once the stream is under way; the loop ends when the stream does (it would throw if it were cut).
      if (seen.includes('tick') && a.server.child.exitCode === null && a.server.child.signalCode === null) a.server.child.kill('SIGKILL')
    }
    const end = seen.slice(seen.lastIndexOf('event: end'))
    expect(end).toMatch(/^event: end\ndata: .*\n\n$/)
    expect(JSON.parse(end.split('\n')[1]?.slice('data: '.length) ?? '')).toMatchObject({ id: started.body['id'], state: 'lost' })
  }, 60_000)
})
