/**
 * Trees a command can build, however deep and however long their paths:
 * deleting their workspace frees the id at once and leaves nothing on disk,
 * counting them counts every file, and an ephemeral workspace holding one is
 * gone after the call. The trees are made by real commands (exec_shell).
 */
import { existsSync } from 'node:fs'
import { spawn } from 'node:child_process'
import { mkdir, readdir, rename, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { removeTree } from '../../src/core/remove-tree.ts'
import { removeTreeConfined } from '../support/confined-removal.ts'
import { buildTestApp, exec, tempDir } from '../helper.ts'

type App = Awaited<ReturnType<typeof buildTestApp>>

/** d/d/…/d, 1500 levels, made by one `mkdir -p` (the path is under PATH_MAX), then a file at the bottom. */
const DEEP = 'p=d; i=1; while [ $i -lt 1500 ]; do p=$p/d; i=$((i+1)); done; mkdir -p $p && echo bottom > $p/leaf'
/** Generous: the machine may be busy, and these trees are big; nothing here measures time. */
const SLOW = 120_000
/**
 * A chain of 30 directories with 200-byte names (paths past 4096 bytes) with
 * a file and links to `outside` at the bottom, built from the bottom up: no
 * single path is long, as no shell can `cd` past PATH_MAX.
 */
const long = (outside: string) => `n=$(printf "%0200d" 7); mkdir c && echo bottom > c/leaf && ln -s '${outside}' c/out && ln -s '${outside}/f0' c/f0 &&
  i=0; while [ $i -lt 30 ]; do mkdir p && mv c "p/$n" && mv p c || exit 1; i=$((i+1)); done; echo top > top.txt`

async function outsideWithFiles (): Promise<string> {
  const outside = path.join(await tempDir('toolport-victim-'), 'victim')
  await mkdir(path.join(outside, 'deep'), { recursive: true })
  for (let i = 0; i < 20; i++) await writeFile(path.join(outside, `f${i}`), 'keep')
  await writeFile(path.join(outside, 'deep', 'g'), 'keep')
  return outside
}

async function expectOutsideIntact (outside: string): Promise<void> {
  const names = (await readdir(outside)).filter((name) => name !== 'moved')
  expect(names.sort()).toEqual([...Array.from({ length: 20 }, (_, i) => `f${i}`), 'deep'].sort())
  expect(await readdir(path.join(outside, 'deep'))).toEqual(['g'])
}

const request = async (app: App, method: 'GET' | 'POST' | 'DELETE', url: string, payload?: unknown) => {
  const response = await app.inject({ method, url, payload: payload as string })
  return { status: response.statusCode, body: response.body === '' ? null : response.json() }
}

/** Deletes `id`, lets the background removal finish, and checks that nothing of it is left anywhere under the root. */
async function deleteAndCheckGone (app: App, id: string): Promise<void> {
  const store = app.runtime.workspaces
  const dir = store.get('default', id).dir
  expect((await request(app, 'DELETE', `/v1/workspaces/${id}`)).status).toBe(204)
  expect(existsSync(dir)).toBe(false)
  // The sweep waits for the removal under way, and retries what it left.
  await store.sweep()
  expect(await readdir(path.join(store.root, 'trash')).catch(() => [])).toEqual([])
  expect(await readdir(path.dirname(dir))).toEqual([])
}

/** The same id made again starts empty. */
async function expectRecreatedEmpty (app: App, id: string): Promise<void> {
  expect((await request(app, 'POST', '/v1/workspaces', { id })).status).toBe(201)
  const listed = await exec(app, 'list_directory', { path: '.' }, { workspace: id })
  expect(listed.status).toBe(200)
  expect(listed.body.result.entries).toEqual([])
  expect((await request(app, 'GET', `/v1/workspaces/${id}`)).body).toMatchObject({ files: 0, bytes: 0 })
}

describe('workspaces holding trees a command built', () => {
  it('deletes a workspace 1500 directories deep (204), removes its files, and a new one of the same id starts empty', async () => {
    const app = await buildTestApp({ workspaces: { sweep_interval_seconds: 3600 } })
    expect((await request(app, 'POST', '/v1/workspaces', { id: 'deep' })).status).toBe(201)
    expect((await exec(app, 'exec_shell', { command: DEEP }, { workspace: 'deep' })).body.result.exit_code).toBe(0)
    expect((await request(app, 'GET', '/v1/workspaces/deep')).body).toMatchObject({ files: 1, bytes: 7 })
    await deleteAndCheckGone(app, 'deep')
    expect((await request(app, 'GET', '/v1/workspaces/deep')).status).toBe(404)
    await expectRecreatedEmpty(app, 'deep')
  }, SLOW)

  it('counts files past 4096 bytes of path, then deletes them all, and nothing their links point to', async () => {
    const app = await buildTestApp({ workspaces: { sweep_interval_seconds: 3600 } })
    const outside = await outsideWithFiles()
    expect((await request(app, 'POST', '/v1/workspaces', { id: 'long' })).status).toBe(201)
    expect((await exec(app, 'exec_shell', { command: long(outside) }, { workspace: 'long' })).body.result.exit_code).toBe(0)
    // top.txt (4 bytes) and c/<200 bytes>/…/leaf (7 bytes), more than 6000 bytes down; the links count for nothing.
    expect((await request(app, 'GET', '/v1/workspaces/long')).body).toMatchObject({ files: 2, bytes: 11 })
    await deleteAndCheckGone(app, 'long')
    await expectOutsideIntact(outside)
    await expectRecreatedEmpty(app, 'long')
  }, SLOW)

  it('removes an ephemeral workspace a call left 1500 directories deep', async () => {
    const app = await buildTestApp()
    const ephemeralRoot = app.runtime.workspaces.ephemeralRoot
    const answer = await exec(app, 'exec_shell', { command: `pwd; ${DEEP}` })
    expect(answer.body.result.exit_code).toBe(0)
    const dir = answer.body.result.stdout.trim()
    expect(dir.startsWith(ephemeralRoot)).toBe(true)
    expect(existsSync(dir)).toBe(false)
    expect(await readdir(ephemeralRoot)).toEqual([])
  }, SLOW)

  it('removes an expired deep workspace on a sweep', async () => {
    const app = await buildTestApp({ workspaces: { sweep_interval_seconds: 3600 } })
    expect((await request(app, 'POST', '/v1/workspaces', { id: 'old', ttl_seconds: 1 })).status).toBe(201)
    expect((await exec(app, 'exec_shell', { command: DEEP }, { workspace: 'old' })).body.result.exit_code).toBe(0)
    const dir = app.runtime.workspaces.get('default', 'old').dir
    expect(await app.runtime.workspaces.sweep(Date.now() + 3_600_000)).toBe(1)
    expect(existsSync(dir)).toBe(false)
    expect(await readdir(path.join(app.runtime.workspaces.root, 'trash'))).toEqual([])
    await expectRecreatedEmpty(app, 'old')
  }, SLOW)
})

describe('removing a deep tree while a process rearranges it', () => {
  /** ws/a/b/<1500 levels of d, each with a file>, made by a real process. */
  async function deepWorkspace (): Promise<string> {
    const ws = path.join(await tempDir(), 'ws')
    const b = path.join(ws, 'a', 'b')
    await mkdir(b, { recursive: true })
    for (let i = 0; i < 50; i++) await writeFile(path.join(b, `g${i}`), 'mine')
    const script = 'p=d; i=1; while [ $i -lt 1500 ]; do p=$p/d; i=$((i+1)); done; mkdir -p $p && i=0; while [ $i -lt 1500 ]; do cd d && echo x > f || exit 1; i=$((i+1)); done'
    await new Promise((resolve, reject) => spawn('sh', ['-c', script], { cwd: b, stdio: 'ignore' }).once('exit', resolve).once('error', reject))
    return ws
  }

  /** Level 200 of the chain: the walk spends its time below it, and passes it on the way down and up. */
  const middle = (ws: string) => path.join(ws, 'a', 'b', ...Array.from({ length: 200 }, () => 'd'))

  it.each([
    ['swaps a directory for a symlink to the outside and back', (ws: string, outside: string) =>
      `cd '${path.dirname(middle(ws))}' && while :; do mv d real; ln -s '${outside}' d; rm -f d; mv real d; done`],
    ['moves a directory out of the tree and back (the walk inside it must not climb out after it)', (ws: string, outside: string) =>
      `while :; do mv '${middle(ws)}' '${outside}/moved' && mv '${outside}/moved' '${middle(ws)}'; done`],
  ])('holds when a process %s, and finishes once it stops', async (_name, script) => {
    const outside = await outsideWithFiles()
    for (let round = 0; round < 3; round++) {
      const ws = await deepWorkspace()
      const swapper = spawn('sh', ['-c', script(ws, outside)], { stdio: 'ignore' })
      try {
        // Confined: were the walk to climb out of ws, it could reach only these two test directories.
        await removeTreeConfined(ws, [path.dirname(ws), path.dirname(outside)])
      } finally {
        swapper.kill('SIGKILL')
        await new Promise((resolve) => swapper.once('exit', resolve))
      }
      await expectOutsideIntact(outside)
      // Whatever the interrupted swap left where it was, put back and remove.
      if (existsSync(path.join(outside, 'moved'))) {
        if (existsSync(ws)) await rename(path.join(outside, 'moved'), path.join(ws, 'moved'))
        else await removeTree(path.join(outside, 'moved'))
      }
      await removeTree(ws)
      expect(existsSync(ws)).toBe(false)
      await expectOutsideIntact(outside)
    }
  }, SLOW)
})
