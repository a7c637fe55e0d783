/**
 * Processes that outlive a request (issue 15): the budget, measured against
 * the built server (the bundle, dist/bundle/server.js, with `npm start`'s node flags,
 * sandbox `auto`) in one run:
 *   (a) starting `echo hi` as a process and reading its first output (REST:
 *       start, then long-poll the output; the tools: process_start with
 *       yield_ms 0, then process_output with wait_ms) against an exec_shell
 *       of the same command, in alternating rounds: medians and ratio; and,
 *       reported only, process_start waiting (yield_ms) for the command's
 *       end, which also waits for the sandbox to wind down;
 *   (b) the service's RSS growth with 100 idle running processes;
 *   (c) the service's RSS peak while a process prints 1 GiB, and the
 *       dropped_bytes a cursor read from 0 reports afterwards;
 *   (d) report only: execa against node:child_process for `sh -c true`, in
 *       this process (wall time and parent CPU per spawn), and execa's
 *       import time in a fresh Node.
 * Prints each budget with PASS or MISS.
 *
 * `npm run bench:processes`. BENCH_ROUNDS sets the rounds of (a) (default
 * 30), BENCH_SPAWNS the spawns of each side per round of (d) (default 20).
 */
import { execFileSync, spawn } from 'node:child_process'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import { execa } from 'execa'
import { median, peakRss, round2, rssMiB, SERVICE_ENTRY as SERVER, startNode } from './bench-support.ts'

const ROOT = path.join(path.dirname(fileURLToPath(import.meta.url)), '..')
const ROUNDS = Number(process.env['BENCH_ROUNDS'] ?? 30)
const SPAWNS = Number(process.env['BENCH_SPAWNS'] ?? 20)
const MiB = 1024 * 1024
/** How long the service is left alone before its RSS is read (past the GCs the work before left due). */
const SETTLE_MS = 2000
const IDLE_PROCESSES = 100
const IDLE_WORKSPACES = 4
const START_BUDGET = 1.3
const IDLE_RSS_BUDGET_MIB = 30
const FLOOD_RSS_BUDGET_MIB = 16

type Json = Record<string, any>

const rows: string[][] = []
function judge (what: string, measured: string, budget: string, ok?: boolean): void {
  rows.push([what, measured, budget, ok === undefined ? '' : ok ? 'PASS' : 'MISS'])
  console.log(`  ${what}: ${measured}  (${budget}) ${ok === undefined ? '' : ok ? 'PASS' : 'MISS'}`)
}

const dir = await mkdtemp(path.join(os.tmpdir(), 'toolport-bench-processes-'))
const configFile = path.join(dir, 'config.json')
await writeFile(configFile, JSON.stringify({
  workspaces: { root: path.join(dir, 'workspaces') },
  tools: { builtin: ['*'], processes: { max_per_workspace: Math.ceil(IDLE_PROCESSES / IDLE_WORKSPACES) } },
  limits: { queue_timeout_ms: 30_000 },
}))
const server = await startNode(['--max-semi-space-size=8', SERVER], { TOOLPORT_CONFIG: configFile }, path.join(dir, 'server.log'), ['/healthz', '/readyz'])

