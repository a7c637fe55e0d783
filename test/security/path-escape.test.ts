/**
 * Path-escape vectors against every file tool and the archive upload. Each
 * assertion is on the filesystem: the outside directory is byte-for-byte
 * what it was, and no answer carries the secret.
 */
import { createHash } from 'node:crypto'
import { link, mkdir, readdir, readFile, rename, rm, symlink, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { beforeEach, describe, expect, it } from 'vitest'
import { buildTestApp, exec, tempDir } from '../helper.ts'
import { tarOf } from '../support/tarball.ts'

const SECRET = 'TOPSECRET-7f3a9c'
type App = Awaited<ReturnType<typeof buildTestApp>>

let app: App
let outside: string
let wsDir: string

/** Every file under `dir` with a hash of its content (symlinks by target). */
async function snapshot (dir: string): Promise<Record<string, string>> {
  const out: Record<string, string> = {}
  for (const entry of await readdir(dir, { withFileTypes: true, recursive: true })) {
    const full = path.join(entry.parentPath, entry.name)
    out[path.relative(dir, full)] = entry.isFile() ? createHash('sha256').update(await readFile(full)).digest('hex') : entry.isDirectory() ? 'dir' : 'other'
  }
  return out
}

beforeEach(async () => {
  app = await buildTestApp({ tools: { builtin: ['*'] } })
  outside = path.join(await tempDir('toolport-outside-'), 'outside')
  await mkdir(path.join(outside, 'sub'), { recursive: true })
  await writeFile(path.join(outside, 'secret.txt'), SECRET)
  await writeFile(path.join(outside, 'sub', 'inner.txt'), SECRET)
  await exec(app, 'write_file', { path: 'sub/plain.txt', content: 'plain' }, { workspace: 'sec' })
  wsDir = app.runtime.workspaces.get('default', 'sec').dir
  await symlink(outside, path.join(wsDir, 'out'))
  await symlink(path.join(outside, 'secret.txt'), path.join(wsDir, 'secretlink'))
  await symlink('..', path.join(wsDir, 'parentlink'))
  await symlink('../../../../../../../..', path.join(wsDir, 'sub', 'deeplink'))
  await symlink(path.join(outside, 'new-file.txt'), path.join(wsDir, 'dangling'))
  await symlink(path.join(outside, 'newdir'), path.join(wsDir, 'dangling-dir'))
  await link(path.join(outside, 'secret.txt'), path.join(wsDir, 'hardlink'))
})

function vectors (): string[] {
  const toSecret = path.relative(wsDir, path.join(outside, 'secret.txt'))
  const toOutside = path.relative(wsDir, outside)
  return [
    toSecret, `./${toSecret}`, `sub/../${toSecret}`, toSecret.replace(/\//g, '//'), `${toOutside}/sub/inner.txt`,
    `${toOutside}/new-file.txt`, path.join(outside, 'secret.txt'), '/etc/passwd', '/', '//etc/passwd',
    '/tmp/x.txt', '..', '../', '../..', '../../../../../../../../etc/passwd',
    'sub/../..', 'sub/../../x.txt', '.././/../x', 'C:\\Windows\\win.ini', '\\\\server\\share\\x',
    'a\u0000b', 'plain.txt\u0000.png', '\u0000', 'out/secret.txt', 'out',
    'out/sub/inner.txt', 'out/../out/secret.txt', 'out/./new.txt', 'secretlink', 'parentlink',
    'parentlink/other-workspace/x', 'parentlink/../../x.txt', 'sub/deeplink/etc/passwd', `sub/deeplink${outside}/secret.txt`, 'dangling',
    'dangling-dir/x.txt', 'hardlink', 'a/'.repeat(2100), 'n'.repeat(300), `${toSecret}/.`,
    `out/${'x/'.repeat(10)}y.txt`, 'secretlink/.',
  ]
}

const TOOLS: Array<[string, (p: string) => Record<string, unknown>]> = [
  ['read_file', (p) => ({ path: p })],
  ['write_file', (p) => ({ path: p, content: 'PWNED' })],
  ['edit_file', (p) => ({ path: p, old_text: SECRET, new_text: 'PWNED' })],
  ['list_directory', (p) => ({ path: p })],
  ['read', (p) => ({ file_path: p })],
  ['write', (p) => ({ file_path: p, content: 'PWNED' })],
  ['edit', (p) => ({ file_path: p, old_string: SECRET, new_string: 'PWNED' })],
]

const WRITERS = new Set(['write_file', 'write'])

describe('path-escape vectors', () => {
  it('has at least 40 vectors', () => {
    expect(vectors().length).toBeGreaterThanOrEqual(40)
  })

  it.each(TOOLS)('%s reads and writes nothing outside the workspace', async (tool, argsOf) => {
    const before = await snapshot(outside)
    for (const vector of vectors()) {
      const answer = await exec(app, tool, argsOf(vector), { workspace: 'sec' })
      // Writing over a hard link replaces the workspace's name (temp file + rename); the outside inode is untouched.
      const allowed = WRITERS.has(tool) && vector === 'hardlink' ? [200, 400] : [400, 404]
      expect(allowed, `${tool} ${JSON.stringify(vector)} → ${answer.status} ${JSON.stringify(answer.body).slice(0, 200)}`).toContain(answer.status)
      expect(JSON.stringify(answer.body)).not.toContain(SECRET)
      expect(JSON.stringify(answer.body)).not.toMatch(/\bat .*:\d+:\d+/)
    }
    expect(await snapshot(outside)).toEqual(before)
  })

  it('treats percent-encoded and Unicode look-alikes of ".." and "/" as plain names that stay inside', async () => {
    const before = await snapshot(outside)
    const lookAlikes = [
      '%2e%2e/%2e%2e/escape.txt', '..%2f..%2fescape.txt', '%2e%2e%2fescape.txt', '%252e%252e/escape.txt',
      '\uff0e\uff0e/\uff0e\uff0e/escape.txt', '\u2025/escape.txt', '..\u2215..\u2215escape.txt', '..\u29f8escape.txt',
      '\u002e\u002e\u2044escape.txt', 'ＥＳＣ/．．/escape.txt',
    ]
    for (const name of lookAlikes) {
      const written = await exec(app, 'write_file', { path: name, content: 'inside' }, { workspace: 'sec' })
      expect(written.status, `${JSON.stringify(name)} → ${JSON.stringify(written.body).slice(0, 200)}`).toBe(200)
      // It landed in the workspace under exactly that name, and reads back from there.
      expect(await readFile(path.join(wsDir, name), 'utf8')).toBe('inside')
      expect((await exec(app, 'read_file', { path: name }, { workspace: 'sec' })).body.result.content).toBe('inside')
    }
    expect(await snapshot(outside)).toEqual(before)
  })

  it('holds when a directory is swapped for a symlink to the outside during the calls', async () => {
    const before = await snapshot(outside)
    await mkdir(path.join(wsDir, 'swap'))
    await writeFile(path.join(wsDir, 'swap', 'secret.txt'), 'harmless')
    const swap = { on: true }
    const swapper = (async () => {
      for (let i = 0; swap.on; i++) {
        const asLink = i % 2 === 0
        await rm(path.join(wsDir, 'swap-next'), { recursive: true, force: true })
        if (asLink) await symlink(outside, path.join(wsDir, 'swap-next'))
        else {
          await mkdir(path.join(wsDir, 'swap-next'))
          await writeFile(path.join(wsDir, 'swap-next', 'secret.txt'), 'harmless')
        }
        await rename(path.join(wsDir, 'swap-next'), path.join(wsDir, 'swap')).catch(() => {})
        await new Promise((resolve) => setImmediate(resolve))
      }
    })()
    try {
      for (let round = 0; round < 150; round++) {
        const answers = await Promise.all([
          exec(app, 'read_file', { path: 'swap/secret.txt' }, { workspace: 'sec' }),
          exec(app, 'write_file', { path: 'swap/written.txt', content: 'PWNED' }, { workspace: 'sec' }),
          exec(app, 'list_directory', { path: 'swap' }, { workspace: 'sec' }),
          exec(app, 'edit_file', { path: 'swap/secret.txt', old_text: 'harmless', new_text: 'harmless' }, { workspace: 'sec' }),
        ])
        for (const answer of answers) expect(JSON.stringify(answer.body)).not.toContain(SECRET)
      }
    } finally {
      swap.on = false
      await swapper
    }
    expect(await snapshot(outside)).toEqual(before)
  }, 60_000)

  it('the archive upload writes nothing outside, whatever its entries or the links in the workspace', async () => {
    const before = await snapshot(outside)
    const toOutside = path.relative(wsDir, outside)
    const answer = await app.inject({
      method: 'PUT',
      url: '/v1/workspaces/sec/archive',
      headers: { 'content-type': 'application/gzip' },
      payload: tarOf([
        { name: `${toOutside}/evil.txt`, content: 'PWNED' },
        { name: '../evil.txt', content: 'PWNED' },
        { name: `${outside}/abs.txt`, content: 'PWNED' },
        { name: 'out/through-existing-link.txt', content: 'PWNED' },
        { name: 'dangling', content: 'PWNED' },
        { name: 'parentlink/escape.txt', content: 'PWNED' },
        { name: 'newlink', type: 'symlink', linkname: outside },
        { name: 'newlink/x.txt', content: 'PWNED' },
        { name: 'hard2', type: 'hardlink', linkname: path.join(outside, 'secret.txt') },
        { name: 'rel-escape', type: 'symlink', linkname: '../../../../..' },
        { name: 'fine.txt', content: 'fine' },
      ]),
    })
    expect(answer.statusCode).toBe(200)
    expect(await snapshot(outside)).toEqual(before)
    expect(answer.json().skipped.map((s: { path: string }) => s.path)).toEqual(expect.arrayContaining(['out', 'parentlink', 'newlink', 'hard2', 'rel-escape']))
    expect((await exec(app, 'read_file', { path: 'fine.txt' }, { workspace: 'sec' })).body.result.content).toBe('fine')
  })
})
