/**
 * Per-tenant quotas: the number of persistent workspaces a tenant holds, and
 * the bytes one workspace holds. A write over the byte quota is refused whole:
 * nothing is half-written and the old content stays.
 */
import { existsSync } from 'node:fs'
import { readFile } from 'node:fs/promises'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { buildTestApp } from '../helper.ts'
import { expectProblem } from '../support/problem.ts'
import { execAs, requestAs } from '../support/requests.ts'
import { tarOf } from '../support/tarball.ts'

const TOKENS = [
  { token: 'acme', tenant: 'acme', allowed_tools: ['*'] },
  { token: 'beta', tenant: 'beta', allowed_tools: ['*'] },
]

describe('workspace count quota', () => {
  it('refuses a tenant\'s workspace beyond its quota, explicit or implicit, and frees a place on delete', async () => {
    const app = await buildTestApp({ auth: { tokens: TOKENS }, workspaces: { max_per_tenant: 2, tenant_quotas: { beta: { max_workspaces: 3 } } } })
    expect((await requestAs(app, 'acme', 'POST', '/v1/workspaces', { id: 'one' })).status).toBe(201)
    expect((await execAs(app, 'acme', 'write_file', { path: 'a', content: 'a' }, 'two')).status).toBe(200)
    const refused = expectProblem(await requestAs(app, 'acme', 'POST', '/v1/workspaces', { id: 'three' }), 403, 'PermissionDenied')
    expect(refused['detail']).toMatch(/quota of 2 workspaces/)
    expectProblem(await execAs(app, 'acme', 'write_file', { path: 'a', content: 'a' }, 'three'), 403, 'PermissionDenied', 'write_file')
    expectProblem(await requestAs(app, 'acme', 'PUT', '/v1/workspaces/three/archive', tarOf([{ name: 'a', content: 'a' }]), { 'content-type': 'application/gzip' }), 403, 'PermissionDenied')
    expect(existsSync(path.join(app.runtime.workspaces.root, 'tenants', 'acme', 'ws', 'three'))).toBe(false)
    // Existing workspaces keep working, and calls without a workspace are not counted.
    expect((await execAs(app, 'acme', 'write_file', { path: 'b', content: 'b' }, 'one')).status).toBe(200)
    expect((await execAs(app, 'acme', 'write_file', { path: 'b', content: 'b' })).status).toBe(200)
    // Another tenant has its own count, with its own override.
    for (const id of ['x', 'y', 'z']) expect((await requestAs(app, 'beta', 'POST', '/v1/workspaces', { id })).status).toBe(201)
    expectProblem(await requestAs(app, 'beta', 'POST', '/v1/workspaces', { id: 'w' }), 403, 'PermissionDenied')
    expect((await requestAs(app, 'acme', 'DELETE', '/v1/workspaces/one')).status).toBe(204)
    expect((await requestAs(app, 'acme', 'POST', '/v1/workspaces', { id: 'three' })).status).toBe(201)
  })

  it('takes as many concurrent creations as the quota allows, none refused short of it', async () => {
    const app = await buildTestApp({ auth: { tokens: TOKENS }, workspaces: { max_per_tenant: 60 } })
    // Eight clients creating one after another: creations begin while others are half done (their metadata written, not yet counted as made).
    const statuses = (await Promise.all(Array.from({ length: 8 }, async (_, client) => {
      const mine: number[] = []
      for (let i = 0; i < Math.floor(60 / 8) + (client < 60 % 8 ? 1 : 0); i++) mine.push((await requestAs(app, 'acme', 'POST', '/v1/workspaces', { id: `q${client}-${i}` })).status)
      return mine
    }))).flat()
    expect(statuses).toHaveLength(60)
    expect(statuses.filter((status) => status !== 201)).toEqual([])
    expectProblem(await requestAs(app, 'acme', 'POST', '/v1/workspaces', { id: 'one-more' }), 403, 'PermissionDenied')
  })

  it('holds under concurrent creations', async () => {
    const app = await buildTestApp({ auth: { tokens: TOKENS }, workspaces: { max_per_tenant: 3 } })
    const answers = await Promise.all(Array.from({ length: 12 }, (_, i) => requestAs(app, 'acme', 'POST', '/v1/workspaces', { id: `c${i}` })))
    expect(answers.filter((a) => a.status === 201)).toHaveLength(3)
    expect(answers.filter((a) => a.status === 403)).toHaveLength(9)
    expect(app.runtime.workspaces.countOf('acme')).toBe(3)
  })
})

