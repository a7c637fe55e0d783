import { existsSync } from 'node:fs'
import http from 'node:http'
import { readdir, readFile, stat, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { gunzipSync, gzipSync } from 'node:zlib'
import { describe, expect, it } from 'vitest'
import { buildTestApp, exec, tempDir } from '../helper.ts'
import { listening } from '../support/listening.ts'
import { expectProblem } from '../support/problem.ts'
import { tarEntries, tarOf } from '../support/tarball.ts'

type App = Awaited<ReturnType<typeof buildTestApp>>

const request = async (app: App, method: 'GET' | 'POST' | 'PUT' | 'DELETE', url: string, payload?: unknown, headers: Record<string, string> = {}) => {
  const response = await app.inject({ method, url, payload: payload as string, headers })
  let body: any = response.body
  try { body = response.json() } catch {}
  return { status: response.statusCode, body, headers: response.headers, raw: response.rawPayload }
}

/** PUTs `archive` to the workspace `id` in two halves, running `between` after the first: its answer. */
/** The staging directories of `app`'s uploads. */
const stagings = async (app: App): Promise<string[]> => await readdir(app.runtime.workspaces.stagingDir).catch(() => [])

/** Resolves once an upload's staging directory not among `before` is there (at most 10 s). */
async function staged (app: App, before: string[]): Promise<void> {
  for (const deadline = Date.now() + 10_000; Date.now() < deadline; await new Promise((resolve) => setTimeout(resolve, 20))) {
    if ((await stagings(app)).some((name) => !before.includes(name))) return
  }
  throw new Error('the upload was not staged within 10 s')
}

async function uploadInHalves (app: App, id: string, archive: Buffer, between: () => Promise<void>): Promise<{ status: number, body: Record<string, unknown> }> {
  const address = app.server.address()
  const base = address !== null && typeof address === 'object' ? `http://127.0.0.1:${address.port}` : await listening(app)
  const before = await stagings(app)
  return new Promise((resolve, reject) => {
    const upload = http.request(`${base}/v1/workspaces/${id}/archive`, { method: 'PUT', headers: { 'content-type': 'application/gzip', 'content-length': archive.length } }, (response) => {
      let text = ''
      response.on('data', (chunk: Buffer) => { text += chunk.toString() })
      response.on('end', () => resolve({ status: response.statusCode ?? 0, body: JSON.parse(text) as Record<string, unknown> }))
    })
    upload.on('error', reject)
    // `between` runs once the service is reading the archive (its staging directory is made, the workspace held by then).
    upload.write(archive.subarray(0, archive.length >> 1), () => {
      staged(app, before).then(between).then(() => upload.end(archive.subarray(archive.length >> 1)), reject)
    })
  })
}

describe('workspaces', () => {
  it('creates (201), describes, conflicts (409) and deletes (204, then 404)', async () => {
    const app = await buildTestApp({ workspaces: { ttl_seconds: 3600 } })
    const created = await request(app, 'POST', '/v1/workspaces', { id: 'ws-1' })
    expect(created.status).toBe(201)
    expect(created.headers['location']).toBe('/v1/workspaces/ws-1')
    expect(Date.parse(created.body.expires_at) - Date.parse(created.body.created_at)).toBe(3_600_000)
    await exec(app, 'write_file', { path: 'a.txt', content: 'abc' }, { workspace: 'ws-1' })
    await exec(app, 'write_file', { path: 'sub/b.txt', content: 'defg' }, { workspace: 'ws-1' })
    expect((await request(app, 'GET', '/v1/workspaces/ws-1')).body).toMatchObject({ id: 'ws-1', files: 2, bytes: 7 })
    expectProblem(await request(app, 'POST', '/v1/workspaces', { id: 'ws-1' }), 409, 'Conflict')
    const dir = app.runtime.workspaces.get('default', 'ws-1').dir
    const deleted = await request(app, 'DELETE', '/v1/workspaces/ws-1')
    expect([deleted.status, deleted.raw.length]).toEqual([204, 0])
    expect(existsSync(dir)).toBe(false)
    expectProblem(await request(app, 'GET', '/v1/workspaces/ws-1'), 404, 'NotFound')
    expectProblem(await request(app, 'DELETE', '/v1/workspaces/ws-1'), 404, 'NotFound')
  })

  it('generates an id and honours ttl_seconds', async () => {
    const app = await buildTestApp()
    const created = await request(app, 'POST', '/v1/workspaces', { ttl_seconds: 120 })
    expect(created.body.id).toMatch(/^[0-9a-f-]{36}$/)
    expect(Date.parse(created.body.expires_at) - Date.parse(created.body.created_at)).toBe(120_000)
  })

  it.each([['..'], ['a/b'], ['a\\b'], ['a\u0000b'], ['x'.repeat(257)], ['']])('refuses the id %j with InvalidArgs before touching the disk', async (id) => {
    const app = await buildTestApp()
    expectProblem(await request(app, 'POST', '/v1/workspaces', { id }), 400, 'InvalidArgs')
    expectProblem(await exec(app, 'write_file', { path: 'probe.txt', content: 'x' }, { workspace: id }), 400, 'InvalidArgs', 'write_file')
    expect((await readdir(path.join(app.runtime.workspaces.root))).sort()).toEqual(['ephemeral', 'tenants'])
    expect(await readdir(path.join(app.runtime.workspaces.root, 'tenants'))).toEqual([])
  })

  it('treats an expired workspace as gone at once, before any sweep', async () => {
    const app = await buildTestApp({ workspaces: { sweep_interval_seconds: 3600 } })
    expect((await request(app, 'POST', '/v1/workspaces', { id: 'short', ttl_seconds: 1 })).status).toBe(201)
    await exec(app, 'write_file', { path: 'a.txt', content: 'old' }, { workspace: 'short' })
    const dir = app.runtime.workspaces.get('default', 'short').dir
    await new Promise((resolve) => setTimeout(resolve, 1200))
    expectProblem(await request(app, 'GET', '/v1/workspaces/short'), 404, 'NotFound')
    expect(existsSync(dir)).toBe(false)
    expect((await request(app, 'POST', '/v1/workspaces', { id: 'short' })).status).toBe(201)
    expectProblem(await exec(app, 'read_file', { path: 'a.txt' }, { workspace: 'short' }), 404, 'FileNotFound', 'read_file')
  })

  it('keeps a 256-byte id', async () => {
    const app = await buildTestApp()
    const id = 'w'.repeat(256)
    expect((await request(app, 'POST', '/v1/workspaces', { id })).status).toBe(201)
    expect((await request(app, 'GET', `/v1/workspaces/${id}`)).body.id).toBe(id)
  })

  it('round-trips an archive: upload, tools see it, download has everything', async () => {
    const app = await buildTestApp()
    const up = await request(app, 'PUT', '/v1/workspaces/arch/archive', tarOf([
      { name: 'hello.txt', content: 'hello archive\n' },
      { name: 'dir', type: 'dir' },
      { name: 'dir/nested.txt', content: 'nested ✓' },
    ]), { 'content-type': 'application/gzip' })
    expect(up.status, JSON.stringify(up.body)).toBe(200)
    expect(up.body).toMatchObject({ files: 2, skipped: [] })
    expect((await exec(app, 'read_file', { path: 'dir/nested.txt' }, { workspace: 'arch' })).body.result.content).toBe('nested ✓')
    await exec(app, 'write_file', { path: 'later.txt', content: 'written later' }, { workspace: 'arch' })
    const down = await request(app, 'GET', '/v1/workspaces/arch/archive')
    expect(down.headers['content-type']).toMatch(/^application\/gzip/)
    const files = tarEntries(gunzipSync(down.raw))
    expect([files['hello.txt'], files['dir/nested.txt'], files['later.txt']]).toEqual(['hello archive\n', 'nested ✓', 'written later'])
  })

  it('skips hostile entries and writes nothing outside', async () => {
    const app = await buildTestApp()
    const outside = await tempDir()
    await writeFile(path.join(outside, 'secret.txt'), 'TOPSECRET')
    const up = await request(app, 'PUT', '/v1/workspaces/hostile/archive', tarOf([
      { name: '../dotdot.txt', content: 'evil' },
      { name: 'sub/../../nested.txt', content: 'evil' },
      { name: `${outside}/abs.txt`, content: 'evil' },
      { name: 'lnk', type: 'symlink', linkname: outside },
      { name: 'lnk/through-link.txt', content: 'evil' },
      { name: 'hard', type: 'hardlink', linkname: path.join(outside, 'secret.txt') },
      { name: 'inner-link', type: 'symlink', linkname: 'fine.txt' },
      { name: 'fine.txt', content: 'fine' },
    ]), { 'content-type': 'application/gzip' })
    expect(up.status).toBe(200)
    expect(up.body.skipped.map((s: any) => s.path).sort()).toEqual(['../dotdot.txt', `${outside}/abs.txt`, 'hard', 'lnk', 'sub/../../nested.txt'].sort())
    expect(await readdir(outside)).toEqual(['secret.txt'])
    expect(await readFile(path.join(outside, 'secret.txt'), 'utf8')).toBe('TOPSECRET')
    const root = app.runtime.workspaces.root
    expect(existsSync(path.join(root, '..', 'dotdot.txt'))).toBe(false)
    expect((await exec(app, 'read_file', { path: 'fine.txt' }, { workspace: 'hostile' })).body.result.content).toBe('fine')
    expect((await exec(app, 'read_file', { path: 'inner-link' }, { workspace: 'hostile' })).body.result.content).toBe('fine')
    expect((await exec(app, 'read_file', { path: 'lnk/through-link.txt' }, { workspace: 'hostile' })).body.result.content).toBe('evil')
  })

  it('lists every entry it leaves out, also those node-tar would drop unasked, and counts past the first 100', async () => {
    const app = await buildTestApp()
    const up = await request(app, 'PUT', '/v1/workspaces/dropped/archive', tarOf([
      { name: 'holes.img', type: 'sparse' },
      { name: '.', content: 'a file for the workspace itself' },
      { name: Buffer.from([0x6e, 0xff, 0x2e, 0x74]), content: 'one' },
      { name: Buffer.from([0x6e, 0xfe, 0x2e, 0x74]), content: 'two' },
      { name: './', type: 'dir' },
      { name: 'kept.txt', content: 'kept' },
    ]), { 'content-type': 'application/gzip' })
    expect(up.status).toBe(200)
    // The first name that is not UTF-8 is kept (as U+FFFD); the second, which reads the same, is not merged into it.
    expect(up.body).toMatchObject({ files: 2, skipped_count: 3 })
    expect(up.body.skipped.map((s: any) => s.reason)).toEqual([
      'entry type SparseFile is not allowed (only files, directories and symlinks)',
      'names the workspace itself',
      'the name is not valid UTF-8, and reads the same as an earlier entry\'s',
    ])
    expect((await exec(app, 'read_file', { path: 'n\uFFFD.t' }, { workspace: 'dropped' })).body.result.content).toBe('one')
    // A name that holds U+FFFD itself is valid: a workspace's own archive takes it back.
    const valid = await request(app, 'PUT', '/v1/workspaces/dropped/archive', tarOf([{ name: 'notes-\uFFFD.txt', content: 'kept' }]), { 'content-type': 'application/gzip' })
    expect(valid.body).toMatchObject({ files: 1, skipped_count: 0 })
    const many = await request(app, 'PUT', '/v1/workspaces/dropped/archive', tarOf(Array.from({ length: 150 }, (_, i) => ({ name: `../out-${i}`, content: 'x' }))), { 'content-type': 'application/gzip' })
    expect(many.status).toBe(200)
    expect(many.body.skipped_count).toBe(150)
    expect(many.body.skipped).toHaveLength(100)
    expect(many.body.skipped[99].path).toBe('../out-99')
  })

  it('takes back the archive of an empty workspace (a tar of no entries)', async () => {
    const app = await buildTestApp()
    expect((await request(app, 'POST', '/v1/workspaces', { id: 'empty' })).status).toBe(201)
    const archive = await app.inject({ method: 'GET', url: '/v1/workspaces/empty/archive' })
    expect(archive.statusCode).toBe(200)
    const back = await request(app, 'PUT', '/v1/workspaces/empty/archive', archive.rawPayload, { 'content-type': 'application/gzip' })
    expect(back).toMatchObject({ status: 200, body: { files: 0, directories: 0, symlinks: 0, skipped: [], skipped_count: 0 } })
    // A few zero bytes, or nothing, is no archive.
    for (const inflated of [Buffer.alloc(7), Buffer.alloc(0)]) {
      expect((await request(app, 'PUT', '/v1/workspaces/empty/archive', gzipSync(inflated), { 'content-type': 'application/gzip' })).status).toBe(400)
    }
  })

  it('refuses what is not a gzip archive and archives of unknown workspaces', async () => {
    const app = await buildTestApp()
    expectProblem(await request(app, 'PUT', '/v1/workspaces/x/archive', Buffer.from('not a tarball'), { 'content-type': 'application/gzip' }), 400, 'BadRequest')
    expectProblem(await request(app, 'PUT', '/v1/workspaces/x/archive', gzipSync(Buffer.from('not a tar inside')), { 'content-type': 'application/gzip' }), 400, 'BadRequest')
    expectProblem(await request(app, 'GET', '/v1/workspaces/never/archive'), 404, 'NotFound')
  })

  it('answers a file and then a directory of the same name with a 400 naming no server path, leaving nothing behind', async () => {
    const app = await buildTestApp()
    const entries = [{ name: 'dup', content: 'file' }, { name: 'dup/inner', content: 'x' }, ...Array.from({ length: 50 }, (_, i) => ({ name: `more/f${i}`, content: 'y'.repeat(1000) }))]
    for (let attempt = 0; attempt < 3; attempt++) {
      const answer = expectProblem(await request(app, 'PUT', '/v1/workspaces/dm/archive', tarOf(entries), { 'content-type': 'application/gzip' }), 400, 'BadRequest')
      expect(answer['detail']).not.toContain(app.runtime.workspaces.root)
      expect(answer['detail']).not.toMatch(/staging/)
    }
    // Neither the workspace the upload would have created nor any staging directory is left.
    expectProblem(await request(app, 'GET', '/v1/workspaces/dm'), 404, 'NotFound')
    expect(await readdir(path.join(app.runtime.workspaces.root, 'tenants', 'default', 'ws')).catch(() => [])).toEqual([])
  })

  it('strips setuid, setgid and sticky bits, and accepts highly compressible files', async () => {
    const app = await buildTestApp()
    const zeros = Buffer.alloc(5 * 1024 * 1024)
    const answer = await request(app, 'PUT', '/v1/workspaces/modes/archive', tarOf([
      { name: 'suid', content: '#!/bin/sh\n', mode: 0o4755 },
      { name: 'sgid', content: 'x', mode: 0o2775 },
      { name: 'zeros.bin', content: zeros },
    ]), { 'content-type': 'application/gzip' })
    expect(answer.status).toBe(200)
    const dir = (await app.runtime.workspaces.find('default', 'modes')).dir
    expect((await stat(path.join(dir, 'suid'))).mode & 0o7777).toBe(0o755)
    expect((await stat(path.join(dir, 'sgid'))).mode & 0o7000).toBe(0)
    expect((await stat(path.join(dir, 'zeros.bin'))).size).toBe(zeros.length)
  })

  it('stops inflating a bomb at the byte limit: 413, nothing extracted', async () => {
    const app = await buildTestApp({ workspaces: { max_archive_bytes: 1024 * 1024 } })
    const bomb = tarOf(Array.from({ length: 8 }, (_, i) => ({ name: `z${i}`, content: Buffer.alloc(4 * 1024 * 1024) })))
    expectProblem(await request(app, 'PUT', '/v1/workspaces/bomb/archive', bomb, { 'content-type': 'application/gzip' }), 413, 'PayloadTooLarge')
    expectProblem(await request(app, 'GET', '/v1/workspaces/bomb'), 404, 'NotFound')
  })

  it('answers an upload whose workspace was deleted meanwhile, or deleted and made again, as NotFound, never as files written into it', async () => {
    const app = await buildTestApp()
    const archive = tarOf([{ name: 'a.txt', content: 'a' }, { name: 'big.bin', content: Buffer.alloc(2 * 1024 * 1024, 7) }, { name: 'z.txt', content: 'z' }])
    for (const madeAgain of [false, true]) {
      expect((await request(app, 'POST', '/v1/workspaces', { id: 'gone' })).status).toBe(201)
      const { status, body } = await uploadInHalves(app, 'gone', archive, async () => {
        expect((await request(app, 'DELETE', '/v1/workspaces/gone')).status).toBe(204)
        if (madeAgain) expect((await request(app, 'POST', '/v1/workspaces', { id: 'gone' })).status).toBe(201)
      })
      expect(status).toBe(404)
      expect(body).toMatchObject({ code: 'NotFound', detail: 'the workspace was deleted during the upload' })
      if (madeAgain) {
        expect((await request(app, 'GET', '/v1/workspaces/gone')).body.files).toBe(0)
        expect((await request(app, 'DELETE', '/v1/workspaces/gone')).status).toBe(204)
      } else {
        expectProblem(await request(app, 'GET', '/v1/workspaces/gone'), 404, 'NotFound')
      }
    }
  })

  it('holds the workspace while its archive is read: one whose TTL runs out meanwhile keeps its files and takes the archive', async () => {
    const app = await buildTestApp({ workspaces: { sweep_interval_seconds: 1 } })
    expect((await request(app, 'POST', '/v1/workspaces', { id: 'brief', ttl_seconds: 1 })).status).toBe(201)
    expect((await exec(app, 'write_file', { path: 'keep.txt', content: 'keep' }, { workspace: 'brief' })).status).toBe(200)
    const archive = tarOf([{ name: 'a.txt', content: 'a' }, { name: 'big.bin', content: Buffer.alloc(2 * 1024 * 1024, 7) }])
    const { status, body } = await uploadInHalves(app, 'brief', archive, async () => { await new Promise((resolve) => setTimeout(resolve, 2500)) })
    expect(status, JSON.stringify(body)).toBe(200)
    expect((await exec(app, 'read_file', { path: 'keep.txt' }, { workspace: 'brief' })).body.result).toMatchObject({ content: 'keep' })
  })

  it('leaves a workspace that others made and wrote into while a refused upload to its id was read', async () => {
    const app = await buildTestApp({ workspaces: { max_archive_entries: 2 } })
    // The third entry, in the second half, is one too many: refused only once the rest arrives.
    const archive = tarOf([{ name: 'a.txt', content: 'a' }, { name: 'big.bin', content: Buffer.alloc(2 * 1024 * 1024, 7) }, { name: 'z.txt', content: 'z' }])
    const { status, body } = await uploadInHalves(app, 'shared', archive, async () => {
      expect((await exec(app, 'write_file', { path: 'important.txt', content: 'precious' }, { workspace: 'shared' })).status).toBe(200)
    })
    expect(status).toBe(413)
    expect(body).toMatchObject({ code: 'PayloadTooLarge' })
    expect((await request(app, 'GET', '/v1/workspaces/shared')).body.files).toBe(1)
    expect((await exec(app, 'read_file', { path: 'important.txt' }, { workspace: 'shared' })).body.result).toMatchObject({ content: 'precious' })
  })

  it('refuses an archive over the entry limit, changing nothing', async () => {
    const app = await buildTestApp({ workspaces: { max_archive_entries: 3 } })
    const entries = Array.from({ length: 5 }, (_, i) => ({ name: `f${i}.txt`, content: 'x' }))
    expectProblem(await request(app, 'PUT', '/v1/workspaces/lim/archive', tarOf(entries), { 'content-type': 'application/gzip' }), 413, 'PayloadTooLarge')
    expectProblem(await request(app, 'GET', '/v1/workspaces/lim'), 404, 'NotFound')
    expect((await request(app, 'POST', '/v1/workspaces', { id: 'lim2' })).status).toBe(201)
    expectProblem(await request(app, 'PUT', '/v1/workspaces/lim2/archive', tarOf(entries), { 'content-type': 'application/gzip' }), 413, 'PayloadTooLarge')
    expect((await request(app, 'GET', '/v1/workspaces/lim2')).body.files).toBe(0)
  })
})
