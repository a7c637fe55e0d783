/**
 * Workspace archives against hostile workspaces and hostile uploads. On the
 * built server (a real process, whose survival is the point): a download
 * never stops the process, whatever a command does in the workspace
 * meanwhile, and is always a valid .tar.gz (checked by GNU tar); FIFOs and
 * sockets are left out; a gzip bomb is refused in bounded memory while the
 * service keeps answering. Through inject: only a token that may write files
 * may upload or delete, and an upload waits for (or is refused by) the
 * service's limiter like any call.
 */
import { type ChildProcess, execFile, execFileSync, spawn } from 'node:child_process'
import { createReadStream, existsSync } from 'node:fs'
import { lstat, mkdir, readdir, readFile, readlink, symlink, writeFile } from 'node:fs/promises'
import http from 'node:http'
import net from 'node:net'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import { promisify } from 'node:util'
import { describe, expect, it } from 'vitest'
import { removeTree } from '../../src/workspaces/remove-tree.ts'
import { buildTestApp, onCleanup, tempDir } from '../helper.ts'
import { listening } from '../support/listening.ts'
import { writeGzipBomb } from '../support/gzip-bomb.ts'
import { expectProblem } from '../support/problem.ts'
import { execAs, requestAs } from '../support/requests.ts'
import { type RunningServer, startServer, waitReady } from '../support/server-process.ts'
import { tarOf } from '../support/tarball.ts'

const run = promisify(execFile)

interface Served {
  server: RunningServer
  root: string
  dirOf: (id: string) => string
}

/** The built server with its workspaces under a root the test knows (removed with removeTree: trees here may be deep). */
async function serve (config: Record<string, unknown> = {}): Promise<Served> {
  const root = await tempDir('toolport-archives-')
  onCleanup(() => removeTree(root))
  const server = await startServer({ sandbox: { mode: 'none' }, ...config, workspaces: { root } })
  await waitReady(server)
  return { server, root, dirOf: (id) => path.join(root, 'tenants', 'default', 'ws', id) }
}

async function createWorkspace (base: string, id: string): Promise<void> {
  const response = await fetch(`${base}/v1/workspaces`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ id }) })
  expect(response.status).toBe(201)
}

/** GET the archive into `file`; rejects when the connection dies (a server that crashed). */
async function download (base: string, id: string, file: string): Promise<number> {
  const response = await fetch(`${base}/v1/workspaces/${id}/archive`)
  await writeFile(file, Buffer.from(await response.arrayBuffer()))
  return response.status
}

/** The names in a .tar.gz as GNU tar lists them (it fails on an invalid archive), without a leading './'. */
async function tarNames (file: string): Promise<string[]> {
  const { stdout } = await run('tar', ['-tzf', file], { maxBuffer: 64 * 1024 * 1024 })
  return stdout.split('\n').map((name) => name.replace(/^\.\//, '')).filter((name) => name !== '')
}

/** A memory figure of a process, in bytes, from /proc/<pid>/status (VmRSS, VmHWM). */
async function memoryOf (pid: number, field: 'VmRSS' | 'VmHWM'): Promise<number> {
  const match = new RegExp(`^${field}:\\s+(\\d+) kB$`, 'm').exec(await readFile(`/proc/${pid}/status`, 'utf8'))
  return Number(match?.[1]) * 1024
}

/** Polls until `condition` holds; the test's own timeout bounds the wait. */
async function until (condition: () => boolean | Promise<boolean>): Promise<void> {
  while (!await condition()) await sleep(20)
}

/**
 * PUT a file's bytes as a stream on a raw socket. The server may answer, and
 * close, before it has read them all: the answer is read as it comes, and a
 * write that fails after it (EPIPE, ECONNRESET) is no error.
 */
function putFile (url: string, file: string): Promise<{ status: number, body: string }> {
  const { hostname, port, pathname } = new URL(url)
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(port), hostname)
    let received = Buffer.alloc(0)
    const answer = (): { status: number, body: string } | undefined => {
      const text = received.toString('latin1')
      const end = text.indexOf('\r\n\r\n')
      if (end === -1) return undefined
      const length = Number(/\r\ncontent-length: *(\d+)/i.exec(text.slice(0, end))?.[1] ?? NaN)
      const body = received.subarray(end + 4)
      if (!Number.isFinite(length) || body.length < length) return undefined
      return { status: Number(text.slice(9, 12)), body: body.subarray(0, length).toString('utf8') }
    }
    socket.on('data', (chunk: Buffer) => {
      received = Buffer.concat([received, chunk])
      const done = answer()
      if (done) {
        socket.destroy()
        resolve(done)
      }
    })
    socket.on('error', (error: NodeJS.ErrnoException) => {
      if (error.code !== 'EPIPE' && error.code !== 'ECONNRESET') reject(error)
    })
    socket.on('close', () => { if (!answer()) reject(new Error(`connection closed without an answer: ${received.toString('latin1').slice(0, 200)}`)) })
    socket.on('connect', () => {
      socket.write(`PUT ${pathname} HTTP/1.1\r\nHost: ${hostname}:${port}\r\nContent-Type: application/gzip\r\nTransfer-Encoding: chunked\r\n\r\n`)
      const body = createReadStream(file)
      body.on('data', (chunk) => {
        if (socket.destroyed) return body.destroy()
        const piece = chunk as Buffer
        const more = socket.write(`${piece.length.toString(16)}\r\n`) && socket.write(piece) && socket.write('\r\n')
        if (!more) {
          body.pause()
          socket.once('drain', () => body.resume())
        }
      })
      body.on('end', () => { if (!socket.destroyed) socket.write('0\r\n\r\n') })
    })
  })
}

