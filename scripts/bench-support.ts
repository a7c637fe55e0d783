/**
 * What the benchmark (scripts/bench.ts) needs around autocannon: starting a
 * Node child process and timing when it answers, sampling a process's
 * resident memory, and one load run reduced to the numbers we compare.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { closeSync, openSync, readFileSync } from 'node:fs'
import net from 'node:net'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import autocannon from 'autocannon'

/** The service as `npm start`, the bin and the image run it: the bundle of `npm run build` (scripts/rolldown.config.ts). */
export const SERVICE_ENTRY = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'dist', 'bundle', 'server.js')

export interface Child {
  child: ChildProcess
  base: string
  pid: number
  /** Milliseconds from spawn to the first 200 of each polled path (startNode's `paths`), in order. */
  startMs: Record<string, number>
  stop: () => Promise<void>
}

/** How often a starting server is asked whether it answers: often enough not to blur start-ups a few hundred ms long. */
const POLL_MS = 2

export async function freePort (): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer().once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo
      server.close(() => resolve(port))
    })
  })
}

/**
 * Starts `node args...` with PORT set and polls each of `paths` in turn
 * until it answers 200, noting when. Its stdout (the log) goes to
 * `logFile`, as a production log would go to a file or pipe; an unexpected
 * exit is reported with the log's tail.
 */
export async function startNode (args: string[], env: Record<string, string>, logFile: string, paths: string[] = ['/healthz']): Promise<Child> {
  const port = await freePort()
  const started = performance.now()
  const log = openSync(logFile, 'w')
  const child = spawn(process.execPath, args, { env: { PATH: process.env['PATH'] ?? '', HOST: '127.0.0.1', PORT: String(port), ...env }, stdio: ['ignore', log, 'inherit'] })
  closeSync(log)
  // Should the bench itself crash, its servers must not outlive it.
  const orphanGuard = (): void => { child.kill('SIGKILL') }
  process.once('exit', orphanGuard)
  let stopping = false
  const exited = new Promise<void>((resolve) => child.once('exit', (code, signal) => {
    if (!stopping) console.error(`${args.join(' ')} exited unexpectedly (${code ?? signal}); log tail:\n${readFileSync(logFile, 'utf8').slice(-2000)}`)
    process.off('exit', orphanGuard)
    resolve()
  }))
  const base = `http://127.0.0.1:${port}`
  const deadline = Date.now() + 15_000
  const startMs: Record<string, number> = {}
  for (const readyPath of paths) {
    for (;;) {
      if (child.exitCode !== null) throw new Error(`${args.join(' ')} exited with ${child.exitCode}`)
      const status = await fetch(`${base}${readyPath}`).then((r) => r.status, () => 0)
      if (status === 200) break
      if (Date.now() > deadline) throw new Error(`${args.join(' ')}: ${readyPath} not 200 within 15 s`)
      await new Promise((resolve) => setTimeout(resolve, POLL_MS))
    }
    startMs[readyPath] = performance.now() - started
  }
  return {
    child,
    base,
    pid: child.pid ?? 0,
    startMs,
    stop: async () => {
      stopping = true
      if (child.exitCode === null) child.kill('SIGTERM')
      await exited
    },
  }
}

/**
 * Resident set size of a process, in MiB (NaN once it is gone: a sampler
 * must not crash the run); `RssAnon` gives its private part alone, without
 * the pages of the node binary and other files it maps (shared with every
 * process mapping them).
 */
export function rssMiB (pid: number, field: 'VmRSS' | 'RssAnon' = 'VmRSS'): number {
  try {
    const match = new RegExp(`${field}:\\s+(\\d+) kB`).exec(readFileSync(`/proc/${pid}/status`, 'utf8'))
    return match ? Number(match[1]) / 1024 : Number.NaN
  } catch {
    return Number.NaN
  }
}

/** Samples a process's RSS every 20 ms while `work` runs; resolves to the peak (MiB) and work's value. */
export async function peakRss<T> (pid: number, work: () => Promise<T>): Promise<{ peak: number, value: T }> {
  let peak = rssMiB(pid)
  const timer = setInterval(() => { peak = Math.max(peak, rssMiB(pid)) }, 20)
  try {
    const value = await work()
    return { peak: Math.max(peak, rssMiB(pid)), value }
  } finally {
    clearInterval(timer)
  }
}

export interface LoadResult {
  /** Requests per second (mean over the run). */
  rps: number
  p50: number
  p99: number
  mean: number
  requests: number
}

export interface LoadOptions {
  url: string
  connections: number
  seconds: number
  body?: unknown
}

/** One autocannon run; any non-2xx answer or error fails the benchmark (a fast error is no result). */
export async function load (options: LoadOptions): Promise<LoadResult> {
  const result = await autocannon({
    url: options.url,
    connections: options.connections,
    duration: options.seconds,
    method: options.body === undefined ? 'GET' : 'POST',
    headers: options.body === undefined ? {} : { 'content-type': 'application/json' },
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
  })
  if (result.non2xx > 0 || result.errors > 0 || result.timeouts > 0) {
    throw new Error(`${options.url}: ${result.non2xx} non-2xx, ${result.errors} errors, ${result.timeouts} timeouts`)
  }
  return { rps: result.requests.average, p50: result.latency.p50, p99: result.latency.p99, mean: result.latency.average, requests: result.requests.total }
}

/** `true` loops of a raw spawn, sequentially: mean milliseconds per process (a bwrap argv gets `filter` on descriptor 3). */
export async function spawnLoop (argv: string[], cwd: string, count: number, filter?: Buffer): Promise<number> {
  const started = performance.now()
  const filtered = filter !== undefined && argv.includes('--seccomp')
  for (let i = 0; i < count; i++) {
    await new Promise<void>((resolve, reject) => {
      const child = spawn(argv[0] as string, argv.slice(1), { cwd, stdio: ['ignore', 'pipe', 'pipe', ...(filtered ? ['pipe' as const] : [])] })
      if (filtered) (child.stdio[3] as NodeJS.WritableStream).end(filter)
      child.stdout?.resume()
      child.stderr?.resume()
      child.once('error', reject)
      child.once('close', (code) => code === 0 ? resolve() : reject(new Error(`${argv.join(' ')} exited ${code}`)))
    })
  }
  return (performance.now() - started) / count
}

/** Rounded to two decimals, for the printed tables. */
export const round2 = (value: number): number => Math.round(value * 100) / 100

export function median (values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b)
  const middle = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[middle] as number : ((sorted[middle - 1] as number) + (sorted[middle] as number)) / 2
}

/** The run whose throughput is the median (its latencies come with it). */
export function medianRun (runs: LoadResult[]): LoadResult {
  const target = median(runs.map((r) => r.rps))
  return runs.reduce((best, r) => Math.abs(r.rps - target) < Math.abs(best.rps - target) ? r : best)
}

/**
 * Toolport and its baseline in alternating rounds (each order half of the
 * time) rather than one long run each: this machine's speed drifts by tens
 * of percent over seconds, and a drift must not fall on one side only.
 */
export async function alternate<T> (rounds: number, toolport: () => Promise<T>, bare: () => Promise<T>): Promise<{ toolport: T[], bare: T[] }> {
  const t: T[] = []
  const b: T[] = []
  for (let round = 0; round < rounds; round++) {
    if (round % 2 === 0) {
      b.push(await bare())
      t.push(await toolport())
    } else {
      t.push(await toolport())
      b.push(await bare())
    }
  }
  return { toolport: t, bare: b }
}
