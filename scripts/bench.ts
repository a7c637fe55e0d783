/**
 * `npm run bench`: Toolport's performance budget, measured in one run
 * against the built server (the bundle, with `npm start`'s node flags), a
 * bare Fastify server bundled and started the same way
 * (scripts/bench-bare.ts; BENCH_BARE=tsc takes its tsc build instead) and
 * raw spawns. Prints each measure, and each budget with PASS or MISS
 * (docs/PERFORMANCE.md). BENCH_SECONDS sets the length of each load run
 * (default 3), BENCH_ROUNDS how many alternating runs of each side are
 * compared (default 4), BENCH_START_ROUNDS how many start-ups of each
 * (default 10), BENCH_ONLY=start the start-up part alone.
 *
 * The service starts with the V8 compile cache `npm run build` writes
 * beside its bundle; the bare server gets one too (written by a first start
 * of it), since that is how the service is started. Start-up is also
 * reported against the bare server without one.
 */
import { mkdtemp, readdir, readFile, rm, truncate, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { fileURLToPath } from 'node:url'
import { build } from 'rolldown'
import { alternate, type Child, load, type LoadResult, median, medianRun, peakRss, round2, rssMiB, SERVICE_ENTRY as SERVER, spawnLoop, startNode } from './bench-support.ts'
import { bundleOf } from './rolldown.config.ts'

const ROOT = path.join(path.dirname(fileURLToPath(import.meta.url)), '..')
/** The baseline built like the service, bundled with the same options: no module-loading advantage on one side only. */
const BARE_BUNDLE = bundleOf(path.join(ROOT, 'scripts', 'bench-bare.ts'), path.join(ROOT, 'dist', 'bundle-bare'))
const BARE = process.env['BENCH_BARE'] === 'tsc' ? path.join(ROOT, 'dist', 'scripts', 'bench-bare.js') : path.join(BARE_BUNDLE.output.dir ?? '', 'bench-bare.js')
/** The bare server's compile cache, as the service has its own (NODE_COMPILE_CACHE does what server.ts's enableCompileCache does). */
const BARE_COMPILE_CACHE = { NODE_COMPILE_CACHE: path.join(ROOT, 'dist', 'bundle-bare', 'compile-cache') }
const SECONDS = Number(process.env['BENCH_SECONDS'] ?? 3)
const ROUNDS = Number(process.env['BENCH_ROUNDS'] ?? 4)
const START_ROUNDS = Number(process.env['BENCH_START_ROUNDS'] ?? 10)
const ONLY_START = process.env['BENCH_ONLY'] === 'start'
/** How long a started server is left alone before its memory at rest is read (past its start-up work and first GCs). */
const REST_MS = 2000
/** The budgets of issue 13: start-up and memory at rest against the bare server. */
const START_BUDGET = 1.5
const REST_RSS_BUDGET = 1.3
/** How many workspaces the root of the start-up with workspaces on disk holds, and how much longer than an empty root's that start may take. */
const MANY_WORKSPACES = 5000
const MANY_WORKSPACES_START_BUDGET = 1.1
/** exec_shell against a raw spawn with the same limits. */
const SPAWN_BUDGET = 1.3

const rows: string[][] = []

function report (what: string, measured: string, budget = '', ok?: boolean): void {
  const verdict = ok === undefined ? '' : ok ? 'PASS' : 'MISS'
  rows.push([what, measured, budget, verdict])
  console.log(`  ${what}: ${measured}${budget ? `  (budget: ${budget}) ${verdict}` : ''}`)
}

const fmt = (r: LoadResult) => `${Math.round(r.rps)} req/s, mean ${round2(r.mean)} ms, p50 ${r.p50} ms, p99 ${r.p99} ms`

async function findFile (dir: string, name: string): Promise<string> {
  for (const entry of await readdir(dir, { recursive: true, withFileTypes: true })) {
    if (entry.isFile() && entry.name === name) return path.join(entry.parentPath, entry.name)
  }
  throw new Error(`${name} not found under ${dir}`)
}

/** Node's flags for the service, as `npm start` and the image give them (package.json's start script). */
async function serviceNodeFlags (): Promise<string[]> {
  const pkg = JSON.parse(await readFile(path.join(ROOT, 'package.json'), 'utf8')) as { scripts: { start: string } }
  return pkg.scripts.start.split(' ').filter((word) => word.startsWith('--'))
}

type SandboxSetting = 'auto' | 'none' | 'bwrap'

/**
 * Toolport as `npm start` runs it, with a config naming only its sandbox
 * mode and `workspaces` (a root of its own unless it names one); waits for
 * /readyz.
 */
async function startToolport (dir: string, name: string, sandbox: SandboxSetting, workspaces: { root?: string, max_per_tenant?: number } = {}): Promise<{ server: Child, configFile: string, root: string }> {
  const root = workspaces.root ?? path.join(dir, `${name}-workspaces`)
  const configFile = path.join(dir, `${name}.json`)
  await writeFile(configFile, JSON.stringify({ workspaces: { ...workspaces, root }, sandbox: { mode: sandbox } }))
  const server = await startNode([...await serviceNodeFlags(), SERVER], { TOOLPORT_CONFIG: configFile }, path.join(dir, `${name}.log`), ['/healthz', '/readyz'])
  return { server, configFile, root }
}

async function startBare (dir: string, name: string, env: Record<string, string> = {}, compileCache = true): Promise<Child> {
  return startNode([...await serviceNodeFlags(), BARE], { ...(compileCache ? BARE_COMPILE_CACHE : {}), ...env }, path.join(dir, `${name}.log`))
}

const execute = (base: string, tool: string) => `${base}/v1/tools/${tool}/execute`

async function call (base: string, tool: string, body: unknown): Promise<Record<string, unknown>> {
  const response = await fetch(execute(base, tool), { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })
  const json = await response.json() as Record<string, unknown>
  if (response.status !== 200) throw new Error(`${tool}: ${response.status} ${JSON.stringify(json)}`)
  return json
}

interface StartSample {
  /** Milliseconds from spawn to the first answer of /healthz. */
  answering: number
  /** Milliseconds from spawn to /readyz 200 (Toolport only: the bare server is ready when it answers). */
  ready: number
  /** Resident memory (MiB) REST_MS after ready. */
  restRss: number
  /** Its private part (anonymous memory: the heaps, not the mapped node binary). */
  restAnon: number
}

/** Makes MANY_WORKSPACES persistent workspaces under `root`, through the service's API, as its users would have. */
async function makeManyWorkspaces (dir: string, root: string): Promise<void> {
  const { server } = await startToolport(dir, 'many-workspaces-maker', 'none', { root, max_per_tenant: MANY_WORKSPACES })
  try {
    let next = 0
    await Promise.all(Array.from({ length: 16 }, async () => {
      while (next < MANY_WORKSPACES) {
        const id = `w${next++}`
        const response = await fetch(`${server.base}/v1/workspaces`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ id }) })
        if (response.status !== 201) throw new Error(`creating workspace ${id}: ${response.status} ${await response.text()}`)
      }
    }))
  } finally {
    await server.stop()
  }
}