function stopOnCleanup (child: ChildProcess): void {
  onCleanup(async () => {
    if (child.exitCode !== null || child.signalCode !== null) return
    const exited = new Promise((resolve) => child.once('exit', resolve))
    child.kill('SIGKILL')
    await exited
  })
}

/** Directories made and removed, and a file rewritten at another size, as fast as a shell can. */
const CHURN = 'while :; do mkdir -p churn/a/b/c churn/d/e && echo x > churn/a/b/c/f && head -c 70000 /dev/zero > churn/d/grow && : > churn/d/grow; rm -rf churn; done'

/** One name turning from a regular file into a FIFO (which no one writes to) and back, in a loop. */
const swapping = (name: string) => `while :; do echo x > ${name}.new && mv ${name}.new ${name} && rm -f ${name} && mkfifo ${name} && rm -f ${name}; done`

/** Twelve directories of 200-byte names, a file at the bottom and a link to it at the top. */
const LONG = 'n=$(printf "%0200d" 7); mkdir c && echo bottom > c/leaf && i=0; while [ $i -lt 12 ]; do mkdir p && mv c "p/$n" && mv p c || exit 1; i=$((i+1)); done; ln -s "c$(i=0; while [ $i -lt 12 ]; do printf "/%s" "$n"; i=$((i+1)); done)/leaf" up'

/** Directories of 200-byte names nested until the path passes 4096 bytes, two files at the bottom; built without long paths. */
const DEEP = 'n=$(printf "%0200d" 7); mkdir c && echo one > c/leaf1 && echo two > c/leaf2 && i=0; while [ $i -lt 22 ]; do mkdir p && mv c "p/$n" && mv p c || exit 1; i=$((i+1)); done'