describe('workspace byte quota', () => {
  it('refuses a write that would go over, keeping the old content, and allows one that shrinks', async () => {
    const app = await buildTestApp({ workspaces: { max_bytes: 4096 } })
    expect((await execAs(app, '', 'write_file', { path: 'a.txt', content: 'a'.repeat(3000) }, 'q')).status).toBe(200)
    const dir = app.runtime.workspaces.get('default', 'q').dir
    const over = expectProblem(await execAs(app, '', 'write_file', { path: 'b.txt', content: 'b'.repeat(2000) }, 'q'), 413, 'PayloadTooLarge', 'write_file')
    expect(over['detail']).toMatch(/quota of 4096 bytes/)
    expect(existsSync(path.join(dir, 'b.txt'))).toBe(false)
    // Replacing a file counts only the difference.
    expect((await execAs(app, '', 'write_file', { path: 'a.txt', content: 'c'.repeat(4000) }, 'q')).status).toBe(200)
    expectProblem(await execAs(app, '', 'write_file', { path: 'a.txt', content: 'd'.repeat(5000) }, 'q'), 413, 'PayloadTooLarge')
    expect(await readFile(path.join(dir, 'a.txt'), 'utf8')).toBe('c'.repeat(4000))
    expect((await execAs(app, '', 'write_file', { path: 'a.txt', content: 'small' }, 'q')).status).toBe(200)
    // Ephemeral workspaces have the same quota.
    expectProblem(await execAs(app, '', 'write_file', { path: 'big.txt', content: 'e'.repeat(5000) }), 413, 'PayloadTooLarge')
  })

  it('applies to edits, memory appends and the omega write', async () => {
    const app = await buildTestApp({ tools: { builtin: ['*'] }, workspaces: { max_bytes: 2048 } })
    expect((await execAs(app, '', 'write_file', { path: 'a.txt', content: `x${'.'.repeat(1500)}` }, 'q')).status).toBe(200)
    expectProblem(await execAs(app, '', 'edit_file', { path: 'a.txt', old_text: 'x', new_text: 'y'.repeat(1000) }, 'q'), 413, 'PayloadTooLarge', 'edit_file')
    expectProblem(await execAs(app, '', 'edit', { file_path: 'a.txt', old_string: 'x', new_string: 'y'.repeat(1000) }, 'q'), 413, 'PayloadTooLarge', 'edit')
    expectProblem(await execAs(app, '', 'memory_write', { content: 'm'.repeat(1000) }, 'q'), 413, 'PayloadTooLarge', 'memory_write')
    expectProblem(await execAs(app, '', 'write', { file_path: 'w.txt', content: 'w'.repeat(1000) }, 'q'), 413, 'PayloadTooLarge', 'write')
    const dir = app.runtime.workspaces.get('default', 'q').dir
    expect(await readFile(path.join(dir, 'a.txt'), 'utf8')).toBe(`x${'.'.repeat(1500)}`)
    expect(existsSync(path.join(dir, 'memory'))).toBe(false)
  })

  it('refuses an archive that would go over, extracting nothing', async () => {
    const app = await buildTestApp({ workspaces: { max_bytes: 4096 } })
    const upload = (entries: Array<{ name: string, content: string }>) =>
      requestAs(app, '', 'PUT', '/v1/workspaces/arc/archive', tarOf(entries), { 'content-type': 'application/gzip' })
    expect((await upload([{ name: 'a.txt', content: 'a'.repeat(2000) }])).status).toBe(200)
    expectProblem(await upload([{ name: 'b.txt', content: 'b'.repeat(1000) }, { name: 'c.txt', content: 'c'.repeat(2000) }]), 413, 'PayloadTooLarge')
    const dir = app.runtime.workspaces.get('default', 'arc').dir
    expect([existsSync(path.join(dir, 'b.txt')), existsSync(path.join(dir, 'c.txt'))]).toEqual([false, false])
  })

  it('credits the files an archive replaces, so a workspace over half its quota can be restored from its own archive', async () => {
    const app = await buildTestApp({ tools: { builtin: ['*'] }, workspaces: { max_bytes: 4096 } })
    expect((await execAs(app, '', 'write_file', { path: 'src/a.txt', content: 'a'.repeat(3000) }, 'back')).status).toBe(200)
    const archive = await app.inject({ method: 'GET', url: '/v1/workspaces/back/archive' })
    expect(archive.statusCode).toBe(200)
    const restored = await requestAs(app, '', 'PUT', '/v1/workspaces/back/archive', archive.rawPayload, { 'content-type': 'application/gzip' })
    expect(restored.status).toBe(200)
    const dir = app.runtime.workspaces.get('default', 'back').dir
    expect(await readFile(path.join(dir, 'src/a.txt'), 'utf8')).toBe('a'.repeat(3000))
    // Only a file at the entry's own name is credited: a link there is replaced, not the file it points to.
    expect((await execAs(app, '', 'exec_shell', { command: 'mv src/a.txt big && ln -s big src/a.txt' }, 'back')).status).toBe(200)
    expectProblem(await requestAs(app, '', 'PUT', '/v1/workspaces/back/archive', tarOf([{ name: 'src/a.txt', content: 'b'.repeat(3000) }]), { 'content-type': 'application/gzip' }), 413, 'PayloadTooLarge')
    expect((await execAs(app, '', 'exec_shell', { command: 'test -L src/a.txt && wc -c < big' }, 'back')).body).toMatchObject({ result: { exit_code: 0, stdout: '3000\n' } })
  })
})

