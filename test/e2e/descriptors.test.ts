/**
 * A real server whose descriptor limit is lowered while it runs (prlimit
 * --pid, as a busy host would leave it): calls that start commands and
 * processes then answer 503 Overloaded with Retry-After or run, and the
 * service itself goes on; once descriptors are back, everything runs.
 */
import { execFileSync } from 'node:child_process'
import { readdirSync } from 'node:fs'
import { describe, expect, it } from 'vitest'
import { describeJson, placeTool, shTool, toolsDir } from '../sources/helpers.ts'
import { startServer, waitReady } from '../support/server-process.ts'
import { tarOf } from '../support/tarball.ts'

/** Sets the server's soft descriptor limit (its hard one stays, so it may be raised again). */
const limitDescriptors = (pid: number, count: number | string): void => { execFileSync('prlimit', [`--pid=${pid}`, `--nofile=${count}:`]) }
const descriptorLimit = (pid: number): string => execFileSync('prlimit', [`--pid=${pid}`, '--nofile', '--output=SOFT', '--noheadings'], { encoding: 'utf8' }).trim()

async function post (base: string, url: string, body: unknown): Promise<{ status: number, body: Record<string, any>, retryAfter: string | null }> {
  const response = await fetch(base + url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal: AbortSignal.timeout(20_000) })
  return { status: response.status, body: await response.json() as Record<string, any>, retryAfter: response.headers.get('retry-after') }
}

describe('out of file descriptors', () => {
  it('answers commands and process starts 503 Overloaded (or runs them), and keeps serving', async () => {
    const server = await startServer({ tools: { builtin: ['*'] }, limits: { max_concurrent: 16 }, logging: { level: 'warn' } })
    await waitReady(server)
    const pid = server.child.pid as number
    const before = descriptorLimit(pid)
    // A few more than it holds at rest: enough for the requests' connections, not for their commands.
    limitDescriptors(pid, readdirSync(`/proc/${pid}/fd`).length + 16)
    try {
      const batch = await post(server.base, '/v1/tool-calls', { parallel: true, calls: Array.from({ length: 16 }, (_, i) => ({ id: `c${i}`, name: 'exec_shell', arguments: { command: `echo ${i}` } })) })
      expect(batch.status, JSON.stringify(batch.body)).toBe(200)
      const outcomes = (batch.body['results'] as Array<Record<string, any>>).map((each) => each['ok'] === true ? 'ran' : each['error']?.code)
      expect(outcomes.filter((each) => each !== 'ran' && each !== 'Overloaded'), JSON.stringify(batch.body)).toEqual([])
      expect(outcomes).toContain('Overloaded')
      const starts = await Promise.all(Array.from({ length: 12 }, async () => await post(server.base, '/v1/workspaces/w/processes', { command: 'sleep 30' })))
      for (const start of starts) {
        if (start.status === 201) continue
        expect(start, JSON.stringify(start.body)).toMatchObject({ status: 503, body: { code: 'Overloaded' }, retryAfter: '1' })
      }
      expect(starts.some((start) => start.status === 503)).toBe(true)
    } finally {
      if (server.child.exitCode === null) limitDescriptors(pid, before)
    }
    expect(server.child.exitCode, server.output()).toBeNull()
    expect((await fetch(`${server.base}/healthz`)).status).toBe(200)
    const after = await post(server.base, '/v1/tools/exec_shell/execute', { arguments: { command: 'echo back' } })
    expect(after.body['result']).toMatchObject({ exit_code: 0, stdout: 'back\n' })
    expect(server.output()).not.toMatch(/shutting down after an error|TypeError/)
  }, 60_000)

  it('answers every way of starting a program or opening a file 2xx or 503, whatever few descriptors are left', async () => {
    const dir = await toolsDir()
    await placeTool(dir, 'hello', shTool(describeJson('hello'), 'echo \'{"hi": 1}\''))
    const server = await startServer({ tools: { builtin: ['*'], dirs: [dir] }, logging: { level: 'warn' } })
    await waitReady(server)
    const pid = server.child.pid as number
    const before = descriptorLimit(pid)
    const archive = tarOf([{ name: 'a.txt', content: 'a' }, { name: 'b/c.txt', content: 'c' }])
    const attempts: Array<[string, () => Promise<Response>]> = [
      ['process start', () => fetch(`${server.base}/v1/workspaces/w/processes`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"command":"echo hi"}' })],
      ['exec_shell', () => fetch(`${server.base}/v1/tools/exec_shell/execute`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"arguments":{"command":"echo hi"},"workspace":"w"}' })],
      ['an executable', () => fetch(`${server.base}/v1/tools/hello/execute`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"arguments":{}}' })],
      ['an archive upload', () => fetch(`${server.base}/v1/workspaces/w/archive`, { method: 'PUT', headers: { 'content-type': 'application/gzip' }, body: archive })],
    ]
    const seen: string[] = []
    try {
      for (let headroom = 0; headroom <= 10; headroom++) {
        for (const [what, attempt] of attempts) {
          limitDescriptors(pid, readdirSync(`/proc/${pid}/fd`).length + headroom)
          const answer = await attempt().catch((error: unknown) => error as Error)
          limitDescriptors(pid, before)
          // The connection itself may find no descriptor: the server then never read the request.
          if (answer instanceof Error) continue
          const body = await answer.text()
          seen.push(`${what}: ${answer.status}`)
          if (answer.status < 300) continue
          expect(answer.status, `${what} with ${headroom} descriptors free: ${body}`).toBe(503)
          expect(JSON.parse(body)).toMatchObject({ code: 'Overloaded' })
          expect(answer.headers.get('retry-after')).toBe('1')
        }
      }
    } finally {
      if (server.child.exitCode === null) limitDescriptors(pid, before)
    }
    expect(seen.some((each) => each.endsWith(': 503')), seen.join(', ')).toBe(true)
    expect(server.child.exitCode, server.output()).toBeNull()
  }, 120_000)

  it('never takes a probe that found no descriptor free for "bubblewrap does not work" (sandbox auto): it tries again', async () => {
    const server = await startServer({ sandbox: { mode: 'auto' }, logging: { level: 'info' } })
    const pid = server.child.pid as number
    // The probe begins 100 ms after listening when no request comes first: the descriptors run short before it.
    const deadline = Date.now() + 15_000
    while (!server.stdout().includes('Server listening') && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 2))
    const before = descriptorLimit(pid)
    limitDescriptors(pid, readdirSync(`/proc/${pid}/fd`).length)
    await new Promise((resolve) => setTimeout(resolve, 1500))
    limitDescriptors(pid, before)
    await waitReady(server)
    expect(server.stdout()).toContain('the sandbox probe could not start a program')
    expect(server.stdout()).not.toContain('WITHOUT a sandbox')
    expect((await (await fetch(`${server.base}/readyz`)).json())).toMatchObject({ sandbox: 'bwrap' })
  }, 60_000)
})