describe('downloads from a workspace a command is changing', () => {
  it('keeps the process alive through downloads while a command creates and deletes directories in a loop, each a valid .tar.gz', async () => {
    const { server, dirOf } = await serve()
    await createWorkspace(server.base, 'churn')
    await writeFile(path.join(dirOf('churn'), 'steady.txt'), 'steady\n')
    const churner = spawn('sh', ['-c', CHURN], { cwd: dirOf('churn'), stdio: 'ignore' })
    stopOnCleanup(churner)
    const out = await tempDir()
    for (let i = 0; i < 40; i++) {
      const file = path.join(out, `churn-${i}.tar.gz`)
      expect(await download(server.base, 'churn', file)).toBe(200)
      expect(await tarNames(file)).toContain('steady.txt')
    }
    expect(server.child.exitCode).toBe(null)
    expect((await fetch(`${server.base}/healthz`)).status).toBe(200)
  }, 120_000)

  it('encodes long names so GNU tar restores them, and packs a tree whose paths pass 4096 bytes with its deep entries', async () => {
    const { server, dirOf } = await serve()
    const out = await tempDir()
    // Names past the 255 bytes a plain tar header holds, and a link target past its 100: pax records, restored whole.
    await createWorkspace(server.base, 'long')
    await run('sh', ['-c', LONG], { cwd: dirOf('long') })
    const longFile = path.join(out, 'long.tar.gz')
    expect(await download(server.base, 'long', longFile)).toBe(200)
    const restored = path.join(out, 'restored')
    await mkdir(restored)
    await run('tar', ['-xzf', longFile, '-C', restored])
    const bottom = path.join(restored, 'c', ...Array.from({ length: 12 }, () => `${'0'.repeat(199)}7`))
    expect(await readFile(path.join(bottom, 'leaf'), 'utf8')).toBe('bottom\n')
    expect(await readlink(path.join(restored, 'up'))).toBe(path.relative(restored, path.join(bottom, 'leaf')))

    // Past PATH_MAX: GNU tar lists such names (it cannot create them by path), and the archive is whole.
    await createWorkspace(server.base, 'deep')
    await run('sh', ['-c', DEEP], { cwd: dirOf('deep') })
    const deepFile = path.join(out, 'deep.tar.gz')
    expect(await download(server.base, 'deep', deepFile)).toBe(200)
    const leaves = (await tarNames(deepFile)).filter((name) => /\/leaf[12]$/.test(name))
    expect(leaves).toHaveLength(2)
    for (const leaf of leaves) expect(leaf.length).toBeGreaterThan(4096)
    expect(server.child.exitCode).toBe(null)
  }, 60_000)

  it('leaves out FIFOs and unix sockets, also a FIFO swapped in for a file while it is packed, and every download completes valid', async () => {
    const { server, dirOf } = await serve()
    await createWorkspace(server.base, 'special')
    const dir = dirOf('special')
    await writeFile(path.join(dir, 'plain.txt'), 'plain\n')
    await run('mkfifo', [path.join(dir, 'fifo')])
    const listener = net.createServer()
    await new Promise<void>((resolve) => listener.listen(path.join(dir, 'sock'), resolve))
    onCleanup(() => new Promise((resolve) => listener.close(() => resolve())))
    const out = await tempDir()
    const file = path.join(out, 'special.tar.gz')
    expect(await download(server.base, 'special', file)).toBe(200)
    expect(await tarNames(file)).toEqual(['plain.txt'])

    for (let i = 0; i < 4; i++) stopOnCleanup(spawn('sh', ['-c', swapping(`swap${i}`)], { cwd: dir, stdio: 'ignore' }))
    for (let i = 0; i < 30; i++) {
      const swapped = path.join(out, `swapped-${i}.tar.gz`)
      expect(await download(server.base, 'special', swapped)).toBe(200)
      const names = await tarNames(swapped)
      expect(names).toContain('plain.txt')
      expect(names.filter((name) => name === 'fifo' || name === 'sock')).toEqual([])
    }
    expect(server.child.exitCode).toBe(null)
  }, 60_000)
})

describe('uploads', () => {
  it('refuses a 5 GiB gzip bomb with 413 in bounded memory, leaving nothing behind, and answers on meanwhile', async () => {
    const work = await tempDir()
    const bomb = path.join(work, 'bomb.tar.gz')
    await writeGzipBomb(bomb, 5 * 1024 ** 3)
    const { server, root, dirOf } = await serve()
    const pid = server.child.pid as number
    await createWorkspace(server.base, 'bomb')
    await writeFile(path.join(dirOf('bomb'), 'keep.txt'), 'keep')
    const baseline = await memoryOf(pid, 'VmRSS')

    const upload = putFile(`${server.base}/v1/workspaces/bomb/archive`, bomb)
    expect((await fetch(`${server.base}/healthz`)).status).toBe(200)
    const answer = await upload
    expect(answer.status, answer.body).toBe(413)
    expect(JSON.parse(answer.body)).toMatchObject({ code: 'PayloadTooLarge' })
    expect(await memoryOf(pid, 'VmHWM') - baseline).toBeLessThan(128 * 1024 * 1024)
    expect(await readdir(dirOf('bomb'))).toEqual(['keep.txt'])
    expect((await readdir(path.join(root, 'tenants', 'default', 'ws'))).sort()).toEqual(['bomb'])
    expect((await fetch(`${server.base}/healthz`)).status).toBe(200)
    expect(server.child.exitCode).toBe(null)
  }, 120_000)

  it('gives uploads a limiter of their own: a slow upload holds no slot a tool call needs; past its slots an upload is 503 Overloaded, creating nothing', async () => {
    const app = await buildTestApp({ limits: { max_concurrent: 1, max_queue: 0 } })
    const base = await listening(app)
    const archive = tarOf([{ name: 'a.txt', content: 'a' }])
    // An upload whose client sends its headers and half its body, then nothing more for now.
    const { port } = new URL(base)
    const slow = net.connect(Number(port), '127.0.0.1')
    onCleanup(async () => { slow.destroy() })
    slow.write(`PUT /v1/workspaces/slow/archive HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/gzip\r\nContent-Length: ${archive.length}\r\n\r\n`)
    slow.write(archive.subarray(0, archive.length >> 1))
    // Its slot is taken once its archive is being staged.
    await until(async () => (await readdir(app.runtime.workspaces.stagingDir).catch(() => [])).length > 0)
    const call = await requestAs(app, null, 'POST', '/v1/tools/exec_shell/execute', { arguments: { command: 'echo still serving' } })
    expect(call.status).toBe(200)
    const refused = await requestAs(app, null, 'PUT', '/v1/workspaces/busy/archive', archive, { 'content-type': 'application/gzip' })
    expectProblem(refused, 503, 'Overloaded')
    expect(refused.headers['retry-after']).toBeDefined()
    expectProblem(await requestAs(app, null, 'GET', '/v1/workspaces/busy'), 404, 'NotFound')
    slow.end(archive.subarray(archive.length >> 1))
    await until(async () => (await requestAs(app, null, 'PUT', '/v1/workspaces/busy/archive', archive, { 'content-type': 'application/gzip' })).status === 200)
  })

  it('skips entries deeper than 64 levels (node-tar reserves every parent of every entry: a few KB thousands deep took gigabytes) and names a filesystem could not hold, and answers at once', async () => {
    const app = await buildTestApp()
    const chain = Array.from({ length: 1000 }, (_, i) => ({ name: 'd/'.repeat(i + 1), type: 'dir' as const }))
    const archive = tarOf([{ name: 'n'.repeat(300), content: 'long name' }, { name: `${'d/'.repeat(64)}deep.txt`, content: 'too deep' }, { name: `${'d/'.repeat(63)}kept.txt`, content: 'kept' }, ...chain])
    expect(archive.length).toBeLessThan(64 * 1024)
    const answer = await requestAs(app, null, 'PUT', '/v1/workspaces/deep/archive', archive, { 'content-type': 'application/gzip' })
    expect(answer.status).toBe(200)
    expect(answer.body).toMatchObject({ directories: 64, files: 1, skipped_count: 1000 - 64 + 2 })
    expect(answer.body.skipped.slice(0, 3)).toEqual([
      { path: 'n'.repeat(300), reason: 'a name longer than 255 bytes, or a path longer than 4096' },
      { path: `${'d/'.repeat(64)}deep.txt`, reason: 'deeper than 64 levels' },
      { path: 'd/'.repeat(65), reason: 'deeper than 64 levels' },
    ])
    const dir = app.runtime.workspaces.get('default', 'deep').dir
    expect(await readFile(path.join(dir, ...Array.from({ length: 63 }, () => 'd'), 'kept.txt'), 'utf8')).toBe('kept')
  })
})