describe('workspace usage without a walk per request', () => {
  const info = async (app: Awaited<ReturnType<typeof buildTestApp>>, id: string) => {
    const { files, bytes } = (await requestAs(app, '', 'GET', `/v1/workspaces/${id}`)).body as { files: number, bytes: number }
    return { files, bytes }
  }

  it('refuses a write right after a process filled the workspace, writing nothing, and admits it once the process freed room', async () => {
    const app = await buildTestApp({ tools: { builtin: ['*'] }, workspaces: { max_bytes: 4096 } })
    expect((await execAs(app, '', 'write_file', { path: 'a.txt', content: 'a' }, 'full')).status).toBe(200)
    expect((await execAs(app, '', 'exec_shell', { command: 'head -c 3500 /dev/zero > big.bin' }, 'full')).status).toBe(200)
    const dir = app.runtime.workspaces.get('default', 'full').dir
    expectProblem(await execAs(app, '', 'write_file', { path: 'b.txt', content: 'b'.repeat(1000) }, 'full'), 413, 'PayloadTooLarge', 'write_file')
    expectProblem(await execAs(app, '', 'memory_write', { content: 'm'.repeat(1000) }, 'full'), 413, 'PayloadTooLarge', 'memory_write')
    expectProblem(await execAs(app, '', 'bash', { command: 'head -c 100 /dev/zero >> big.bin' }, 'full').then(() => execAs(app, '', 'write', { file_path: 'w.txt', content: 'w'.repeat(500) }, 'full')), 413, 'PayloadTooLarge', 'write')
    expect([existsSync(path.join(dir, 'b.txt')), existsSync(path.join(dir, 'memory')), existsSync(path.join(dir, 'w.txt'))]).toEqual([false, false, false])
    expect((await execAs(app, '', 'exec_shell', { command: 'rm big.bin' }, 'full')).status).toBe(200)
    expect((await execAs(app, '', 'write_file', { path: 'b.txt', content: 'b'.repeat(1000) }, 'full')).status).toBe(200)
  })

  it('is right after writes, edits, memory appends, deletes through processes and archive uploads', async () => {
    const app = await buildTestApp({ tools: { builtin: ['*'] } })
    expect((await requestAs(app, '', 'POST', '/v1/workspaces', { id: 'u' })).status).toBe(201)
    expect(await info(app, 'u')).toEqual({ files: 0, bytes: 0 })
    await execAs(app, '', 'write_file', { path: 'a.txt', content: 'hello' }, 'u')
    await execAs(app, '', 'write', { file_path: 'd/b.txt', content: 'abc' }, 'u')
    expect(await info(app, 'u')).toEqual({ files: 2, bytes: 8 })
    await execAs(app, '', 'write_file', { path: 'a.txt', content: 'hi' }, 'u')
    expect(await info(app, 'u')).toEqual({ files: 2, bytes: 5 })
    await execAs(app, '', 'edit_file', { path: 'a.txt', old_text: 'hi', new_text: 'hello there' }, 'u')
    await execAs(app, '', 'edit', { file_path: 'd/b.txt', old_string: 'abc', new_string: 'a' }, 'u')
    expect(await info(app, 'u')).toEqual({ files: 2, bytes: 12 })
    await execAs(app, '', 'memory_write', { content: 'one' }, 'u')
    await execAs(app, '', 'memory_write', { content: 'two' }, 'u')
    // "one", then a blank line and "two".
    expect(await info(app, 'u')).toEqual({ files: 3, bytes: 12 + 8 })
    await execAs(app, '', 'exec_shell', { command: 'rm a.txt && printf 1234 > p.txt' }, 'u')
    expect(await info(app, 'u')).toEqual({ files: 3, bytes: 1 + 8 + 4 })
    await execAs(app, '', 'bash', { command: 'rm -r d memory' }, 'u')
    expect(await info(app, 'u')).toEqual({ files: 1, bytes: 4 })
    const upload = await requestAs(app, '', 'PUT', '/v1/workspaces/u/archive', tarOf([{ name: 'p.txt', content: '12' }, { name: 'z/y.txt', content: 'yyy' }]), { 'content-type': 'application/gzip' })
    expect(upload.status).toBe(200)
    expect(await info(app, 'u')).toEqual({ files: 2, bytes: 5 })
    expect((await requestAs(app, '', 'DELETE', '/v1/workspaces/u')).status).toBe(204)
    await execAs(app, '', 'write_file', { path: 'again.txt', content: 'x' }, 'u')
    expect(await info(app, 'u')).toEqual({ files: 1, bytes: 1 })
  })

  it('lets only one of two concurrent writes take the last free bytes', async () => {
    const app = await buildTestApp({ workspaces: { max_bytes: 2048 } })
    expect((await execAs(app, '', 'write_file', { path: 'seed', content: 's' }, 'race')).status).toBe(200)
    for (const round of [1, 2, 3]) {
      // After a process, both writes need the scan: still one of them only.
      if (round === 3) await execAs(app, '', 'exec_shell', { command: 'true' }, 'race')
      const answers = await Promise.all([
        execAs(app, '', 'write_file', { path: `x${round}`, content: 'x'.repeat(1200) }, 'race'),
        execAs(app, '', 'memory_write', { content: 'y'.repeat(1200) }, 'race'),
      ])
      expect(answers.map((a) => a.status).sort()).toEqual([200, 413])
      const dir = app.runtime.workspaces.get('default', 'race').dir
      await execAs(app, '', 'exec_shell', { command: `rm -rf x${round} memory` }, 'race')
      expect(existsSync(path.join(dir, 'memory'))).toBe(false)
    }
    // An upload and a write at once: one of them.
    const both = await Promise.all([
      execAs(app, '', 'write_file', { path: 'w', content: 'w'.repeat(1200) }, 'race'),
      requestAs(app, '', 'PUT', '/v1/workspaces/race/archive', tarOf([{ name: 't', content: 't'.repeat(1200) }]), { 'content-type': 'application/gzip' }),
    ])
    expect(both.map((a) => a.status).sort()).toEqual([200, 413])
  })
})
