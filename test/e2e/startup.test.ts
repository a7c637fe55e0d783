/**
 * Starting the built server: on a Node.js older than the service needs, one
 * line that says what to do (not a stack trace from inside a dependency);
 * on a good one, it answers before the sandbox is chosen, and a call made at
 * once still runs in the sandbox, and what waits for a first use (archives,
 * outbound requests, metrics, MCP) is not loaded before the first answer.
 */
import { execFileSync, spawn } from 'node:child_process'
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { MIN_NODE } from '../../src/node-version.ts'
import { freePort, type RunningServer, SERVER_ENTRY, startServer } from '../support/server-process.ts'

/** Where a machine's own (older) Node is found when use-node24.sh is not in effect. */
const SYSTEM_NODES = ['/usr/bin/node', '/bin/node', '/usr/local/bin/node']

function versionOf (node: string): string | undefined {
  try {
    return execFileSync(node, ['--version'], { encoding: 'utf8' }).trim().replace(/^v/, '')
  } catch {
    return undefined
  }
}

const tooOld = (version: string): boolean => {
  const [major = 0, minor = 0] = version.split('.').map(Number)
  return major < MIN_NODE.major || (major === MIN_NODE.major && minor < MIN_NODE.minor)
}

/**
 * An old Node to start the entry with: the machine's own where it is older
 * than the floor (as on a newcomer's machine), else this Node told by a
 * preload that it is 20.20.2, so the check is exercised either way.
 */
function oldNode (): { argv: string[], version: string } {
  for (const node of SYSTEM_NODES) {
    const version = versionOf(node)
    if (version !== undefined && tooOld(version)) return { argv: [node], version }
  }
  const version = '20.20.2'
  return { argv: [process.execPath, '--import', `data:text/javascript,Object.defineProperty(process.versions,'node',{value:'${version}'})`], version }
}

function run (argv: string[]): Promise<{ code: number | null, stdout: string, stderr: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(argv[0] as string, argv.slice(1), { env: { PATH: process.env['PATH'] ?? '', PORT: '0' }, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.on('data', (chunk: Buffer) => { stdout += chunk.toString() })
    child.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
    child.once('error', reject)
    child.once('close', (code) => resolve({ code, stdout, stderr }))
  })
}

/** Polls /healthz until its first 200, as an orchestrator would. */
async function firstHealthz (server: Pick<RunningServer, 'base' | 'child' | 'output'>): Promise<void> {
  const deadline = Date.now() + 15_000
  while (Date.now() < deadline) {
    if (server.child.exitCode !== null) throw new Error(`server exited: ${server.output()}`)
    const status = await fetch(`${server.base}/healthz`).then((response) => response.status, () => 0)
    if (status === 200) return
    await new Promise((resolve) => setTimeout(resolve, 5))
  }
  throw new Error(`no /healthz answer: ${server.output()}`)
}

const execute = (base: string, tool: string, body: unknown) => fetch(`${base}/v1/tools/${tool}/execute`, {
  method: 'POST',
  headers: { 'content-type': 'application/json' },
  body: JSON.stringify(body),
})

/**
 * A preload that writes, when the server reads its first request, what has been loaded by then:
 * Node's built-ins (`process.moduleLoadList`) and every file of the bundle.
 */
const LOAD_RECORDER = `
const { writeFileSync } = require('node:fs')
const http = require('node:http')
const files = []
require('node:module').registerHooks({ load (url, context, next) { files.push(url); return next(url, context) } })
const emit = http.Server.prototype.emit
http.Server.prototype.emit = function (event, ...args) {
  if (event === 'request' && process.env.LOADED_AT_FIRST_REQUEST) {
    writeFileSync(process.env.LOADED_AT_FIRST_REQUEST, JSON.stringify({ builtins: process.moduleLoadList, files }))
    delete process.env.LOADED_AT_FIRST_REQUEST
  }
  return emit.call(this, event, ...args)
}
`

