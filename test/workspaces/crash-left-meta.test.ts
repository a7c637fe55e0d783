/**
 * A workspace whose metadata file a crash left empty or cut short (it is
 * written without fsync): once the file is old enough not to be a record
 * being written, it is written again, so that the workspace can be used,
 * deleted and expire, and no longer counts against the quota for good.
 */
import { existsSync } from 'node:fs'
import { readFile, utimes, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { pino } from 'pino'
import { describe, expect, it } from 'vitest'
import { directoryNameOf } from '../../src/workspaces/ids.ts'
import { WorkspaceStore } from '../../src/workspaces/store.ts'
import { ToolError } from '../../src/errors.ts'
import { onCleanup, tempDir } from '../support/temp.ts'

const TTL_SECONDS = 600

async function store (root: string, maxWorkspaces = Infinity): Promise<WorkspaceStore> {
  const s = new WorkspaceStore({ root, ttlSeconds: TTL_SECONDS, sweepIntervalSeconds: 3600, log: pino({ level: 'silent' }), recheckMs: 0, maxWorkspacesOf: () => maxWorkspaces })
  await s.init()
  onCleanup(async () => s.close())
  return s
}

const codeOf = async (promise: Promise<unknown>): Promise<string> =>
  promise.then(() => 'ok', (error: unknown) => (error instanceof ToolError ? error.code : String(error)))

/** Makes `id` of tenant `t` with a file in it, then leaves its metadata as a crash would (`text`), last written `ageMs` ago. */
async function crashLeft (s: WorkspaceStore, id: string, text: string, ageMs: number): Promise<{ dir: string, meta: string }> {
  const made = await s.create('t', { id })
  await writeFile(path.join(made.dir, 'kept.txt'), 'kept')
  const meta = path.join(s.root, 'tenants', 't', 'meta', `${directoryNameOf(id)}.json`)
  await writeFile(meta, text)
  const at = new Date(Date.now() - ageMs)
  await utimes(meta, at, at)
  return { dir: made.dir, meta }
}

describe('a workspace whose metadata a crash left empty or cut short', () => {
  for (const [what, text] of [['empty', ''], ['cut short', '{"tenant":"t","id":"w",'], ['not a record', '[]']] as const) {
    it(`(${what}) is found again with its files once the file is old enough, and can be deleted`, async () => {
      const s = await store(await tempDir('toolport-crash-'))
      const { dir, meta } = await crashLeft(s, 'w', text, 60_000)
      // A restart: a second instance on the root knows only the disk.
      const other = await store(s.root)
      const found = await other.find('t', 'w')
      expect(found.dir).toBe(dir)
      expect(await readFile(path.join(found.dir, 'kept.txt'), 'utf8')).toBe('kept')
      // Made when its file was last written, with the default TTL from then; written down so for every instance.
      expect(found.expiresAt - found.createdAt).toBe(TTL_SECONDS * 1000)
      expect(Math.abs(found.createdAt - (Date.now() - 60_000))).toBeLessThan(5_000)
      expect(JSON.parse(await readFile(meta, 'utf8'))).toMatchObject({ tenant: 't', id: 'w', createdAt: found.createdAt, ttlSeconds: TTL_SECONDS })
      expect((await s.find('t', 'w')).incarnation).toBe(found.incarnation)
      await other.delete('t', 'w')
      expect(existsSync(meta)).toBe(false)
      expect(await codeOf(s.find('t', 'w'))).toBe('NotFound')
    })
  }

  it('expires when its file was written longer than a TTL ago: a sweep removes it and frees its place in the quota', async () => {
    const s = await store(await tempDir('toolport-crash-'), 1)
    const { dir, meta } = await crashLeft(s, 'old', '', (TTL_SECONDS + 60) * 1000)
    const other = await store(s.root, 1)
    expect(await codeOf(other.create('t', { id: 'next' }))).toBe('PermissionDenied')
    expect(await other.sweep()).toBe(1)
    expect(existsSync(meta)).toBe(false)
    expect(existsSync(dir)).toBe(false)
    expect(await codeOf(other.create('t', { id: 'next' }))).toBe('ok')
  })

  it('is left as it is while it may be a record being written (a volume without hard links writes in place)', async () => {
    const s = await store(await tempDir('toolport-crash-'))
    const { meta } = await crashLeft(s, 'young', '', 0)
    const other = await store(s.root)
    expect(await codeOf(other.find('t', 'young'))).toBe('NotFound')
    expect(await codeOf(other.create('t', { id: 'young' }))).toBe('Conflict')
    expect(await readFile(meta, 'utf8')).toBe('')
  })
})
