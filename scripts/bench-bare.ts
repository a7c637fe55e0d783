/**
 * The baseline of the benchmark: a bare Fastify server doing what a Toolport
 * call does at its core, with nothing around it.
 *   GET  /healthz       answers ok (readiness)
 *   POST /read          takes the same JSON body as Toolport's execute (`{workspace, arguments: {path}}`),
 *                       reads that file in BENCH_DIR (the same 1 KiB file) and answers it as JSON
 *   POST /spawn/:kind   runs the argv of BENCH_ARGV_<KIND> (JSON; `plain-bare` reads BENCH_ARGV_PLAIN_BARE) in BENCH_CWD and answers its exit code
 */
import { spawn } from 'node:child_process'
import { readFile } from 'node:fs/promises'
import path from 'node:path'
import Fastify from 'fastify'

const dir = process.env['BENCH_DIR'] ?? ''
const cwd = process.env['BENCH_CWD'] ?? process.cwd()
const argvOf = (kind: string): string[] => JSON.parse(process.env[`BENCH_ARGV_${kind.toUpperCase().replaceAll('-', '_')}`] ?? '[]') as string[]

function run (argv: string[]): Promise<number | null> {
  return new Promise((resolve, reject) => {
    const child = spawn(argv[0] as string, argv.slice(1), { cwd, stdio: ['ignore', 'pipe', 'pipe'] })
    let stdout = ''
    child.stdout.on('data', (chunk: Buffer) => { stdout += chunk.toString() })
    child.stderr.resume()
    child.once('error', reject)
    child.once('close', (code) => resolve(stdout.length >= 0 ? code : null))
  })
}

const app = Fastify({ logger: false })
app.get('/healthz', async () => ({ status: 'ok' }))
// What a minimal honest endpoint does: parse the JSON body, read the file it names, answer JSON (no containment check).
app.post<{ Body: { arguments: { path: string } } }>('/read', async (request) => ({ content: await readFile(path.join(dir, request.body.arguments.path), 'utf8') }))
app.post<{ Params: { kind: string } }>('/spawn/:kind', async (request) => ({ exit_code: await run(argvOf(request.params.kind)) }))
await app.listen({ host: '127.0.0.1', port: Number(process.env['PORT']) })
process.once('SIGTERM', () => { void app.close().then(() => process.exit(0)) })
