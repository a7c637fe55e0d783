/**
 * The baseline of the benchmark: a bare Fastify server, started as the
 * service is, doing what a Toolport call does at its core with nothing
 * around it.
 *   GET  /healthz       answers ok (it is ready when it answers)
 *   POST /spawn/:kind   runs the argv of BENCH_ARGV_<KIND> (JSON; `plain-bare` reads BENCH_ARGV_PLAIN_BARE) in BENCH_CWD and answers its exit code;
 *                       a bwrap argv that reads a seccomp filter from descriptor 3 gets BENCH_SECCOMP (base64) there, as the service's runner hands it
 */
import { spawn } from 'node:child_process'
import Fastify from 'fastify'

const cwd = process.env['BENCH_CWD'] ?? process.cwd()
const argvOf = (kind: string): string[] => JSON.parse(process.env[`BENCH_ARGV_${kind.toUpperCase().replaceAll('-', '_')}`] ?? '[]') as string[]
const filter = Buffer.from(process.env['BENCH_SECCOMP'] ?? '', 'base64')

function run (argv: string[]): Promise<number | null> {
  return new Promise((resolve, reject) => {
    const filtered = argv.includes('--seccomp')
    const child = spawn(argv[0] as string, argv.slice(1), { cwd, stdio: ['ignore', 'pipe', 'pipe', ...(filtered ? ['pipe' as const] : [])] })
    if (filtered) (child.stdio[3] as NodeJS.WritableStream).end(filter)
    let stdout = ''
    child.stdout?.on('data', (chunk: Buffer) => { stdout += chunk.toString() })
    child.stderr?.resume()
    child.once('error', reject)
    child.once('close', (code) => resolve(stdout.length >= 0 ? code : null))
  })
}

const app = Fastify({ logger: false })
app.get('/healthz', async () => ({ status: 'ok' }))
app.post<{ Params: { kind: string } }>('/spawn/:kind', async (request) => ({ exit_code: await run(argvOf(request.params.kind)) }))
await app.listen({ host: '127.0.0.1', port: Number(process.env['PORT']) })
process.once('SIGTERM', () => { void app.close().then(() => process.exit(0)) })
