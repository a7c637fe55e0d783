/**
 * `npm run build`'s last step: starts the bundle once, with `npm start`'s
 * node flags, waits until it is ready, and stops it, so that Node writes
 * V8's compile cache of every module the start loaded into
 * dist/bundle/compile-cache (src/server.ts enables it when that directory
 * exists). A later start then skips most of its compiling
 * (docs/PERFORMANCE.md).
 *
 * Node keys the cache by the user's uid and by the V8 version and flags
 * (a subdirectory per combination), and each entry by the module's path
 * and a hash of its source: a start by another user, with other flags or
 * on a rebuilt bundle does not use what it does not match, so a stale
 * cache only costs the compiling it would have saved. The image writes it
 * as its runtime user (Dockerfile); an installation run by another user
 * runs `node scripts/write-compile-cache.ts` as that user (or does
 * without).
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const ROOT = path.join(path.dirname(fileURLToPath(import.meta.url)), '..')
const ENTRY = path.join(ROOT, 'dist', 'bundle', 'server.js')
/** Where server.ts looks for it: beside the bundle, so that a rebuild (rolldown's cleanDir) removes a stale one. */
const CACHE_DIR = path.join(ROOT, 'dist', 'bundle', 'compile-cache')
const READY_WITHIN_MS = 30_000

/** Node's flags for the service, as `npm start` and the image give them (V8 keeps a cache per set of flags). */
async function startFlags (): Promise<string[]> {
  const pkg = JSON.parse(await readFile(path.join(ROOT, 'package.json'), 'utf8')) as { scripts: { start: string } }
  return pkg.scripts.start.split(' ').filter((word) => word.startsWith('--'))
}

async function freePort (): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer().once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo
      server.close(() => resolve(port))
    })
  })
}

async function waitForReady (base: string, child: ChildProcess): Promise<void> {
  const deadline = Date.now() + READY_WITHIN_MS
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error('the service exited before it was ready')
    const status = await fetch(`${base}/readyz`).then((r) => r.status, () => 0)
    if (status === 200) return
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  throw new Error(`the service was not ready within ${READY_WITHIN_MS} ms`)
}

async function main (): Promise<void> {
  await rm(CACHE_DIR, { recursive: true, force: true })
  await mkdir(CACHE_DIR, { mode: 0o755 })
  const scratch = await mkdtemp(path.join(os.tmpdir(), 'toolport-compile-cache-'))
  try {
    // The default config but for a workspaces root of its own: the same modules load as at a first `npm start`.
    const config = path.join(scratch, 'toolport.json')
    await writeFile(config, JSON.stringify({ workspaces: { root: path.join(scratch, 'workspaces') } }))
    const port = await freePort()
    // Only what the start needs: an inherited NODE_COMPILE_CACHE would send the cache elsewhere.
    const child = spawn(process.execPath, [...await startFlags(), ENTRY], {
      env: { PATH: process.env['PATH'] ?? '', HOST: '127.0.0.1', PORT: String(port), TOOLPORT_CONFIG: config },
      stdio: ['ignore', 'ignore', 'inherit'],
    })
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)))
    try {
      await waitForReady(`http://127.0.0.1:${port}`, child)
    } finally {
      child.kill('SIGTERM')
    }
    // Node writes the cache as the process exits.
    const code = await exited
    if (code !== 0) throw new Error(`the service exited with ${code}`)
  } finally {
    await rm(scratch, { recursive: true, force: true })
  }
  const entries = (await readdir(CACHE_DIR, { recursive: true })).length
  if (entries === 0) throw new Error(`no compile cache was written into ${CACHE_DIR}`)
  console.log(`compile cache: ${path.relative(ROOT, CACHE_DIR)} (${entries} entries)`)
}

await main()