async function call (method: string, route: string, body?: unknown): Promise<{ status: number, body: Json }> {
  const response = await fetch(server.base + route, {
    method,
    headers: body === undefined ? {} : { 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  })
  const text = await response.text()
  return { status: response.status, body: (text === '' ? {} : JSON.parse(text)) as Json }
}

async function expectStatus (status: number, method: string, route: string, body?: unknown): Promise<Json> {
  const answer = await call(method, route, body)
  if (answer.status !== status) throw new Error(`${method} ${route}: ${answer.status} ${JSON.stringify(answer.body).slice(0, 300)}`)
  return answer.body
}

const processes = (ws: string): string => `/v1/workspaces/${ws}/processes`

async function startProcess (ws: string, command: string): Promise<string> {
  return (await expectStatus(201, 'POST', processes(ws), { command }))['id'] as string
}

/**
 * Polls the process's status until it has ended; its final object. (A
 * long-poll of its output would return at every chunk of a process that
 * prints without pause, and load the service while it is measured.)
 */
async function waitEnded (ws: string, id: string): Promise<Json> {
  for (;;) {
    const status = await expectStatus(200, 'GET', `${processes(ws)}/${id}`)
    if (status['state'] !== 'running') return status
    await sleep(100)
  }
}

async function execute (ws: string, tool: string, args: unknown): Promise<Json> {
  return expectStatus(200, 'POST', `/v1/tools/${tool}/execute`, { workspace: ws, arguments: args })
}

/** (a) Milliseconds to start `echo hi` and read its first output, each way. */
const startWays: Record<string, () => Promise<number>> = {
  exec_shell: async () => {
    const started = performance.now()
    const result = (await execute('a', 'exec_shell', { command: 'echo hi' }))['result'] as Json
    if (result['exit_code'] !== 0) throw new Error(`exec_shell: ${JSON.stringify(result)}`)
    return performance.now() - started
  },
  'POST process + long-poll output': async () => {
    const started = performance.now()
    const id = await startProcess('a', 'echo hi')
    for (;;) {
      const page = await expectStatus(200, 'GET', `${processes('a')}/${id}/output?after=0&wait_ms=5000`)
      if ((page['chunks'] as Json[]).length > 0) break
      if (page['process'].state !== 'running') throw new Error(`process ${id} ended without output: ${JSON.stringify(page)}`)
    }
    return performance.now() - started
  },
  'process_start (yield_ms 0) + process_output (wait_ms)': async () => {
    const started = performance.now()
    let result = (await execute('a', 'process_start', { command: 'echo hi', yield_ms: 0 }))['result'] as Json
    while (!String(result['output']).includes('hi')) {
      if (result['state'] !== 'running') throw new Error(`process ${String(result['process_id'])} ended without output: ${JSON.stringify(result)}`)
      result = (await execute('a', 'process_output', { process_id: result['process_id'], wait_ms: 5000 }))['result'] as Json
    }
    return performance.now() - started
  },
  'process_start (yield_ms 5000), to its end': async () => {
    const started = performance.now()
    const result = (await execute('a', 'process_start', { command: 'echo hi', yield_ms: 5000 }))['result'] as Json
    if (!String(result['output']).includes('hi')) throw new Error(`process_start: ${JSON.stringify(result)}`)
    return performance.now() - started
  },
}

/** Ways timed to the command's end rather than its first output: reported, not held to the budget. */
const TO_THE_END = new Set(['process_start (yield_ms 5000), to its end'])

async function measureStart (): Promise<void> {
  const names = Object.keys(startWays)
  const times = new Map<string, number[]>(names.map((name) => [name, []]))
  // Warm-up: the first process loads execa, the first calls compile schemas.
  for (const name of names) await (startWays[name] as () => Promise<number>)()
  for (let round = 0; round < ROUNDS; round++) {
    // Each way goes first as often as the others: the machine's drift must not fall on one side.
    for (let i = 0; i < names.length; i++) {
      const name = names[(round + i) % names.length] as string
      ;(times.get(name) as number[]).push(await (startWays[name] as () => Promise<number>)())
    }
  }
  const base = median(times.get('exec_shell') as number[])
  judge('exec_shell `echo hi`, median', `${round2(base)} ms`, 'baseline')
  for (const name of names.slice(1)) {
    const ms = median(times.get(name) as number[])
    if (TO_THE_END.has(name)) judge(`${name}, median`, `${round2(ms)} ms (${round2(ms / base)}×)`, 'reported')
    else judge(`${name}, first output, median`, `${round2(ms)} ms (${round2(ms / base)}×)`, `≤ ${START_BUDGET}× exec_shell`, ms / base <= START_BUDGET)
  }
}

async function settledRss (): Promise<number> {
  await sleep(SETTLE_MS)
  return rssMiB(server.pid)
}

/** (b) RSS growth with 100 idle running processes. */
async function measureIdle (): Promise<void> {
  const before = await settledRss()
  const started: Array<{ ws: string, id: string }> = []
  for (let i = 0; i < IDLE_PROCESSES; i++) {
    const ws = `idle${i % IDLE_WORKSPACES}`
    started.push({ ws, id: await startProcess(ws, 'sleep 600') })
  }
  const after = await settledRss()
  const running = (await Promise.all(Array.from({ length: IDLE_WORKSPACES }, (_, w) => expectStatus(200, 'GET', processes(`idle${w}`)))))
    .flatMap((list) => list['processes'] as Json[]).filter((p) => p['state'] === 'running').length
  judge(`${IDLE_PROCESSES} idle processes (${running} running): RSS growth`, `${round2(after - before)} MiB (${round2(before)} → ${round2(after)} MiB)`, `≤ ${IDLE_RSS_BUDGET_MIB} MiB`, running === IDLE_PROCESSES && after - before <= IDLE_RSS_BUDGET_MIB)
  await Promise.all(started.map(({ ws, id }) => expectStatus(200, 'POST', `${processes(ws)}/${id}/kill`, { signal: 'KILL' })))
}

/** (c) RSS peak while a process prints 1 GiB of text lines, then a cursor read from 0. */
async function measureFlood (): Promise<void> {
  const before = await settledRss()
  const started = performance.now()
  const { peak, value: end } = await peakRss(server.pid, async () => {
    const id = await startProcess('flood', "yes 'a line of text a process prints, again and again' | head -c 1G")
    return { id, process: await waitEnded('flood', id) }
  })
  const seconds = (performance.now() - started) / 1000
  const produced = end.process['next'] as number
  judge('1 GiB of output: RSS growth, peak', `${round2(peak - before)} MiB (${round2(before)} → ${round2(peak)} MiB; ${round2(produced / MiB)} MiB in ${round2(seconds)} s, ${end.process['state']} ${end.process['exit_code']})`, `≤ ${FLOOD_RSS_BUDGET_MIB} MiB`, produced === 1024 * MiB && peak - before <= FLOOD_RSS_BUDGET_MIB)
  const page = await expectStatus(200, 'GET', `${processes('flood')}/${end.id}/output?after=0&max_bytes=64`)
  const dropped = page['dropped_bytes'] as number
  const firstOffset = (page['chunks'] as Json[])[0]?.['offset'] as number
  judge('cursor read from 0 after it: dropped_bytes', `${dropped} (first chunk at ${firstOffset}, end ${produced})`, '= offset of the oldest byte kept', dropped > 0 && dropped === firstOffset)
}

/** One `sh -c true` through node:child_process, draining both pipes as exec_shell does. */
function spawnOnce (): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn('sh', ['-c', 'true'], { stdio: ['ignore', 'pipe', 'pipe'], detached: true })
    child.stdout.resume()
    child.stderr.resume()
    child.once('error', reject)
    child.once('close', (code) => code === 0 ? resolve() : reject(new Error(`sh exited ${code}`)))
  })
}