describe('links in uploads', () => {
  const upload = async (app: Awaited<ReturnType<typeof buildTestApp>>, id: string, archive: Buffer) =>
    requestAs(app, null, 'PUT', `/v1/workspaces/${id}/archive`, archive, { 'content-type': 'application/gzip' })
  const dirOf = (app: Awaited<ReturnType<typeof buildTestApp>>, id: string) => app.runtime.workspaces.get('default', id).dir

  it('restores chains of links (a virtualenv\'s python → python3 → python3.11, b → a → x), as tar does, also from the workspace\'s own download', async () => {
    const app = await buildTestApp()
    const answer = await upload(app, 'chain', tarOf([
      { name: 'venv/bin/python', type: 'symlink', linkname: 'python3' },
      { name: 'venv/bin/python3', type: 'symlink', linkname: 'python3.11' },
      { name: 'venv/bin/python3.11', content: '#!/bin/sh\n' },
      { name: 'x', content: 'x' },
      { name: 'a', type: 'symlink', linkname: 'x' },
      { name: 'b', type: 'symlink', linkname: 'a' },
    ]))
    expect(answer.status, JSON.stringify(answer.body)).toBe(200)
    expect(answer.body).toMatchObject({ files: 2, symlinks: 4, skipped_count: 0 })
    const dir = dirOf(app, 'chain')
    expect(await readlink(path.join(dir, 'venv/bin/python'))).toBe('python3')
    expect(await readFile(path.join(dir, 'b'), 'utf8')).toBe('x')
    const download = await app.inject({ method: 'GET', url: '/v1/workspaces/chain/archive' })
    expect(download.statusCode).toBe(200)
    const again = await upload(app, 'chain-again', download.rawPayload)
    expect(again.status, JSON.stringify(again.body)).toBe(200)
    expect(again.body).toMatchObject({ files: 2, symlinks: 4, skipped_count: 0 })
    expect(await readlink(path.join(dirOf(app, 'chain-again'), 'b'))).toBe('a')
  })

  it('keeps the last of entries at one path, as tar does; skips a link under another link of the archive, or at a directory\'s name', async () => {
    const app = await buildTestApp()
    const answer = await upload(app, 'order', tarOf([
      { name: 'file-then-link', content: 'first' },
      { name: 'file-then-link', type: 'symlink', linkname: 'x' },
      { name: 'link-then-file', type: 'symlink', linkname: 'x' },
      { name: 'link-then-file', content: 'last' },
      { name: 'sub', type: 'dir' },
      { name: 'd', type: 'symlink', linkname: 'sub' },
      { name: 'd/under', type: 'symlink', linkname: 'x' },
      { name: 'sub', type: 'symlink', linkname: 'x' },
    ]))
    expect(answer.status, JSON.stringify(answer.body)).toBe(200)
    expect(answer.body.skipped).toEqual([
      { path: 'd/under', reason: 'its directory is a symlink or a file of the archive' },
      { path: 'sub', reason: 'a directory of the archive has its name' },
    ])
    const dir = dirOf(app, 'order')
    expect(await readlink(path.join(dir, 'file-then-link'))).toBe('x')
    expect(await readFile(path.join(dir, 'link-then-file'), 'utf8')).toBe('last')
    expect(await readlink(path.join(dir, 'd'))).toBe('sub')
    expect(await readdir(path.join(dir, 'sub'))).toEqual([])
  })

  it('skips a link whose target or place is longer than Linux takes (a 500 once links were made by the service), refuses a target on a file, and answers on', async () => {
    const app = await buildTestApp()
    const parts = `${'a/'.repeat(20_000)}b`
    const exactly = `${'t'.repeat(255)}/`.repeat(16)
    const deepPlace = Array.from({ length: 16 }, () => 'p'.repeat(250)).join('/')
    expect(Buffer.byteLength(exactly)).toBe(4096)
    const archive = tarOf([
      { name: 'many-parts', type: 'symlink', linkname: parts },
      { name: 'exactly', type: 'symlink', linkname: exactly },
      { name: deepPlace, type: 'symlink', linkname: 'x' },
      { name: 'kept.txt', content: 'kept' },
    ])
    const answer = await upload(app, 'targets', archive)
    expect(answer.status, JSON.stringify(answer.body).slice(0, 400)).toBe(200)
    expect(answer.body).toMatchObject({
      files: 1,
      symlinks: 0,
      skipped: [
        { path: 'many-parts', reason: 'a symlink target of 4096 bytes or more' },
        { path: 'exactly', reason: 'a symlink target of 4096 bytes or more' },
        { path: `${deepPlace.slice(0, 512)}…`, reason: 'a name or a target longer than the filesystem takes' },
      ]
    })
    expect(await readdir(dirOf(app, 'targets'))).toEqual(['kept.txt'])
    expectProblem(await upload(app, 'targets', tarOf([{ name: 'file-with-target', content: 'hi', linkname: parts }])), 400, 'BadRequest')
    expect((await requestAs(app, null, 'GET', '/healthz')).status).toBe(200)
  })

  it('checks every link again once all are in: one placed later (`z → .`) can lead an earlier one (`c → z/e/hostname`) out through a link already there', async () => {
    const app = await buildTestApp()
    expect((await requestAs(app, null, 'POST', '/v1/workspaces', { id: 'late' })).status).toBe(201)
    // As a command could have made it.
    await symlink('/etc', path.join(dirOf(app, 'late'), 'e'))
    const answer = await upload(app, 'late', tarOf([{ name: 'c', type: 'symlink', linkname: 'z/e/hostname' }, { name: 'z', type: 'symlink', linkname: '.' }]))
    expect(answer.status, JSON.stringify(answer.body)).toBe(200)
    expect(answer.body).toMatchObject({ symlinks: 1, skipped: [{ path: 'c', reason: 'symlink leaving the workspace through a link placed after it' }] })
    expect((await readdir(dirOf(app, 'late'))).sort()).toEqual(['e', 'z'])
  })

  it('answers an upload that finds the volume full as the service\'s failure (500), not the archive\'s (400)', async () => {
    const volume = await tempDir('toolport-full-')
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=256k', 'tmpfs', volume])
    onCleanup(async () => { execFileSync('umount', ['-l', volume]) })
    const app = await buildTestApp({ workspaces: { root: path.join(volume, 'root') } })
    const answer = await upload(app, 'full', tarOf([{ name: 'big.bin', content: Buffer.alloc(1024 * 1024, 1) }]))
    expectProblem(answer, 500, 'ExecutionFailed')
    expect(answer.body.detail).toBe('no space left for the upload')
  })

  it('shows a skipped entry\'s path cut: a hundred paths of a megabyte, which compress to nothing, make no answer of a hundred megabytes', async () => {
    const app = await buildTestApp()
    const archive = tarOf(Array.from({ length: 100 }, (_, i) => ({ name: `${'p'.repeat(1_000_000)}${i}`, content: '' })))
    expect(archive.length).toBeLessThan(1024 * 1024)
    const answer = await upload(app, 'long-paths', archive)
    expect(answer.status).toBe(200)
    expect(answer.body.skipped_count).toBe(100)
    expect(answer.body.skipped[0]).toEqual({ path: `${'p'.repeat(512)}…`, reason: 'a name longer than 255 bytes, or a path longer than 4096' })
    expect(JSON.stringify(answer.body).length).toBeLessThan(100 * 1024)
  })
})

