/** The built server, started as a user would: `node dist/bundle/server.js` with env and a config file. */
import { execFileSync } from 'node:child_process'
import { closeSync, openSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { realpath, rm, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { rootCertificates } from 'node:tls'
import { describe, expect, it } from 'vitest'
import { SERVER_ENTRY, startServer, waitReady } from '../support/server-process.ts'
import { onCleanup, tempDir } from '../support/temp.ts'

const post = (base: string, url: string, body: unknown, signal?: AbortSignal) =>
  fetch(`${base}${url}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body), signal })

const processAlive = (pattern: string): boolean => {
  for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      if (readFileSync(`/proc/${pid}/cmdline`, 'utf8').replace(/\0/g, ' ').includes(pattern)) return true
    } catch {}
  }
  return false
}

describe('the built server', () => {
  it('serves the catalog and runs calls over a real socket', async () => {
    const server = await startServer({ sandbox: { mode: 'none' } })
    await waitReady(server)
    const tools = await (await fetch(`${server.base}/v1/tools?format=openai`)).json() as { tools: unknown[] }
    expect(tools.tools.length).toBe(10)
    const response = await post(server.base, '/v1/tools/exec_shell/execute', { arguments: { command: 'echo e2e' } })
    expect(await response.json()).toMatchObject({ tool: 'exec_shell', result: { exit_code: 0, stdout: 'e2e\n' } })
  })

  for (const mode of ['none', 'bwrap'] as const) {
    it(`passes no descriptor it inherited on to a command (sandbox ${mode})`, async () => {
      const outside = path.join(await tempDir(), 'host-file')
      const leaked = openSync(outside, 'a')
      // Node.js itself marks its first descriptors close-on-exec at start; a high one (a shell's `exec 200>>file`) it leaves.
      const server = await startServer({ sandbox: { mode } }, {}, { 200: leaked })
      closeSync(leaked)
      await waitReady(server)
      const response = await post(server.base, '/v1/tools/exec_shell/execute', { arguments: { command: 'ls /proc/self/fd' } })
      const { result } = await response.json() as { result: { stdout: string } }
      // Only stdio, and the descriptor ls reads /proc/self/fd through.
      expect(result.stdout.trim().split('\n').map(Number).filter((fd) => fd > 3)).toEqual([])
      expect(server.output()).toContain('closed descriptors inherited from the parent process')
    })
  }

  it('lets Node finish reading NODE_EXTRA_CA_CERTS before it closes inherited descriptors', async () => {
    // Node reads the file in a thread of its own from start-up, through a descriptor that is not
    // close-on-exec: a file this size is still being read when the service looks for inherited ones.
    const certificates = path.join(await tempDir(), 'extra.pem')
    await writeFile(certificates, Array.from({ length: 40 }, () => rootCertificates.join('\n')).join('\n'))
    const server = await startServer({ sandbox: { mode: 'none' } }, { NODE_EXTRA_CA_CERTS: certificates })
    await waitReady(server)
    expect(server.output()).not.toContain('Ignoring extra certs')
    expect(server.child.exitCode).toBe(null)
  })

  it('leaves V8\'s own profiler files open when profiled (--perf-basic-prof): the perf map goes on growing', async () => {
    const server = await startServer({ sandbox: { mode: 'none' } }, { NODE_OPTIONS: '--perf-basic-prof' })
    await waitReady(server)
    const map = `/tmp/perf-${server.child.pid}.map`
    onCleanup(async () => { await rm(map, { force: true }) })
    const before = statSync(map).size
    for (const tool of ['write_file', 'read_file', 'list_directory', 'exec_shell']) {
      const args = tool === 'exec_shell' ? { command: 'true' } : tool === 'list_directory' ? { path: '.' } : { path: 'a.txt', content: 'a' }
      expect((await post(server.base, `/v1/tools/${tool}/execute`, { workspace: 'prof', arguments: args })).status).toBe(200)
    }
    expect(statSync(map).size).toBeGreaterThan(before)
  })

  it('writes buffered log lines within a flush period while idle, and the rest at exit', async () => {
    const server = await startServer({ sandbox: { mode: 'none' } })
    await waitReady(server)
    const lines = () => server.output().split('\n').filter((line) => line.includes('"tool call finished"'))
    await post(server.base, '/v1/tools/write_file/execute', { workspace: 'logs', arguments: { path: 'a.txt', content: 'a' } })
    const deadline = Date.now() + 2000
    while (lines().length === 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20))
    expect(lines()).toHaveLength(1)
    expect(JSON.parse(lines()[0] as string)).toMatchObject({ tool: 'write_file', code: 'ok', workspace: 'logs' })
    // Calls answered just before SIGTERM still reach the log, with the shutdown's own lines.
    for (let i = 0; i < 20; i++) {
      await Promise.all(Array.from({ length: 25 }, () => post(server.base, '/v1/tools/read_file/execute', { workspace: 'logs', arguments: { path: 'a.txt' } })))
    }
    server.child.kill('SIGTERM')
    expect((await server.exited).code).toBe(0)
    expect(lines()).toHaveLength(501)
    expect(server.output().trim().split('\n').at(-1)).toMatch(/"msg":"stopped"/)
  })

  it('cancels a call whose client disconnects: the process dies and the workspace goes', async () => {
    const server = await startServer({ sandbox: { mode: 'none' }, workspaces: undefined })
    await waitReady(server)
    const marker = `sleep 7.${Date.now() % 100000}`
    const controller = new AbortController()
    const call = post(server.base, '/v1/tools/exec_shell/execute', { arguments: { command: `${marker}; echo never` } }, controller.signal).catch(() => null)
    const deadline = Date.now() + 5000
    while (!processAlive(marker) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50))
    expect(processAlive(marker)).toBe(true)
    controller.abort()
    await call
    const gone = Date.now() + 5000
    while (processAlive(marker) && Date.now() < gone) await new Promise((resolve) => setTimeout(resolve, 50))
    expect(processAlive(marker)).toBe(false)
    const ready = await (await fetch(`${server.base}/readyz`)).json() as Record<string, unknown>
    expect(ready['status']).toBe('ready')
    // Counted as the caller's leaving, not as a failure of the tool.
    const metrics = await (await fetch(`${server.base}/metrics`)).text()
    expect(metrics).toContain('toolport_tool_calls_total{tool="exec_shell",code="cancelled"} 1')
    expect(metrics).not.toContain('code="ExecutionFailed"')
  })

  it('drains on SIGTERM: readyz 503, the in-flight call completes, exit 0', async () => {
    const server = await startServer({ sandbox: { mode: 'none' } })
    await waitReady(server)
    const call = post(server.base, '/v1/tools/exec_shell/execute', { arguments: { command: 'sleep 1.5; echo drained' } })
    await new Promise((resolve) => setTimeout(resolve, 400))
    server.child.kill('SIGTERM')
    await new Promise((resolve) => setTimeout(resolve, 200))
    const ready = await fetch(`${server.base}/readyz`).catch(() => null)
    expect(ready?.status).not.toBe(200)
    const body = await (await call).json() as { result: { stdout: string } }
    expect(body.result.stdout).toBe('drained\n')
    expect(await server.exited).toEqual({ code: 0, signal: null })
  })

  it('refuses a query string that does not decode to UTF-8, as built (a bundler once dropped the check)', async () => {
    const server = await startServer({ sandbox: { mode: 'none' } })
    await waitReady(server)
    for (const query of ['toolport_workspace=caf%E9', 'a=%', 'a=%ED%A0%80']) {
      const answer = await fetch(`${server.base}/v1/tools/list_directory/invoke?${query}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"path":"."}' })
      expect(answer.status, query).toBe(400)
      expect(await answer.json()).toMatchObject({ code: 'BadRequest', detail: 'malformed URL: the query string is not percent-encoded UTF-8' })
    }
    expect((await fetch(`${server.base}/v1/tools/list_directory/invoke?toolport_workspace=caf%C3%A9+x`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"path":"."}' })).status).toBe(200)
  })

  it('--help names every variable the start reads, and exits 0', () => {
    const help = execFileSync(process.execPath, [SERVER_ENTRY, '--help'], { encoding: 'utf8', timeout: 10_000 })
    for (const name of ['--config', 'TOOLPORT_CONFIG', 'HOST', 'PORT', 'TOOLPORT_ADVERTISE_URL', 'TOOLPORT_TOKENS_FILE', 'OTEL_EXPORTER_OTLP_ENDPOINT']) expect(help).toContain(name)
    const read = readFileSync(path.join(import.meta.dirname, '..', '..', 'src', 'start.ts'), 'utf8').matchAll(/process\.env\['(\w+)'\]/g)
    for (const [, name] of read) expect(help).toContain(name)
  })

  it('exits 1 with one line naming the bad key', async () => {
    const server = await startServer({ limits: { max_concurent: 3 } })
    expect((await server.exited).code).toBe(1)
    expect(server.output()).toMatch(/^toolport: config: limits\.max_concurent: unknown key\n$/)
  })

  it('exits 1 with one line, no stack, when the workspace root cannot be made', async () => {
    const file = path.join(await tempDir('toolport-root-'), 'a-file')
    await writeFile(file, 'not a directory')
    const server = await startServer({ workspaces: { root: path.join(file, 'ws') } })
    expect((await server.exited).code).toBe(1)
    // The log's JSON lines aside (stdout), one line: no stack.
    const said = server.output().split('\n').filter((line) => line !== '' && !line.startsWith('{'))
    expect(said).toEqual([`toolport: cannot prepare ${path.join(file, 'ws')} (workspaces.root or workspaces.ephemeral_root): ENOTDIR`])
  })

  it('exits 1 with one line, not ready to answer 500s, when the workspace root is a read-only mount', async () => {
    const root = await tempDir('toolport-ro-root-')
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'ro,size=64k', 'tmpfs', root])
    onCleanup(async () => { execFileSync('umount', ['-l', root]) })
    const server = await startServer({ sandbox: { mode: 'none' }, workspaces: { root, ephemeral_root: path.join(await tempDir('toolport-eph-'), 'e') } })
    expect((await server.exited).code).toBe(1)
    const said = server.output().split('\n').filter((line) => line !== '' && !line.startsWith('{'))
    expect(said).toEqual([`toolport: cannot prepare ${root} (workspaces.root or workspaces.ephemeral_root): EROFS`])
  })

  it('exits 1 with one line when another instance here runs in its ephemeral root (the default one, on a shared root); starts once that one has ended', async () => {
    const root = await tempDir('toolport-shared-root-')
    const config = { sandbox: { mode: 'none' }, workspaces: { root } }
    const first = await startServer(config)
    await waitReady(first)
    const second = await startServer(config)
    expect((await second.exited).code).toBe(1)
    const said = second.output().split('\n').filter((line) => line !== '' && !line.startsWith('{'))
    expect(said).toEqual([expect.stringMatching(new RegExp(`^toolport: workspaces\\.ephemeral_root ${path.join(await realpath(root), 'ephemeral')} is in use by another running instance \\(pid ${first.child.pid}\\): give each instance its own`))])
    // The first instance's ephemeral workspaces were left alone.
    const call = await fetch(`${first.base}/v1/tools/exec_shell/execute`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ arguments: { command: 'echo kept > f; cat f' } }) })
    expect(((await call.json()) as { result: { stdout: string } }).result.stdout).toBe('kept\n')
    first.child.kill('SIGKILL')
    await first.exited
    // Gone (even killed, its record left behind), it no longer holds the root.
    const third = await startServer(config)
    await waitReady(third)
  })

  it('exits 1 with one line when it cannot listen (the port taken), and refuses a PORT that is not decimal', async () => {
    const first = await startServer({ sandbox: { mode: 'none' } })
    await waitReady(first)
    const port = new URL(first.base).port
    const second = await startServer({ sandbox: { mode: 'none' } }, { PORT: port })
    expect((await second.exited).code).toBe(1)
    expect(second.output().split('\n').filter((line) => line.startsWith('toolport:'))).toEqual([`toolport: cannot listen on 127.0.0.1 port ${port}: EADDRINUSE`])
    expect(second.output()).not.toMatch(/\n\s+at /)
    // A name that does not resolve (a label over 63 bytes: refused before any DNS query is sent).
    const unresolved = `${'a'.repeat(64)}.invalid`
    const nowhere = await startServer({ sandbox: { mode: 'none' }, auth: { disabled: true } }, { HOST: unresolved })
    expect((await nowhere.exited).code).toBe(1)
    expect(nowhere.output().split('\n').filter((line) => line !== '' && !line.startsWith('{'))).toEqual([`toolport: cannot listen on ${unresolved} port ${new URL(nowhere.base).port}: ENOTFOUND`])
    for (const spelled of ['0x50', '1e3', '80.0']) {
      const odd = await startServer({ sandbox: { mode: 'none' } }, { PORT: spelled })
      expect((await odd.exited).code).toBe(1)
      expect(odd.output()).toBe(`toolport: PORT: must be a port number, got ${JSON.stringify(spelled)}\n`)
    }
  })

  it('refuses a non-loopback address without tokens unless auth is disabled', async () => {
    const refused = await startServer({}, { HOST: '0.0.0.0' })
    expect((await refused.exited).code).toBe(1)
    expect(refused.output()).toMatch(/no tokens are configured/)
  })

  it('serves the embedded defaults without a config file', async () => {
    const server = await startServer(null)
    await waitReady(server)
    const tools = await (await fetch(`${server.base}/v1/tools`)).json() as { tools: Array<{ name: string }> }
    expect(tools.tools.map((t) => t.name)).toContain('web_fetch')
  })
})