describe('starting the built server', () => {
  it('loads before its first answer none of what waits for a first use (archives, outbound requests, processes, metrics, MCP, the OpenAPI document)', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'toolport-start-loads-'))
    try {
      await writeFile(path.join(dir, 'recorder.cjs'), LOAD_RECORDER)
      const record = path.join(dir, 'loaded.json')
      const server = await startServer({}, { NODE_OPTIONS: `--require ${path.join(dir, 'recorder.cjs')}`, LOADED_AT_FIRST_REQUEST: record })
      await firstHealthz(server)
      const loaded = JSON.parse(await readFile(record, 'utf8')) as { builtins: string[], files: string[] }
      // The check would pass vacuously if nothing were recorded.
      expect(loaded.builtins).toContain('NativeModule http')
      expect(loaded.files.some((file) => /\/chunks\/fastify-[^/]+\.js$/.test(file))).toBe(true)
      for (const builtin of ['zlib', 'dns/promises']) expect(loaded.builtins).not.toContain(`NativeModule ${builtin}`)
      const chunks = loaded.files.map((file) => path.basename(file).replace(/-[\w-]{8}\.js$/, ''))
      for (const chunk of ['undici', 'execa', 'prom-client', 'mcp-client', 'sessions', 'swagger', 'otel']) expect(chunks).not.toContain(chunk)
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
  })

  it('on a Node.js older than the floor, says in one line which Node is needed and how to get it, and exits 1', async () => {
    const { argv, version } = oldNode()
    const result = await run([...argv, SERVER_ENTRY])
    expect(result.stderr).toBe(`toolport: Node.js ${MIN_NODE.major}.${MIN_NODE.minor} or newer is needed (this is ${version}); ` +
      'on an older machine, run ". scripts/use-node24.sh" (see README "Run it")\n')
    expect(result.stdout).toBe('')
    expect(result.code).toBe(1)
  })

  it('answers before the sandbox is chosen, and a call made at once waits for it and runs sandboxed', async () => {
    const server = await startServer({ sandbox: { mode: 'bwrap' } })
    const deadline = Date.now() + 15_000
    let status = 0
    while (status !== 200 && Date.now() < deadline) {
      if (server.child.exitCode !== null) throw new Error(`server exited: ${server.output()}`)
      status = await fetch(`${server.base}/healthz`).then((response) => response.status, () => 0)
      if (status !== 200) await new Promise((resolve) => setTimeout(resolve, 5))
    }
    expect(status).toBe(200)
    const response = await fetch(`${server.base}/v1/tools/exec_shell/execute`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ arguments: { command: 'id -u; hostname' } }),
    })
    expect(await response.json()).toMatchObject({ result: { exit_code: 0, stdout: '65534\ntoolport-sandbox\n' } })
    // The log says so in order: listening first, the sandbox chosen after (lines leave in batches: wait for it).
    // Only whole lines of stdout: a chunk may end inside one, and stderr's chunks are not log lines.
    const messages = () => {
      const text = server.stdout()
      return text.slice(0, text.lastIndexOf('\n') + 1).split('\n').filter((line) => line.startsWith('{')).map((line) => (JSON.parse(line) as { msg: string }).msg)
    }
    const logged = Date.now() + 5000
    while (!messages().some((msg) => msg.startsWith('sandbox chosen')) && Date.now() < logged) await new Promise((resolve) => setTimeout(resolve, 20))
    const lines = messages()
    const listening = lines.findIndex((msg) => msg.startsWith('Server listening'))
    const chosen = lines.findIndex((msg) => msg.startsWith('sandbox chosen'))
    expect(listening).toBeGreaterThanOrEqual(0)
    expect(chosen).toBeGreaterThan(listening)
  })

  it('serves a file tool call made right after its first /healthz answer, and refuses a bad one with its problem', async () => {
    const server = await startServer({})
    await firstHealthz(server)
    // Request validators are compiled by a route's first request: these are the first.
    const bad = await execute(server.base, 'read_file', { arguments: { path: 7 } })
    expect(bad.status).toBe(400)
    expect(bad.headers.get('content-type')).toContain('application/problem+json')
    const written = await execute(server.base, 'write_file', { workspace: 'start', arguments: { path: 'a.txt', content: 'hello\n' } })
    expect(written.status).toBe(200)
    const read = await execute(server.base, 'read_file', { workspace: 'start', arguments: { path: 'a.txt' } })
    expect(read.status).toBe(200)
    expect(JSON.stringify(await read.json())).toContain('hello')
  })

  it('started as npm start does, reads the compile cache the build wrote beside the bundle', async () => {
    const pkg = JSON.parse(await readFile(path.join(path.dirname(SERVER_ENTRY), '..', '..', 'package.json'), 'utf8')) as { scripts: { start: string } }
    const flags = pkg.scripts.start.split(' ').filter((word) => word.startsWith('--'))
    const dir = await mkdtemp(path.join(os.tmpdir(), 'toolport-compile-cache-'))
    try {
      const config = path.join(dir, 'toolport.json')
      await writeFile(config, JSON.stringify({ workspaces: { root: path.join(dir, 'workspaces') } }))
      const port = await freePort()
      const child = spawn(process.execPath, [...flags, SERVER_ENTRY], {
        env: { PATH: process.env['PATH'] ?? '', HOST: '127.0.0.1', PORT: String(port), TOOLPORT_CONFIG: config, NODE_DEBUG_NATIVE: 'COMPILE_CACHE' },
        stdio: ['ignore', 'ignore', 'pipe'],
      })
      let stderr = ''
      child.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
      const closed = new Promise((resolve) => child.once('close', resolve))
      try {
        await firstHealthz({ base: `http://127.0.0.1:${port}`, child, output: () => stderr })
      } finally {
        child.kill('SIGTERM')
        await closed
      }
      // Node says, per module, whether V8 took the cached code; the start chunk holds most of the service.
      expect(stderr).toMatch(/V8 code cache for ESM file:\/\/\S+\/dist\/bundle\/chunks\/start-\S+\.js was accepted/)
      expect(stderr).not.toMatch(/for ESM file:\/\/\S+\/chunks\/start-\S+\.js was rejected/)
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
  })
})