/**
 * Start-up and memory at rest: the bare server and Toolport (default
 * config, sandbox `auto` as a first `npm start` has it) started in turn,
 * START_ROUNDS times each. Ratios are taken round by round and their
 * median is held against the budgets. Toolport also starts on a root
 * holding MANY_WORKSPACES workspaces: what is on disk must not lengthen
 * the start.
 */
async function benchStart (dir: string): Promise<void> {
  console.log(`\nstart-up and memory at rest against a bare Fastify server (${START_ROUNDS} start-ups of each, in turn)`)
  const manyRoot = path.join(dir, 'many-workspaces')
  await makeManyWorkspaces(dir, manyRoot)
  let count = 0
  const sample = async (start: () => Promise<Child>): Promise<StartSample> => {
    const server = await start()
    try {
      await sleep(REST_MS)
      const answering = server.startMs['/healthz'] as number
      return { answering, ready: server.startMs['/readyz'] ?? answering, restRss: rssMiB(server.pid), restAnon: rssMiB(server.pid, 'RssAnon') }
    } finally {
      await server.stop()
    }
  }
  // Its first start writes the bare server's compile cache.
  await (await startBare(dir, 'bare-compile-cache')).stop()
  const sides = {
    toolport: async () => sample(async () => (await startToolport(dir, `start-${++count}`, 'auto')).server),
    bare: async () => sample(() => startBare(dir, `bare-start-${++count}`)),
    bareUncached: async () => sample(() => startBare(dir, `bare-uncached-start-${++count}`, {}, false)),
    toolportManyWorkspaces: async () => sample(async () => (await startToolport(dir, `start-${++count}`, 'auto', { root: manyRoot })).server),
  }
  const runs: Record<keyof typeof sides, StartSample[]> = { toolport: [], bare: [], bareUncached: [], toolportManyWorkspaces: [] }
  const order = Object.keys(sides) as (keyof typeof sides)[]
  for (let round = 0; round < START_ROUNDS; round++) {
    // Each side goes first, second, and so on equally often: a drift of the machine falls on all of them.
    const first = round % order.length
    for (const side of [...order.slice(first), ...order.slice(0, first)]) runs[side].push(await sides[side]())
  }
  const paired = (of: (s: StartSample) => number, baseline = runs.bare) => median(runs.toolport.map((t, i) => of(t) / of(baseline[i] as StartSample)))
  const ms = (values: number[]) => `${Math.round(median(values))} ms`
  report('bare server: start to first /healthz answer', ms(runs.bare.map((s) => s.answering)))
  report('bare server without a compile cache: start to first /healthz answer', ms(runs.bareUncached.map((s) => s.answering)))
  report('Toolport: start to first /healthz answer', ms(runs.toolport.map((s) => s.answering)))
  report('Toolport: start to /readyz 200 (sandbox probed)', ms(runs.toolport.map((s) => s.ready)))
  const startRatio = paired((s) => s.answering)
  report('start-up ratio (first /healthz answer)', `${round2(startRatio)}×`, `≤ ${START_BUDGET}×`, startRatio <= START_BUDGET)
  report('start-up ratio against the bare server without a compile cache', `${round2(paired((s) => s.answering, runs.bareUncached))}×`)
  report('start-up ratio to /readyz 200', `${round2(paired((s) => s.ready))}×`)
  report(`Toolport on a root of ${MANY_WORKSPACES.toLocaleString('en')} workspaces: start to first /healthz answer`, ms(runs.toolportManyWorkspaces.map((s) => s.answering)))
  const manyRatio = median(runs.toolportManyWorkspaces.map((t, i) => t.answering / (runs.toolport[i] as StartSample).answering))
  report(`start-up on ${MANY_WORKSPACES.toLocaleString('en')} workspaces against an empty root`, `${round2(manyRatio)}×`, `≤ ${MANY_WORKSPACES_START_BUDGET}×`, manyRatio <= MANY_WORKSPACES_START_BUDGET)
  report('bare server: RSS at rest', `${Math.round(median(runs.bare.map((s) => s.restRss)))} MiB`)
  report('Toolport: RSS at rest', `${Math.round(median(runs.toolport.map((s) => s.restRss)))} MiB`)
  const rssRatio = paired((s) => s.restRss)
  report('RSS at rest ratio', `${round2(rssRatio)}×`, `≤ ${REST_RSS_BUDGET}×`, rssRatio <= REST_RSS_BUDGET)
  // The node binary's pages in the RSS vary by a few MiB from start to start (which code ran, what the page cache holds).
  report('private memory at rest (RssAnon), bare server and Toolport', `${Math.round(median(runs.bare.map((s) => s.restAnon)))} and ${Math.round(median(runs.toolport.map((s) => s.restAnon)))} MiB (${round2(paired((s) => s.restAnon))}×)`)
}

