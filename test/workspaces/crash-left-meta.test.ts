/**
 * A workspace whose metadata file a crash left empty or cut short (it is
 * written without fsync): once the file has stayed so a while, by the
 * instance's own clock, its record is written again, so that the workspace
 * can be used, deleted and expire, and no longer counts against the quota
 * for good; an instance that held the workspace all along keeps it as it
 * was, processes and all.
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
/** How long a file must stay without its record here (the service waits 10 s). */
const AFTER_MS = 200

async function store (root: string, maxWorkspaces = Infinity): Promise<WorkspaceStore> {
  const s = new WorkspaceStore({ root, ttlSeconds: TTL_SECONDS, sweepIntervalSeconds: 3600, log: pino({ level: 'silent' }), recheckMs: 0, maxWorkspacesOf: () => maxWorkspaces, crashLeftAfterMs: AFTER_MS })
  await s.init()
  onCleanup(async () => s.close())
  return s
}

const codeOf = async (promise: Promise<unknown>): Promise<string> =>
  promise.then(() => 'ok', (error: unknown) => (error instanceof ToolError ? error.code : String(error)))

const waitOut = async (): Promise<void> => new Promise((resolve) => setTimeout(resolve, AFTER_MS + 50))

/** Makes `id` of tenant `t` with a file in it, then leaves its metadata as a crash would (`text`), last written `ageMs` ago. */
async function crashLeft (s: WorkspaceStore, id: string, text: string, ageMs: number): Promise<{ dir: string, meta: string, record: string }> {
  const made = await s.create('t', { id })
  await writeFile(path.join(made.dir, 'kept.txt'), 'kept')
  const meta = path.join(s.root, 'tenants', 't', 'meta', `${directoryNameOf(id)}.json`)
  const record = await readFile(meta, 'utf8')
  await writeFile(meta, text)
  const at = new Date(Date.now() - ageMs)
  await utimes(meta, at, at)
  return { dir: made.dir, meta, record }
}

describe('a workspace whose metadata a crash left empty or cut short', () => {
  for (const [what, text] of [['empty', ''], ['cut short', '{"tenant":"t","id":"w",'], ['not a record', '[]']] as const) {
    it(`(${what}) is found again with its files once the file stayed so a while, and can be deleted`, async () => {
      const s = await store(await tempDir('toolport-crash-'))
      const removals: string[] = []
      s.onRemoval(async (dir) => { removals.push(dir) })
      const { dir, meta, record } = await crashLeft(s, 'w', text, 0)
      // A restart: a second instance on the root knows only the disk. It first sees the file so, and waits.
      const other = await store(s.root)
      expect(await codeOf(other.find('t', 'w'))).toBe('NotFound')
      await waitOut()
      const found = await other.find('t', 'w')
      expect(found.dir).toBe(dir)
      expect(await readFile(path.join(found.dir, 'kept.txt'), 'utf8')).toBe('kept')
      // Made when its file was last written, with the default TTL from then; written down so for every instance.
      expect(found.expiresAt - found.createdAt).toBe(TTL_SECONDS * 1000)
      expect(Math.abs(found.createdAt - Date.now())).toBeLessThan(5_000)
      expect(JSON.parse(await readFile(meta, 'utf8'))).toMatchObject({ tenant: 't', id: 'w', createdAt: found.createdAt, ttlSeconds: TTL_SECONDS, recovered: true })
      // The instance that made it takes the record for its own workspace: nothing of it ended.
      const held = await s.find('t', 'w')
      expect(held.dir).toBe(dir)
      expect(removals).toEqual([])
      // The holder's renewal writes its own record back: the other instance takes that identity, and ends nothing.
      const otherRemovals: string[] = []
      other.onRemoval(async (removed) => { otherRemovals.push(removed) })
      await writeFile(meta, record)
      const own = JSON.parse(record) as { createdAt: number, incarnation: string }
      expect(await other.find('t', 'w')).toMatchObject({ createdAt: own.createdAt, incarnation: own.incarnation })
      expect((await other.find('t', 'w')).recovered).toBeUndefined()
      expect(otherRemovals).toEqual([])
      await other.delete('t', 'w')
      expect(existsSync(meta)).toBe(false)
      expect(await codeOf(s.find('t', 'w'))).toBe('NotFound')
    })
  }

  it('is still the workspace its holder knows while its record cannot be read, and the holder keeps it', async () => {
    const s = await store(await tempDir('toolport-crash-'))
    const removals: string[] = []
    s.onRemoval(async (dir) => { removals.push(dir) })
    const { dir } = await crashLeft(s, 'held', '', 0)
    const hold = await s.acquire('t', 'held', { lasting: true })
    // Looked up while the file is within its wait: the instance that holds it answers as it knows it.
    expect((await s.find('t', 'held')).dir).toBe(dir)
    await s.sweep()
    expect((await s.find('t', 'held')).dir).toBe(dir)
    expect(removals).toEqual([])
    await hold.release()
  })

  it('stands only for the workspace it was written for: one deleted and made again since is another', async () => {
    const s = await store(await tempDir('toolport-crash-'))
    // Its file last written a minute ago (back-dated here): a workspace made again now comes well after that.
    const { meta } = await crashLeft(s, 'again', '', 0)
    const later = new Date(Date.now() - 60_000)
    await utimes(meta, later, later)
    const other = await store(s.root)
    await codeOf(other.find('t', 'again'))
    await waitOut()
    const recovered = await other.find('t', 'again')
    expect(recovered.recovered).toBe(true)
    const removals: string[] = []
    other.onRemoval(async (dir) => { removals.push(dir) })
    await s.delete('t', 'again')
    const remade = await s.create('t', { id: 'again' })
    const found = await other.find('t', 'again')
    expect(found).toMatchObject({ createdAt: remade.createdAt })
    expect(found.recovered).toBeUndefined()
    // What ran in the old one here ended, as for any workspace removed elsewhere.
    expect(removals).toEqual([recovered.dir])
  })

  it('expires when its file was written longer than a TTL ago: a sweep removes it and frees its place in the quota', async () => {
    const s = await store(await tempDir('toolport-crash-'), 1)
    const { dir, meta } = await crashLeft(s, 'old', '', (TTL_SECONDS + 60) * 1000)
    const other = await store(s.root, 1)
    expect(await codeOf(other.create('t', { id: 'next' }))).toBe('PermissionDenied')
    // The first sweep sees the file so; one after the wait writes it again, expired, and removes the workspace.
    expect(await other.sweep()).toBe(0)
    await waitOut()
    expect(await other.sweep()).toBe(1)
    expect(existsSync(meta)).toBe(false)
    expect(existsSync(dir)).toBe(false)
    expect(await codeOf(other.create('t', { id: 'next' }))).toBe('ok')
  })

  it('is left to its writer while it changes (a record being written in place, on a volume without hard links)', async () => {
    const s = await store(await tempDir('toolport-crash-'))
    const { meta } = await crashLeft(s, 'young', '', 0)
    const other = await store(s.root)
    expect(await codeOf(other.find('t', 'young'))).toBe('NotFound')
    // Still being written: it changed since it was first seen.
    await waitOut()
    await writeFile(meta, '{"tenant":')
    expect(await codeOf(other.find('t', 'young'))).toBe('NotFound')
    expect(await codeOf(other.create('t', { id: 'young' }))).toBe('Conflict')
    expect(await readFile(meta, 'utf8')).toBe('{"tenant":')
  })
})
