/** Starting the built server as a user would (the bundle `npm start` runs), on a free port, for end-to-end tests. */
import { type ChildProcess, spawn } from 'node:child_process'
import { writeFile } from 'node:fs/promises'
import net from 'node:net'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { onCleanup, tempDir } from './temp.ts'

export const SERVER_ENTRY = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'dist', 'bundle', 'server.js')

export function freePort (): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo
      server.close(() => resolve(port))
    })
  })
}

export interface RunningServer {
  base: string
  child: ChildProcess
  /** What it wrote to stdout and stderr, as the chunks came (a line of one may be split by the other's). */
  output: () => string
  /** What it wrote to stdout alone (its log lines), as far as it has come. */
  stdout: () => string
  /** Settles once the process has exited and its stdout and stderr have ended (output() then holds all of them). */
  exited: Promise<{ code: number | null, signal: NodeJS.Signals | null }>
}

/**
 * Starts `node dist/bundle/server.js` with a config file (object → JSON), HOST and PORT (`env.PORT`, or a
 * free one); `inherit` maps descriptors of the server to this process's, beyond stdio (a parent that leaks some).
 */
export async function startServer (config: Record<string, unknown> | null, env: Record<string, string> = {}, inherit: Record<number, number> = {}): Promise<RunningServer> {
  const dir = await tempDir('toolport-e2e-')
  const port = env['PORT'] === undefined ? await freePort() : Number(env['PORT'])
  const file = path.join(dir, 'toolport.json')
  const fullConfig = config === null ? null : { workspaces: { root: path.join(dir, 'workspaces') }, ...config }
  if (fullConfig) await writeFile(file, JSON.stringify(fullConfig))
  let output = ''
  let stdout = ''
  const child = spawn(process.execPath, [SERVER_ENTRY], {
    // Its own directory, not the checkout: what a server writes beside it (V8's isolate log when profiled) lands there.
    cwd: dir,
    env: { PATH: process.env['PATH'] ?? '', HOST: '127.0.0.1', PORT: String(port), ...(fullConfig ? { TOOLPORT_CONFIG: file } : {}), ...env },
    stdio: ['ignore', 'pipe', 'pipe', ...Array.from({ length: Math.max(2, ...Object.keys(inherit).map(Number)) - 2 }, (_, i) => inherit[i + 3] ?? 'ignore')],
  })
  child.stdout?.on('data', (chunk: Buffer) => {
    output += chunk.toString()
    stdout += chunk.toString()
  })
  child.stderr?.on('data', (chunk: Buffer) => { output += chunk.toString() })
  // On 'close', not 'exit': once the process has exited and its stdout and stderr have ended, so that output() has all it wrote.
  const exited = new Promise<{ code: number | null, signal: NodeJS.Signals | null }>((resolve) => child.once('close', (code, signal) => resolve({ code, signal })))
  onCleanup(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill('SIGKILL')
      await exited
    }
  })
  return { base: `http://127.0.0.1:${port}`, child, output: () => output, stdout: () => stdout, exited }
}

/** Polls /readyz until 200 (or the process exits, or 15 s pass). */
export async function waitReady (server: RunningServer, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    if (server.child.exitCode !== null) {
      // What it wrote last (why it exited) may still be on its way: the error waits for all of it.
      await server.exited
      throw new Error(`server exited: ${server.output()}`)
    }
    try {
      const response = await fetch(`${server.base}/readyz`, { signal: AbortSignal.timeout(1000) })
      if (response.status === 200) return
    } catch {}
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
  throw new Error(`server not ready: ${server.output()}`)
}