/**
 * `sh -c true` as a program would spawn it raw: with Toolport's default
 * limits set by `prlimit` (`limited`), or with none; for the sandbox, inside
 * bwrap with exactly the flags Toolport's runner gives it.
 */
async function rawArgv (sandbox: 'none' | 'bwrap', cwd: string, hidePaths: string[], limited = true): Promise<string[]> {
  const { defaultConfig } = await import(path.join(ROOT, 'dist', 'src', 'config.js'))
  const { findPrlimit, limitPrefix } = await import(path.join(ROOT, 'dist', 'src', 'sandbox', 'limits.js'))
  const s = defaultConfig().sandbox
  const limits = { cpuSeconds: s.cpu_seconds, maxFileBytes: s.max_file_bytes, maxProcesses: s.max_processes, maxMemoryBytes: s.max_memory_bytes }
  if (sandbox === 'none') return [...(limited ? limitPrefix(findPrlimit(), limits) : []), 'sh', '-c', 'true']
  const { BwrapRunner } = await import(path.join(ROOT, 'dist', 'src', 'sandbox', 'bwrap-runner.js'))
  const { BWRAP } = await import(path.join(ROOT, 'dist', 'src', 'sandbox', 'programs.js'))
  const runner = new BwrapRunner({ network: false, limits, prlimit: findPrlimit(), hidePaths })
  return [BWRAP, ...runner.argv({ command: 'sh', args: ['-c', 'true'], cwd, timeoutMs: 30_000, signal: new AbortController().signal, maxOutputBytes: 65_536 }, limited)]
}

