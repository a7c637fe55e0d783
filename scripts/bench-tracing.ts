/**
 * The tracing and idempotency budgets: execute(read_file) of a 1 KiB file
 * against the built server (run `npm run build` first) with tracing off,
 * with tracing on to a local OTLP/HTTP receiver, and with tracing off and a
 * fresh Idempotency-Key on every call ("keyed"), in alternating rounds of
 * one run. With
 * BENCH_BASELINE=<path to another build's entry (dist/bundle/server.js)> (the code
 * before tracing, say, built in a git worktree) that build is measured in the
 * same rounds, for "off costs what it did before". BENCH_SECONDS (default 3),
 * BENCH_ROUNDS (default 4), BENCH_CONNECTIONS (default 1).
 *
 *   node scripts/bench-tracing.ts
 */
import { type ChildProcess, spawn } from 'node:child_process'
import http from 'node:http'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import type net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import autocannon from 'autocannon'
import { SERVICE_ENTRY as SERVER } from './bench-support.ts'

const SECONDS = Number(process.env['BENCH_SECONDS'] ?? 3)
const ROUNDS = Number(process.env['BENCH_ROUNDS'] ?? 4)
const CONNECTIONS = Number(process.env['BENCH_CONNECTIONS'] ?? 1)
const WARMUP_SECONDS = 5

interface Side { name: string, base: string, child: ChildProcess, rps: number[], keyed?: boolean }

/** A collector stand-in that takes every export and answers 200, counting the bytes. */
async function startReceiver (): Promise<{ base: string, bytes: () => number, close: () => void }> {
  let bytes = 0
  const server = http.createServer((req, res) => {
    req.on('data', (chunk: Buffer) => { bytes += chunk.length })
    req.on('end', () => { res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end() })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return { base: `http://127.0.0.1:${(server.address() as net.AddressInfo).port}`, bytes: () => bytes, close: () => { server.closeAllConnections(); server.close() } }
}

async function freePort (): Promise<number> {
  const server = http.createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as net.AddressInfo
  await new Promise((resolve) => server.close(resolve))
  return port
}

async function startSide (name: string, entry: string, dir: string, env: Record<string, string>): Promise<Side> {
  const port = await freePort()
  const config = path.join(dir, `${name}.json`)
  await writeFile(config, JSON.stringify({ workspaces: { root: path.join(dir, name) }, logging: { level: 'warn' } }))
  const child = spawn(process.execPath, ['--max-semi-space-size=8', entry], {
    env: { PATH: process.env['PATH'] ?? '', HOST: '127.0.0.1', PORT: String(port), TOOLPORT_CONFIG: config, ...env },
    stdio: ['ignore', 'ignore', 'inherit'],
  })
  const base = `http://127.0.0.1:${port}`
  for (let i = 0; ; i++) {
    try {
      if ((await fetch(`${base}/readyz`)).ok) break
    } catch {}
    if (i > 150) throw new Error(`${name} did not start`)
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
  const post = (url: string, body: unknown) => fetch(`${base}${url}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })
  await post('/v1/workspaces', { id: 'bench' })
  await post('/v1/tools/write_file/execute', { workspace: 'bench', arguments: { path: 'data.txt', content: 'x'.repeat(1023) + '\n' } })
  return { name, base, child, rps: [] }
}

let keys = 0

async function load (side: Side, seconds: number): Promise<autocannon.Result> {
  return autocannon({
    ...(side.keyed === true ? { setupRequest: (request: autocannon.Request) => ({ ...request, headers: { ...request.headers, 'idempotency-key': `bench-${process.pid}-${keys++}` } }) } : {}),
    url: `${side.base}/v1/tools/read_file/execute`,
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ workspace: 'bench', arguments: { path: 'data.txt' } }),
    connections: CONNECTIONS,
    duration: seconds,
  })
}

const median = (values: number[]): number => {
  const sorted = [...values].sort((a, b) => a - b)
  const middle = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[middle] as number : ((sorted[middle - 1] as number) + (sorted[middle] as number)) / 2
}

async function main (): Promise<void> {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'toolport-bench-tracing-'))
  const receiver = await startReceiver()
  const sides: Side[] = []
  try {
    const baseline = process.env['BENCH_BASELINE']
    if (baseline) sides.push(await startSide('before', path.resolve(baseline), dir, {}))
    sides.push(await startSide('off', SERVER, dir, {}))
    sides.push(await startSide('on', SERVER, dir, { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.base }))
    const off = sides.find((s) => s.name === 'off') as Side
    sides.push({ ...off, name: 'keyed', rps: [], keyed: true })
    for (const side of sides) await load(side, WARMUP_SECONDS)
    for (let round = 0; round < ROUNDS; round++) {
      // Each round in another order: this machine's speed drifts, and a drift must not fall on one side only.
      const order = round % 2 === 0 ? sides : [...sides].reverse()
      for (const side of order) {
        side.rps.push((await load(side, SECONDS)).requests.average)
      }
    }
    // The time per call, from the throughput: autocannon's latencies are whole milliseconds, coarser than a call.
    const perCall = (side: Side): number => CONNECTIONS * 1000 / median(side.rps)
    console.log(`execute(read_file), 1 KiB, ${CONNECTIONS} connection(s), median of ${ROUNDS} rounds of ${SECONDS} s:`)
    for (const side of sides) {
      console.log(`  ${side.name.padEnd(7)} ${perCall(side).toFixed(3)} ms per call, ${Math.round(median(side.rps))} req/s, ${(perCall(side) / perCall(off)).toFixed(3)}× off`)
    }
    console.log(`  spans exported to the receiver: ${receiver.bytes()} bytes`)
  } finally {
    for (const side of new Set(sides.map((s) => s.child))) side.kill('SIGKILL')
    receiver.close()
    await rm(dir, { recursive: true, force: true })
  }
}

await main()