/** The same through execa, its streams drained by us (buffer: false), as ManagedProcess uses it. */
async function execaStreamed (): Promise<void> {
  const child = execa('sh', ['-c', 'true'], { stdin: 'ignore', stdout: 'pipe', stderr: 'pipe', detached: true, cleanup: false, buffer: false, reject: false })
  child.stdout?.resume()
  child.stderr?.resume()
  const result = await child
  if (result.exitCode !== 0) throw new Error(`sh exited ${result.exitCode}`)
}

/** The same through execa with its own buffering of the output (what replacing the capture would use). */
async function execaBuffered (): Promise<void> {
  const result = await execa('sh', ['-c', 'true'], { stdin: 'ignore', detached: true, cleanup: false, reject: false, maxBuffer: MiB })
  if (result.exitCode !== 0) throw new Error(`sh exited ${result.exitCode}`)
}

/** (d) Per-spawn wall time and this process's CPU (user + system, children not counted), alternating blocks. */
async function measureExeca (): Promise<void> {
  const ways: Record<string, () => Promise<void>> = {
    'node:child_process spawn': spawnOnce,
    'execa, buffer: false': execaStreamed,
    'execa, buffered (maxBuffer)': execaBuffered,
  }
  const names = Object.keys(ways)
  const wall = new Map<string, number[]>(names.map((name) => [name, []]))
  const cpu = new Map<string, number[]>(names.map((name) => [name, []]))
  for (const name of names) for (let i = 0; i < 5; i++) await (ways[name] as () => Promise<void>)()
  const rounds = Math.max(1, Math.round(ROUNDS / 3))
  for (let round = 0; round < rounds; round++) {
    for (let i = 0; i < names.length; i++) {
      const name = names[(round + i) % names.length] as string
      const cpuBefore = process.cpuUsage()
      const started = performance.now()
      for (let s = 0; s < SPAWNS; s++) await (ways[name] as () => Promise<void>)()
      const used = process.cpuUsage(cpuBefore)
      ;(wall.get(name) as number[]).push((performance.now() - started) / SPAWNS)
      ;(cpu.get(name) as number[]).push((used.user + used.system) / 1000 / SPAWNS)
    }
  }
  const baseWall = median(wall.get(names[0] as string) as number[])
  const baseCpu = median(cpu.get(names[0] as string) as number[])
  for (const name of names) {
    const w = median(wall.get(name) as number[])
    const c = median(cpu.get(name) as number[])
    judge(`\`sh -c true\`, ${name}, per spawn`, `${round2(w)} ms wall (${round2(w / baseWall)}×), ${round2(c)} ms CPU (${round2(c / baseCpu)}×)`, 'reported')
  }
  // A fresh Node each time: the import's cost as a service pays it once, with nothing cached in this process.
  const importMs = (specifier: string): number => Number(execFileSync(process.execPath, ['--input-type=module', '-e',
    `const t = performance.now(); await import('${specifier}'); console.log(performance.now() - t)`], { cwd: ROOT, encoding: 'utf8' }))
  const execaImport: number[] = []
  const childImport: number[] = []
  for (let i = 0; i < 10; i++) {
    execaImport.push(importMs('execa'))
    childImport.push(importMs('node:child_process'))
  }
  judge('import of execa in a fresh Node, median', `${round2(median(execaImport))} ms (node:child_process ${round2(median(childImport))} ms)`, 'reported')
}

try {
  const sandbox = (await expectStatus(200, 'GET', '/readyz'))['sandbox'] as string
  console.log(`processes: Node ${process.version}, ${os.cpus().length} vCPU, sandbox ${sandbox}, ${ROUNDS} rounds`)
  await measureStart()
  await measureIdle()
  await measureFlood()
  await measureExeca()
  console.log('\n| measure | result | budget | |\n| --- | --- | --- | --- |')
  for (const row of rows) console.log(`| ${row.join(' | ')} |`)
} finally {
  await server.stop()
  await rm(dir, { recursive: true, force: true })
}
