/**
 * Repo-scale workspaces (issue 14): the same operations in a workspace of
 * 10 files and one of 50,000 (a node_modules of 100 packages × 500 files of
 * 200 bytes), interleaved in one run against the built server
 * (the bundle, dist/bundle/server.js), reporting the median of each and the ratio
 * big/small; then the archive download of both and of a 1 GiB workspace,
 * with the server's RSS growth. Prints PASS/MISS against the budget.
 *
 * `npm run build && node scripts/bench-repo-scale.ts`. BENCH_ROUNDS sets the
 * rounds (default 15); BENCH_THINK_MS the pause between rounds (default 1500),
 * standing for the model's turn between an agent's calls, in which the scan
 * a process left behind runs.
 */
import { randomBytes } from 'node:crypto'
import { mkdir, mkdtemp, open, rm, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { median, peakRss, round2, rssMiB, SERVICE_ENTRY as SERVER, startNode } from './bench-support.ts'

const ROUNDS = Number(process.env['BENCH_ROUNDS'] ?? 15)
const THINK_MS = Number(process.env['BENCH_THINK_MS'] ?? 1500)
const MiB = 1024 * 1024

type Workspace = 'small' | 'big'
const WORKSPACES: Workspace[] = ['small', 'big']

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

const dir = await mkdtemp(path.join(os.tmpdir(), 'toolport-bench-repo-'))
const root = path.join(dir, 'workspaces')
const configFile = path.join(dir, 'config.json')
await writeFile(configFile, JSON.stringify({
  workspaces: { root, max_bytes: 4 * 1024 * MiB },
  tools: { builtin: ['*'] },
  limits: { queue_timeout_ms: 120_000 },
}))
// With `npm start`'s node flags, as the service runs.
const server = await startNode(['--max-semi-space-size=8', SERVER], { TOOLPORT_CONFIG: configFile }, path.join(dir, 'server.log'), ['/healthz', '/readyz'])

async function call (workspace: string, tool: string, args: unknown): Promise<number> {
  const started = performance.now()
  const response = await fetch(`${server.base}/v1/tools/${tool}/execute`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ workspace, arguments: args }) })
  const body = await response.text()
  if (response.status !== 200) throw new Error(`${tool} in ${workspace}: ${response.status} ${body.slice(0, 300)}`)
  return performance.now() - started
}

async function info (workspace: string): Promise<{ ms: number, files: number, bytes: number }> {
  const started = performance.now()
  const response = await fetch(`${server.base}/v1/workspaces/${workspace}`)
  const body = await response.json() as { files: number, bytes: number }
  return { ms: performance.now() - started, files: body.files, bytes: body.bytes }
}

/** Downloads the archive, reading and dropping it as it comes; the time and the server's RSS growth over its level before. */
async function download (workspace: string): Promise<{ ms: number, bytes: number, growthMiB: number }> {
  const before = rssMiB(server.pid)
  const started = performance.now()
  const { peak, value: bytes } = await peakRss(server.pid, async () => {
    const response = await fetch(`${server.base}/v1/workspaces/${workspace}/archive`)
    if (response.status !== 200 || !response.body) throw new Error(`archive of ${workspace}: ${response.status}`)
    let total = 0
    for await (const chunk of response.body) total += (chunk as Uint8Array).byteLength
    return total
  })
  return { ms: performance.now() - started, bytes, growthMiB: peak - before }
}