/** read_file of a 1 KiB file at 1 and 32 connections, and a batch of 10 against 10 single calls. */
async function benchReads (toolport: Child): Promise<void> {
  const readBody = { workspace: 'bench', arguments: { path: 'data.txt' } }
  const url = execute(toolport.base, 'read_file')
  console.log('\nread_file of a 1 KiB file')
  for (const connections of [1, 32]) {
    await load({ url, connections, seconds: 2, body: readBody })
    const { peak, value } = await peakRss(toolport.pid, () => load({ url, connections, seconds: SECONDS, body: readBody }))
    // autocannon's latencies have 1 ms resolution; the time per request comes from the throughput.
    report(`read_file, ${connections} connection${connections > 1 ? 's' : ''}`, `${Math.round(value.rps)} req/s, ${round2((1000 * connections) / value.rps)} ms per request, p99 ${value.p99} ms`)
    if (connections === 32) report('RSS under load (32 connections of read_file)', `${Math.round(peak)} MiB`)
  }

  console.log('\na batch of 10 reads vs 10 single calls (1 connection)')
  const single = await load({ url, connections: 1, seconds: SECONDS, body: readBody })
  const calls = Array.from({ length: 10 }, (_, i) => ({ id: `c${i}`, name: 'read_file', arguments: { path: 'data.txt' } }))
  const batch = await load({ url: `${toolport.base}/v1/tool-calls`, connections: 1, seconds: SECONDS, body: { workspace: 'bench', calls } })
  const perReadSingle = 1000 / single.rps
  const perReadBatch = 1000 / (batch.rps * 10)
  report('10 single calls', `${round2(perReadSingle * 10)} ms`)
  report('one batch of 10', `${round2(perReadBatch * 10)} ms (${round2(perReadSingle / perReadBatch)}× faster per read)`, 'batch ≤ singles', perReadBatch <= perReadSingle)
}

/**
 * exec_shell `true` against a bare route spawning `sh -c true` with the same
 * limits the standard way (`prlimit`, and for the sandbox the same bwrap
 * flags): the budget. For reference, also against a bare route spawning
 * `sh -c true` with no limit at all (`kind`-bare).
 */
async function benchSpawn (label: string, toolport: Child, bare: Child, kind: string, argv: string[], cwd: string): Promise<void> {
  const body = { arguments: { command: 'true' } }
  const spawnRoute = (which: string) => () => load({ url: `${bare.base}/spawn/${which}`, connections: 1, seconds: SECONDS, body: {} })
  const exec = () => load({ url: execute(toolport.base, 'exec_shell'), connections: 1, seconds: SECONDS, body })
  await load({ url: execute(toolport.base, 'exec_shell'), connections: 1, seconds: 1, body })
  await load({ url: `${bare.base}/spawn/${kind}`, connections: 1, seconds: 1, body: {} })
  const { SECCOMP_FILTER } = await import(path.join(ROOT, 'dist', 'src', 'sandbox', 'seccomp.js'))
  const raw = await spawnLoop(argv, cwd, 100, SECCOMP_FILTER)
  const runs = await alternate(ROUNDS, exec, spawnRoute(kind))
  const [toolportRun, bareRun] = [medianRun(runs.toolport), medianRun(runs.bare)]
  const unlimited = medianRun([await spawnRoute(`${kind}-bare`)(), await spawnRoute(`${kind}-bare`)()])
  report(`${label}: raw spawn loop in the bench process (no HTTP)`, `${round2(raw)} ms per process`)
  report(`${label}: bare route spawning it with the same limits`, `${round2(bareRun.mean)} ms mean, ${fmt(bareRun)}`)
  report(`${label}: bare route spawning it without limits`, `${round2(unlimited.mean)} ms mean, ${fmt(unlimited)}`)
  report(`${label}: exec_shell true`, `${round2(toolportRun.mean)} ms mean, ${fmt(toolportRun)}`)
  report(`${label}: cost ratio (same limits)`, `${round2(toolportRun.mean / bareRun.mean)}×`, `≤ ${SPAWN_BUDGET}×`, toolportRun.mean / bareRun.mean <= SPAWN_BUDGET)
  report(`${label}: cost ratio against no limits`, `${round2(toolportRun.mean / unlimited.mean)}×`)
}