describe('scopes for changes', () => {
  const TOKENS = [
    { token: 'reader', tenant: 'acme', allowed_tools: ['read_*', 'list_*'] },
    { token: 'writer', tenant: 'acme', allowed_tools: ['write_file'] },
  ]

  it('refuses archive uploads and deletions to a read-only token (403, nothing changes); a write_file token may', async () => {
    const app = await buildTestApp({ auth: { tokens: TOKENS } })
    const gzip = { 'content-type': 'application/gzip' }
    // Creating needs no particular scope; an empty JSON body still asks for the defaults.
    expect((await requestAs(app, 'reader', 'POST', '/v1/workspaces', { id: 'shared' })).status).toBe(201)
    expect((await requestAs(app, 'reader', 'POST', '/v1/workspaces', '', { 'content-type': 'application/json' })).status).toBe(201)
    expect((await execAs(app, 'writer', 'write_file', { path: 'kept.txt', content: 'original' }, 'shared')).status).toBe(200)
    const dir = app.runtime.workspaces.get('acme', 'shared').dir

    const overwrite = tarOf([{ name: 'kept.txt', content: 'overwritten' }, { name: 'new.txt', content: 'new' }])
    expectProblem(await requestAs(app, 'reader', 'PUT', '/v1/workspaces/shared/archive', overwrite, gzip), 403, 'PermissionDenied')
    expectProblem(await requestAs(app, 'reader', 'PUT', '/v1/workspaces/fresh/archive', overwrite, gzip), 403, 'PermissionDenied')
    expectProblem(await requestAs(app, 'reader', 'DELETE', '/v1/workspaces/shared'), 403, 'PermissionDenied')
    expect(await readdir(dir)).toEqual(['kept.txt'])
    expect(await readFile(path.join(dir, 'kept.txt'), 'utf8')).toBe('original')
    expect((await requestAs(app, 'reader', 'GET', '/v1/workspaces/shared')).status).toBe(200)
    expectProblem(await requestAs(app, 'reader', 'GET', '/v1/workspaces/fresh'), 404, 'NotFound')

    expect((await requestAs(app, 'writer', 'PUT', '/v1/workspaces/shared/archive', overwrite, gzip)).status).toBe(200)
    expect(await readFile(path.join(dir, 'kept.txt'), 'utf8')).toBe('overwritten')
    expect((await requestAs(app, 'writer', 'DELETE', '/v1/workspaces/shared')).status).toBe(204)
    expectProblem(await requestAs(app, 'reader', 'GET', '/v1/workspaces/shared'), 404, 'NotFound')
  })
})

