/**
 * SIGTERM to the built server during calls: readiness and new calls turn 503
 * at once, a short in-flight call finishes, a call outliving the drain timeout
 * is killed (its processes are gone), workspaces are removed, and the exit code is 0.
 */
import { existsSync, readFileSync } from 'node:fs'
import { readdir } from 'node:fs/promises'
import http from 'node:http'
import path from 'node:path'
import { createGzip } from 'node:zlib'
import { Header } from 'tar'
import { describe, expect, it } from 'vitest'
import { startServer, waitReady } from '../support/server-process.ts'
import { tempDir } from '../support/temp.ts'
import { workspacesIn } from '../support/ephemeral.ts'

const post = (base: string, url: string, body: unknown) =>
  fetch(`${base}${url}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** Alive and not a zombie. */
function running (pid: number): boolean {
  try {
    return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8'))
  } catch {
    return false
  }
}

async function until (condition: () => boolean | Promise<boolean>, timeoutMs = 10_000): Promise<boolean> {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    if (await condition()) return true
    await sleep(50)
  }
  return condition()
}

describe('graceful shutdown of the built server', () => {
  it('drains on SIGTERM: 503s at once, short calls finish, long ones are killed, exit 0', async () => {
    const scratch = await tempDir('toolport-drain-')
    const root = path.join(scratch, 'workspaces')
    const server = await startServer({ sandbox: { mode: 'none' }, workspaces: { root }, server: { drain_timeout_ms: 1500 } })
    await waitReady(server)

    // A finished call, before the signal: its ephemeral workspace is already gone.
    const finished = await post(server.base, '/v1/tools/write_file/execute', { arguments: { path: 'a.txt', content: 'x' } })
    expect(finished.status).toBe(200)

    // A call that outlives the drain timeout: a shell and a background child, both recorded.
    const pidFile = path.join(scratch, 'pids')
    const long = post(server.base, '/v1/tools/exec_shell/execute', { arguments: { command: `sleep 60 & echo $$ $! > ${pidFile}; wait`, timeout: 120 } })
      .then(async (r) => ({ status: r.status, retryAfter: r.headers.get('retry-after'), body: await r.json() as Record<string, unknown> }), () => 'reset' as const)
    expect(await until(() => existsSync(pidFile) && readFileSync(pidFile, 'utf8').trim().split(' ').length === 2)).toBe(true)
    const pids = readFileSync(pidFile, 'utf8').trim().split(' ').map(Number)
    expect(pids.every(running)).toBe(true)
    // A call that finishes within the drain.
    const short = post(server.base, '/v1/tools/exec_shell/execute', { arguments: { command: 'sleep 0.6; echo drained' } })
    await sleep(150)

    server.child.kill('SIGTERM')
    expect(await until(async () => (await fetch(`${server.base}/readyz`)).status === 503)).toBe(true)
    const refused = await post(server.base, '/v1/tools/read_file/execute', { arguments: { path: 'a.txt' } })
    expect(refused.status).toBe(503)
    expect(await refused.json()).toMatchObject({ code: 'Overloaded', tool: 'read_file' })

    const shortReply = await short
    expect(shortReply.status).toBe(200)
    expect(await shortReply.json()).toMatchObject({ result: { exit_code: 0, stdout: 'drained\n' } })

    expect(await server.exited).toEqual({ code: 0, signal: null })
    // Cut by the drain timeout: a retryable 503, not a failure of the call.
    expect(await long).toMatchObject({ status: 503, retryAfter: expect.stringMatching(/^\d+$/), body: { code: 'Overloaded', tool: 'exec_shell' } })
    expect(await until(() => !pids.some(running), 5000)).toBe(true)
    expect(await workspacesIn(path.join(root, 'ephemeral'))).toEqual([])
  })

  it('answers an archive upload the drain cut short with 503 and Retry-After, changing nothing', async () => {
    const scratch = await tempDir('toolport-drain-upload-')
    const root = path.join(scratch, 'workspaces')
    const server = await startServer({ sandbox: { mode: 'none' }, workspaces: { root }, server: { drain_timeout_ms: 300 } })
    await waitReady(server)
    expect((await post(server.base, '/v1/workspaces', { id: 'up' })).status).toBe(201)
    // A body sent slowly: a gzip stream of a tar that never ends while the service stops.
    const { port } = new URL(server.base)
    const answer = new Promise<{ status: number, retryAfter: string | undefined }>((resolve, reject) => {
      const request = http.request({ host: '127.0.0.1', port, method: 'PUT', path: '/v1/workspaces/up/archive', headers: { 'content-type': 'application/gzip', 'transfer-encoding': 'chunked' } }, (response) => {
        response.resume()
        resolve({ status: response.statusCode ?? 0, retryAfter: response.headers['retry-after'] })
      })
      request.on('error', reject)
      const gzip = createGzip()
      gzip.on('data', (chunk: Buffer) => request.write(chunk))
      // One file of 100 MB announced, whose bytes come a few at a time.
      const header = new Header({ path: 'big.bin', size: 100 * 1024 * 1024, type: 'File', mode: 0o644, mtime: new Date() })
      header.encode()
      gzip.write(header.block as Buffer)
      gzip.write(Buffer.alloc(512 * 40, 0x61))
      gzip.flush()
      const drip = setInterval(() => { gzip.write(Buffer.alloc(512, 0x61)); gzip.flush() }, 50)
      request.on('close', () => { clearInterval(drip) })
    })
    await sleep(300)
    server.child.kill('SIGTERM')
    expect(await answer).toEqual({ status: 503, retryAfter: '1' })
    expect((await server.exited).code).toBe(0)
    expect(await readdir(path.join(root, 'tenants', 'default', 'ws'))).toEqual(['up'])
    expect(await readdir(path.join(root, 'tenants', 'default', 'ws', 'up'))).toEqual([])
  })

  it('releases the Idempotency-Key of a batch one of whose calls the drain stopped: the retry after a restart runs', async () => {
    const scratch = await tempDir('toolport-drain-')
    const config = { sandbox: { mode: 'none' }, workspaces: { root: path.join(scratch, 'workspaces') }, server: { drain_timeout_ms: 500 } }
    const batch = { workspace: 'kept', calls: [{ id: 'a', name: 'exec_shell', arguments: { command: 'echo ran >> count; sleep 20' } }] }
    const send = (base: string) => fetch(`${base}/v1/tool-calls`, { method: 'POST', headers: { 'content-type': 'application/json', 'idempotency-key': 'batch-1' }, body: JSON.stringify(batch) })
    const first = await startServer(config)
    await waitReady(first)
    const cut = send(first.base)
    const count = async (base: string): Promise<unknown> => ((await (await post(base, '/v1/tools/read_file/execute', { workspace: 'kept', arguments: { path: 'count' } })).json()) as { result?: { content?: string } }).result?.content
    expect(await until(async () => await count(first.base) === 'ran\n')).toBe(true)
    first.child.kill('SIGTERM')
    const answer = await cut
    expect(answer.status).toBe(200)
    expect(await answer.json()).toMatchObject({ results: [{ id: 'a', ok: false, status: 503, error: { code: 'Overloaded' } }] })
    expect(await first.exited).toEqual({ code: 0, signal: null })

    // The drain said to retry elsewhere: the key must let it run, not replay the refusal for a day.
    const second = await startServer(config)
    await waitReady(second)
    const retried = send(second.base)
    expect(await until(async () => await count(second.base) === 'ran\nran\n')).toBe(true)
    second.child.kill('SIGTERM')
    expect((await retried).headers.get('idempotent-replayed')).toBeNull()
  })

  it('closes open MCP sessions and their event streams, and exits 0', async () => {
    const server = await startServer({ sandbox: { mode: 'none' } })
    await waitReady(server)
    const headers = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' }
    const init = await fetch(`${server.base}/mcp`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'drain-test', version: '1' } } }),
    })
    expect(init.status).toBe(200)
    const session = init.headers.get('mcp-session-id')
    expect(session).toBeTruthy()
    await init.text()
    const stream = await fetch(`${server.base}/mcp`, { headers: { accept: 'text/event-stream', 'mcp-session-id': session! } })
    expect(stream.status).toBe(200)
    const ended = (async () => {
      const reader = stream.body!.getReader()
      try {
        while (!(await reader.read()).done);
      } catch {}
      return true
    })()

    server.child.kill('SIGTERM')
    expect(await server.exited).toEqual({ code: 0, signal: null })
    expect(await ended).toBe(true)
  })

  it('keeps persistent workspaces across a restart, and exits 0 when idle', async () => {
    const scratch = await tempDir('toolport-drain-')
    const root = path.join(scratch, 'workspaces')
    const config = { sandbox: { mode: 'none' }, workspaces: { root } }
    const first = await startServer(config)
    await waitReady(first)
    const write = await post(first.base, '/v1/tools/write_file/execute', { workspace: 'keep', arguments: { path: 'kept.txt', content: 'still here' } })
    expect(write.status).toBe(200)
    first.child.kill('SIGTERM')
    expect(await first.exited).toEqual({ code: 0, signal: null })

    const second = await startServer(config)
    await waitReady(second)
    const read = await post(second.base, '/v1/tools/read_file/execute', { workspace: 'keep', arguments: { path: 'kept.txt' } })
    expect(read.status).toBe(200)
    expect(JSON.stringify(await read.json())).toContain('still here')
  })
})
