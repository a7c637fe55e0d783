/**
 * Trees a command can build, however deep and however long their paths:
 * deleting their workspace frees the id at once and leaves nothing on disk,
 * counting them counts every file, and an ephemeral workspace holding one is
 * gone after the call. The trees are made by real commands (exec_shell).
 */
import { existsSync } from 'node:fs'
import { spawn } from 'node:child_process'
import { mkdir, readdir, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { removeTree } from '../../src/workspaces/remove-tree.ts'
import { removeTreeConfined } from '../support/confined-removal.ts'
import { buildTestApp, exec, tempDir } from '../helper.ts'
import { workspacesIn } from '../support/ephemeral.ts'

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

async function outsideWithFiles (base?: string): Promise<string> {
  const outside = path.join(base ?? await tempDir('toolport-victim-'), 'victim')
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
    expect(await workspacesIn(ephemeralRoot)).toEqual([])
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
  /** <base>/ws/a/b/<1500 levels of d, each with a file>, made by a real process. */
  async function deepWorkspace (base: string): Promise<string> {
    const ws = path.join(base, 'ws')
    const b = path.join(ws, 'a', 'b')
    await mkdir(b, { recursive: true })
    for (let i = 0; i < 50; i++) await writeFile(path.join(b, `g${i}`), 'mine')
    const script = 'p=d; i=1; while [ $i -lt 1500 ]; do p=$p/d; i=$((i+1)); done; mkdir -p $p && i=0; while [ $i -lt 1500 ]; do cd d && echo x > f || exit 1; i=$((i+1)); done'
    await new Promise((resolve, reject) => spawn('sh', ['-c', script], { cwd: b, stdio: 'ignore' }).once('exit', resolve).once('error', reject))
    return ws
  }

  const chain = (ws: string, levels: number) => path.join(ws, 'a', 'b', ...Array.from({ length: levels }, () => 'd'))
  /**
   * Waits until the removal has reached the bottom of the chain (its last
   * file is gone), then rearranges level 200, which the walk is below of
   * and must climb back through.
   */
  const once = (ws: string, change: string) => `while [ -e '${chain(ws, 1500)}/f' ]; do :; done; ${change}`

  it.each([
    ['swaps a directory for a symlink to the outside', (ws: string, outside: string) =>
      once(ws, `cd '${chain(ws, 199)}' && mv d real && ln -s '${outside}' d`)],
    ['moves a directory out of the tree (the walk inside it must not climb out after it)', (ws: string, outside: string) =>
      once(ws, `mv '${chain(ws, 200)}' '${outside}/moved'`)],
  ])('holds when a process %s while the removal is below it, and removes the whole tree', async (_name, script) => {
    // One directory holds both: a directory moved out of ws stays on the same mount, and a walk could climb from it.
    const base = await tempDir()
    const outside = await outsideWithFiles(base)
    for (let round = 0; round < 3; round++) {
      const ws = await deepWorkspace(base)
      const changer = spawn('sh', ['-c', script(ws, outside)], { stdio: 'ignore' })
      const changerExited = new Promise((resolve) => changer.once('exit', resolve))
      try {
        // Confined: were the walk to climb out of ws, it could reach only the test's directory.
        expect(await removeTreeConfined(ws, [base])).toBe(true)
      } finally {
        changer.kill('SIGKILL')
        await changerExited
      }
      // The change was made while the removal ran (the changer finished it, not the kill).
      expect(await changerExited).toBe(0)
      expect(existsSync(ws)).toBe(false)
      await expectOutsideIntact(outside)
      // What was moved out is the tree's, not the outside's (emptied by the walk that was inside it).
      await removeTree(path.join(outside, 'moved'))
    }
  }, SLOW)

  it('removes directories a command took every permission from, the root included', async () => {
    const base = await tempDir()
    const ws = path.join(base, 'ws')
    await mkdir(ws)
    // As the service's user would meet them: 000 (nothing), 500 (no writing), 600 (no search), and deep.
    const script = `for mode in 000 500 600; do mkdir -p "m$mode/sub" && echo x > "m$mode/f" && echo y > "m$mode/sub/g" && chmod $mode "m$mode/sub" && chmod $mode "m$mode"; done &&
      p=d; i=1; while [ $i -lt 1500 ]; do p=$p/d; i=$((i+1)); done; mkdir -p $p && echo z > $p/h && chmod 000 $p && chmod 000 d/d && chmod 000 .`
    const made = spawn('sh', ['-c', script], { cwd: ws, stdio: 'ignore' })
    expect(await new Promise((resolve) => made.once('exit', resolve))).toBe(0)
    expect(await removeTreeConfined(ws, [base])).toBe(true)
    expect(existsSync(ws)).toBe(false)
  }, SLOW)
})