describe('what the review of the hardening found', () => {
  it('skips an uploaded link that leaves through another link (`t → u/..` with `u → .`)', async () => {
    const app = await buildTestApp()
    // `t` before `u`: when `t` is unpacked there is no link `u` yet to be refused through.
    const archive = tarOf([
      { name: 't', type: 'symlink', linkname: 'u/..' },
      { name: 'u', type: 'symlink', linkname: '.' },
      { name: 'ok', type: 'symlink', linkname: 'kept' },
    ])
    const response = await requestAs(app, null, 'PUT', '/v1/workspaces/links/archive', archive, { 'content-type': 'application/gzip' })
    expect(response.status, JSON.stringify(response.body)).toBe(200)
    const report = response.body as { symlinks: number, skipped: Array<{ path: string }> }
    expect(report.skipped.map((entry) => entry.path)).toEqual(['t'])
    expect(report.symlinks).toBe(2)
    const dir = path.join(app.runtime.workspaces.root, 'tenants', 'default', 'ws', 'links')
    expect(existsSync(path.join(dir, 't'))).toBe(false)
    expect(await readlink(path.join(dir, 'ok'))).toBe('kept')
  })

  it('checks an uploaded link again where a link already in the workspace puts it (`a → .` puts `a/a/…/l` at `l`)', async () => {
    const app = await buildTestApp()
    const put = async (entries: Parameters<typeof tarOf>[0]) => {
      const response = await requestAs(app, null, 'PUT', '/v1/workspaces/relinked/archive', tarOf(entries), { 'content-type': 'application/gzip' })
      expect(response.status, JSON.stringify(response.body)).toBe(200)
      return response.body as { symlinks: number, skipped: Array<{ path: string }> }
    }
    expect((await put([{ name: 'a', type: 'symlink', linkname: '.' }])).symlinks).toBe(1)
    const deep = Array.from({ length: 12 }, () => 'a').join('/')
    const report = await put([
      { name: `${deep}/l`, type: 'symlink', linkname: `${'../'.repeat(12)}etc/passwd` },
      { name: 'a/m', type: 'symlink', linkname: '../x' },
      { name: 'a/n', type: 'symlink', linkname: 'plain.txt' },
    ])
    expect(report.skipped.map((entry) => entry.path).sort()).toEqual([`${deep}/l`, 'a/m'])
    const dir = path.join(app.runtime.workspaces.root, 'tenants', 'default', 'ws', 'relinked')
    // lstat: a link that is there counts, wherever it leads.
    for (const name of ['l', 'm']) expect(await lstat(path.join(dir, name)).catch(() => null), name).toBeNull()
    expect(await readlink(path.join(dir, 'n'))).toBe('plain.txt')
  })

  it('replaces a link an entry is named after, never what it points to; a directory still merges through a link to one', async () => {
    const app = await buildTestApp()
    const url = '/v1/workspaces/releases/archive'
    const put = async (entries: Parameters<typeof tarOf>[0]) => {
      const response = await requestAs(app, null, 'PUT', url, tarOf(entries), { 'content-type': 'application/gzip' })
      expect(response.status, JSON.stringify(response.body)).toBe(200)
      return response.body as { skipped: unknown[] }
    }
    const release = [{ name: 'releases/v2/app.js', content: 'v2' }, { name: 'current', type: 'symlink' as const, linkname: 'releases/v2' }]
    expect((await put(release)).skipped).toEqual([])
    // The workspace's own archive, uploaded again: `current` is replaced as a link, releases/v2 stays.
    const own = await app.inject({ method: 'GET', url })
    const again = await requestAs(app, null, 'PUT', url, own.rawPayload, { 'content-type': 'application/gzip' })
    expect(again.body).toMatchObject({ skipped: [] })
    const dir = path.join(app.runtime.workspaces.root, 'tenants', 'default', 'ws', 'releases')
    expect(await readFile(path.join(dir, 'releases', 'v2', 'app.js'), 'utf8')).toBe('v2')
    expect(await readlink(path.join(dir, 'current'))).toBe('releases/v2')
    // Through the link, a file goes where the link leads, as tar puts it.
    await put([{ name: 'current/app.js', content: 'v2.1' }])
    expect(await readFile(path.join(dir, 'releases', 'v2', 'app.js'), 'utf8')).toBe('v2.1')
    // A file named as a link to the workspace itself replaces the link; nothing else goes.
    await put([{ name: 'here', type: 'symlink', linkname: '.' }])
    await put([{ name: 'a1', content: '1' }, { name: 'here', content: 'a file now' }, { name: 'z', content: 'z' }])
    expect(await readFile(path.join(dir, 'here'), 'utf8')).toBe('a file now')
    expect((await readdir(dir)).sort()).toEqual(['a1', 'current', 'here', 'releases', 'z'])
  })

  it('removes uploads a crash left staged, once they are an hour old, and leaves newer ones', async () => {
    const app = await buildTestApp()
    const staging = app.runtime.workspaces.stagingDir
    const abandoned = path.join(staging, `${Date.now() - 2 * 3600_000}-abandoned`)
    const current = path.join(staging, `${Date.now()}-current`)
    await mkdir(path.join(abandoned, 'deep', 'er'), { recursive: true })
    await writeFile(path.join(abandoned, 'deep', 'er', 'file'), 'left by a crash')
    await mkdir(current, { recursive: true })
    await app.runtime.workspaces.sweep()
    await until(async () => !existsSync(abandoned) && (await readdir(path.join(app.runtime.workspaces.root, 'trash')).catch(() => [])).length === 0)
    expect(existsSync(current)).toBe(true)
  })

  it('bounds downloads by a limiter of their own: a client that stops reading holds no slot a tool call needs', async () => {
    const { server, root } = await serve({ limits: { max_concurrent: 2, max_queue: 0 } })
    await createWorkspace(server.base, 'big')
    // Incompressible, so that the answer fills the socket buffers and the packing waits for the reader.
    await run('head', ['-c', String(32 * 1024 * 1024), '/dev/urandom'], { maxBuffer: 64 * 1024 * 1024, encoding: 'buffer' }).then(({ stdout }) => writeFile(path.join(root, 'tenants', 'default', 'ws', 'big', 'noise'), stdout))
    const stalled = await new Promise<http.ClientRequest>((resolve, reject) => {
      const request = http.get(`${server.base}/v1/workspaces/big/archive`, (response) => {
        expect(response.statusCode).toBe(200)
        response.pause()
        resolve(request)
      })
      request.on('error', reject)
    })
    try {
      const second = await fetch(`${server.base}/v1/workspaces/big/archive`)
      expect(second.status).toBe(503)
      expect((await second.json() as { code: string }).code).toBe('Overloaded')
      const call = await fetch(`${server.base}/v1/tools/exec_shell/execute`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ arguments: { command: 'echo still serving' } }) })
      expect(call.status).toBe(200)
    } finally {
      stalled.destroy()
    }
    // The slot comes back when the stalled client goes.
    await until(async () => (await fetch(`${server.base}/v1/workspaces/big/archive`).then(async (r) => { await r.arrayBuffer(); return r.status })) === 200)
  })

  it('cuts a download whose client takes nothing for server.request_timeout_ms, so that its slot comes back', async () => {
    const { server, root } = await serve({ limits: { max_concurrent: 1, max_queue: 0 }, server: { request_timeout_ms: 1000 } })
    await createWorkspace(server.base, 'big')
    await run('head', ['-c', String(32 * 1024 * 1024), '/dev/urandom'], { maxBuffer: 64 * 1024 * 1024, encoding: 'buffer' }).then(({ stdout }) => writeFile(path.join(root, 'tenants', 'default', 'ws', 'big', 'noise'), stdout))
    const stalled = await new Promise<http.ClientRequest>((resolve, reject) => {
      const request = http.get(`${server.base}/v1/workspaces/big/archive`, (response) => {
        response.pause()
        resolve(request)
      })
      request.on('error', reject)
    })
    onCleanup(async () => { stalled.destroy() })
    // It never reads: the server cuts it, and the one download slot (503 while it is held) serves the next client.
    await until(async () => {
      const next = await fetch(`${server.base}/v1/workspaces/big/archive`)
      await next.arrayBuffer().catch(() => {})
      return next.status === 200
    })
  })

  it('refuses with 413 an archive whose entries lie too deep for how many they are (each within 64 levels), leaving nothing behind', async () => {
    // Their paths may add up to 3 KiB an entry the archive may hold: 150 KiB for 50, which two of these pass.
    const app = await buildTestApp({ workspaces: { max_archive_entries: 50 } })
    const level = 'b'.repeat(60)
    const deepFiles = Array.from({ length: 20 }, (_, i) => ({ name: [`d${i}`, ...Array.from({ length: 62 }, () => level), 'f'].join('/'), content: '' }))
    const answer = await requestAs(app, null, 'PUT', '/v1/workspaces/wide-deep/archive', tarOf(deepFiles), { 'content-type': 'application/gzip' })
    expect(String(expectProblem(answer, 413, 'PayloadTooLarge')['detail'])).toContain('too deep for how many they are')
    expectProblem(await requestAs(app, null, 'GET', '/v1/workspaces/wide-deep'), 404, 'NotFound')
  })

  it('gives the download slot back when the client leaves before its turn comes (while its workspace is looked up)', async () => {
    const app = await buildTestApp({ limits: { max_concurrent: 1, max_queue: 0 } })
    const base = await listening(app)
    expect((await requestAs(app, null, 'POST', '/v1/workspaces', { id: 'small' })).status).toBe(201)
    const store = app.runtime.workspaces
    const find = store.find.bind(store)
    let entered!: () => void
    const arrived = new Promise<void>((resolve) => { entered = resolve })
    let open!: () => void
    const gate = new Promise<void>((resolve) => { open = resolve })
    store.find = async (...args: Parameters<typeof store.find>) => { entered(); await gate; return find(...args) }
    const { port } = new URL(base)
    const leaving = net.connect(Number(port), '127.0.0.1', () => { leaving.write('GET /v1/workspaces/small/archive HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n') })
    await arrived
    leaving.destroy()
    await sleep(100)
    store.find = find
    open()
    await sleep(100)
    const next = await requestAs(app, null, 'GET', '/v1/workspaces/small/archive')
    expect(next.status).toBe(200)
  })

  it('keeps every error body within limits.max_result_bytes, also one that quotes what a caller sent', async () => {
    const app = await buildTestApp({ limits: { max_result_bytes: 256 } })
    const answer = await requestAs(app, null, 'GET', `/v1/${'x'.repeat(8000)}`)
    expectProblem(answer, 404, 'NotFound')
    expect(Buffer.byteLength(JSON.stringify(answer.body))).toBeLessThan(256 + 200)
    // A URL the router refuses (a parameter past its length) is quoted in the detail too.
    const malformed = await requestAs(app, null, 'GET', `/v1/workspaces/${'z'.repeat(12_000)}`)
    expectProblem(malformed, 400, 'BadRequest')
    expect(Buffer.byteLength(JSON.stringify(malformed.body))).toBeLessThan(256 + 200)
  })
})