async function benchMemory (toolport: Child, workspaceDir: string): Promise<void> {
  console.log('\nresident memory of the server')
  await truncate(path.join(workspaceDir, 'big.bin'), 2 * 1024 ** 3).catch(async () => {
    await writeFile(path.join(workspaceDir, 'big.bin'), '')
    await truncate(path.join(workspaceDir, 'big.bin'), 2 * 1024 ** 3)
  })
  const head = await peakRss(toolport.pid, () => call(toolport.base, 'read_file', { workspace: 'bench', arguments: { path: 'big.bin' } }))
  report('RSS reading a 2 GiB sparse file (read_file, first page)', `${Math.round(head.peak)} MiB`)
  const scan = await peakRss(toolport.pid, () => call(toolport.base, 'read_file', { workspace: 'bench', arguments: { path: 'big.bin', offset: 2 } }))
  report('RSS scanning all 2 GiB (read_file offset: 2)', `${Math.round(scan.peak)} MiB`)
  const started = performance.now()
  const print = await peakRss(toolport.pid, () => call(toolport.base, 'exec_shell', { arguments: { command: 'yes | head -c 1073741824', timeout: 120 } }))
  const seconds = Math.round((performance.now() - started) / 100) / 10
  report('RSS while exec_shell prints 1 GiB', `${Math.round(print.peak)} MiB (${seconds} s, truncated: ${String(print.value['truncated'])})`)
}

function printTable (): void {
  console.log('\n| measure | result | budget | |\n| --- | --- | --- | --- |')
  for (const row of rows) console.log(`| ${row.join(' | ')} |`)
}

async function main (): Promise<void> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'toolport-bench-'))
  const servers: Child[] = []
  try {
    console.log(`Node ${process.version}, ${os.cpus().length} × ${os.cpus()[0]?.model ?? 'unknown CPU'}, ${Math.round(os.totalmem() / 1024 ** 3)} GiB RAM, ${SECONDS} s per run`)
    await build({ ...BARE_BUNDLE, logLevel: 'warn' })
    console.log(`bare server: ${path.relative(ROOT, BARE)}`)
    await benchStart(dir)
    if (ONLY_START) return printTable()

    const plain = await startToolport(dir, 'plain', 'none')
    servers.push(plain.server)
    await call(plain.server.base, 'write_file', { workspace: 'bench', arguments: { path: 'data.txt', content: 'x'.repeat(1023) + '\n' } })
    const file = await findFile(plain.root, 'data.txt')
    await benchReads(plain.server)

    const scratch = await mkdtemp(path.join(dir, 'scratch-'))
    const plainArgv = await rawArgv('none', scratch, [])
    const bare = await startBare(dir, 'bare', { BENCH_CWD: scratch, BENCH_ARGV_PLAIN: JSON.stringify(plainArgv), BENCH_ARGV_PLAIN_BARE: JSON.stringify(await rawArgv('none', scratch, [], false)) })
    servers.push(bare)
    console.log('\nexec_shell `true` vs a raw spawn of the same argv')
    await benchSpawn('sandbox off', plain.server, bare, 'plain', plainArgv, scratch)
    await benchMemory(plain.server, path.dirname(file))
    await plain.server.stop()
    await bare.stop()

    const sandboxed = await startToolport(dir, 'sandboxed', 'bwrap').catch((error: Error) => {
      report('sandbox on', `skipped: bubblewrap does not work here (${error.message})`)
      return undefined
    })
    if (sandboxed) {
      servers.push(sandboxed.server)
      const bwrapArgv = await rawArgv('bwrap', scratch, [sandboxed.root, sandboxed.configFile])
      const bwrapBare = await rawArgv('bwrap', scratch, [sandboxed.root, sandboxed.configFile], false)
      const { SECCOMP_FILTER } = await import(path.join(ROOT, 'dist', 'src', 'sandbox', 'seccomp.js'))
      const bareBwrap = await startBare(dir, 'bare-bwrap', { BENCH_CWD: scratch, BENCH_ARGV_BWRAP: JSON.stringify(bwrapArgv), BENCH_ARGV_BWRAP_BARE: JSON.stringify(bwrapBare), BENCH_SECCOMP: (SECCOMP_FILTER as Buffer).toString('base64') })
      servers.push(bareBwrap)
      await benchSpawn('sandbox on (bubblewrap)', sandboxed.server, bareBwrap, 'bwrap', bwrapArgv, scratch)
    }
    printTable()
  } finally {
    await Promise.all(servers.map((server) => server.stop()))
    await rm(dir, { recursive: true, force: true })
  }
}

await main()