try {
  console.log(`repo-scale workspaces: Node ${process.version}, ${os.cpus().length} vCPU, ${ROUNDS} rounds`)
  // The 50,000 files are made by a command, as an install would make them.
  const setup = performance.now()
  await call('big', 'exec_shell', {
    command: 'for d in $(seq 0 99); do mkdir -p node_modules/p$d; for f in $(seq 0 499); do printf "%0200d" 0 > node_modules/p$d/f$f.js; done; done; for f in $(seq 1 6); do echo x > top$f.txt; done',
    timeout: 300,
  })
  for (let f = 0; f < 10; f++) await call('small', 'write_file', { path: `file${f}.txt`, content: 'x'.repeat(200) })
  for (const workspace of WORKSPACES) {
    await call(workspace, 'write_file', { path: 'grow.txt', content: 'g' })
    await call(workspace, 'write_file', { path: 'edit.txt', content: 'version v0 of the text\n' })
  }
  // The first look waits for the scan the install left behind.
  const counted = await info('big')
  console.log(`  setup ${Math.round(performance.now() - setup)} ms; big workspace: ${counted.files} files, ${counted.bytes} bytes`)

  const ops: Array<{ name: string, run: (ws: Workspace, round: number) => Promise<number> }> = [
    { name: 'write_file (new 13-byte file)', run: (ws, r) => call(ws, 'write_file', { path: `new/r${r}.txt`, content: 'hello, world!' }) },
    { name: 'write_file (grow a file)', run: (ws, r) => call(ws, 'write_file', { path: 'grow.txt', content: 'g'.repeat(100 * (r + 1)) }) },
    { name: 'edit_file (grows)', run: (ws, r) => call(ws, 'edit_file', { path: 'edit.txt', old_text: `v${r}`, new_text: `v${r + 1} (edited)` }) },
    { name: 'read_file', run: (ws) => call(ws, 'read_file', { path: 'grow.txt' }) },
    { name: 'list_directory .', run: (ws) => call(ws, 'list_directory', { path: '.' }) },
    { name: 'exec_shell true', run: (ws) => call(ws, 'exec_shell', { command: 'true' }) },
    { name: 'GET /v1/workspaces/{id}', run: async (ws) => (await info(ws)).ms },
    {
      name: 'write_file right after exec_shell touched a file',
      run: async (ws, r) => {
        await call(ws, 'exec_shell', { command: `echo ${r} >> touched.txt` })
        return call(ws, 'write_file', { path: `after/r${r}.txt`, content: 'after a process' })
      },
    },
  ]
  const times = new Map<string, Record<Workspace, number[]>>(ops.map((op) => [op.name, { small: [], big: [] }]))
  for (let round = 0; round < ROUNDS; round++) {
    for (const op of ops) {
      const order = (round + ops.indexOf(op)) % 2 === 0 ? WORKSPACES : [...WORKSPACES].reverse()
      for (const ws of order) (times.get(op.name) as Record<Workspace, number[]>)[ws].push(await op.run(ws, round))
    }
    await sleep(THINK_MS)
  }

  const rows: string[][] = []
  const judge = (what: string, measured: string, budget: string, ok: boolean): void => {
    rows.push([what, measured, budget, ok ? 'PASS' : 'MISS'])
  }
  for (const op of ops) {
    const { small, big } = times.get(op.name) as Record<Workspace, number[]>
    const ratio = median(big) / median(small)
    const measured = `${round2(median(small))} ms → ${round2(median(big))} ms (${round2(ratio)}×)`
    if (op.name.startsWith('GET')) judge(`${op.name}, 50,000 files, median`, measured, '≤ 100 ms', median(big) <= 100)
    else judge(op.name, measured, '≤ 1.5×', ratio <= 1.5)
  }
  const last = await info('big')
  console.log(`  big workspace after the run: ${last.files} files, ${last.bytes} bytes`)

  // Archives: the two workspaces, then one of 1 GiB (15 sparse files of 64 MiB and one of 64 MiB of random bytes).
  const small = await download('small')
  const big = await download('big')
  judge('archive download time, 50,000 vs 10 files', `${Math.round(small.ms)} ms → ${Math.round(big.ms)} ms`, 'reported', true)
  judge('archive download RSS growth, 50,000 files', `${round2(big.growthMiB)} MiB (${round2(big.bytes / MiB)} MiB sent)`, '≤ 64 MiB', big.growthMiB <= 64)
  await fetch(`${server.base}/v1/workspaces`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ id: 'gib' }) })
  const gib = path.join(root, 'tenants', 'default', 'ws', 'gib')
  await mkdir(gib, { recursive: true })
  for (let i = 0; i < 15; i++) {
    const handle = await open(path.join(gib, `sparse${i}.bin`), 'w')
    await handle.truncate(64 * MiB)
    await handle.close()
  }
  const random = await open(path.join(gib, 'random.bin'), 'w')
  for (let i = 0; i < 64; i++) await random.write(randomBytes(MiB))
  await random.close()
  const huge = await download('gib')
  judge('archive download of 1 GiB: RSS growth', `${round2(huge.growthMiB)} MiB in ${round2(huge.ms / 1000)} s (${round2(huge.bytes / MiB)} MiB sent)`, '≤ 64 MiB', huge.growthMiB <= 64)

  console.log('\n| operation | 10 files → 50,000 files | budget | |\n| --- | --- | --- | --- |')
  for (const row of rows) console.log(`| ${row.join(' | ')} |`)
} finally {
  await server.stop()
  await rm(dir, { recursive: true, force: true })
}
