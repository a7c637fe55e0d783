/**
 * Several instances sharing one workspace root (a ReadWriteMany volume in
 * Kubernetes): each is a WorkspaceStore of its own over the same directory,
 * as two pods would be.
 */
import { existsSync } from 'node:fs'
import { readdir, readFile, rm, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { pino } from 'pino'
import { describe, expect, it } from 'vitest'
import { directoryNameOf } from '../../src/workspaces/ids.ts'
import { CachedWorkspaces } from '../../src/workspaces/cached-workspaces.ts'
import { ClaimedElsewhere, materialise } from '../../src/workspaces/creation.ts'
import { WorkspaceLayout } from '../../src/workspaces/meta.ts'
import { WorkspaceStore } from '../../src/workspaces/store.ts'
import { writeContained } from '../../src/workspace-fs/write.ts'
import { workspaceQuota } from '../../src/workspaces/quotas.ts'
import { ToolError } from '../../src/errors.ts'
import { onCleanup, tempDir } from '../support/temp.ts'

async function instances (count: number, options: { ttlSeconds?: number, maxWorkspaces?: number, recheckMs?: number } = {}): Promise<WorkspaceStore[]> {
  const root = await tempDir('toolport-shared-')
  const stores: WorkspaceStore[] = []
  for (let i = 0; i < count; i++) {
    const store = new WorkspaceStore({
      root,
      ephemeralRoot: path.join(await tempDir('toolport-pod-'), 'ephemeral'),
      ttlSeconds: options.ttlSeconds ?? 3600,
      sweepIntervalSeconds: 3600,
      log: pino({ level: 'silent' }),
      recheckMs: options.recheckMs ?? 0,
      maxWorkspacesOf: () => options.maxWorkspaces ?? Infinity,
    })
    await store.init()
    onCleanup(async () => store.close())
    stores.push(store)
  }
  return stores
}

const codeOf = async (promise: Promise<unknown>): Promise<string> =>
  promise.then(() => 'ok', (error: unknown) => (error instanceof ToolError ? error.code : String(error)))

describe('instances sharing a workspace root', () => {
  it('find a workspace another instance made, and use the same directory', async () => {
    const [a, b] = await instances(2) as [WorkspaceStore, WorkspaceStore]
    const made = await a.create('acme', { id: 'shared' })
    await writeContained(made.dir, path.join(made.dir, 'note.txt'), 'note.txt', 'from a', { quota: workspaceQuota(made.dir, 1024) })
    const found = await b.find('acme', 'shared')
    expect(found.dir).toBe(made.dir)
    expect((await b.info('acme', 'shared')).files).toBe(1)
    const lease = await b.acquire('acme', 'shared')
    expect(lease.dir).toBe(made.dir)
    await lease.release()
    expect(await codeOf(b.find('beta', 'shared'))).toBe('NotFound')
  })

  it('refuse a second creation of one id, and make a first use from two instances at once one workspace', async () => {
    const [a, b] = await instances(2) as [WorkspaceStore, WorkspaceStore]
    await a.create('acme', { id: 'once' })
    expect(await codeOf(b.create('acme', { id: 'once' }))).toBe('Conflict')
    const leases = await Promise.all([a.acquire('acme', 'both'), b.acquire('acme', 'both'), a.acquire('acme', 'both'), b.acquire('acme', 'both')])
    expect(new Set(leases.map((l) => l.dir)).size).toBe(1)
    await Promise.all(leases.map((l) => l.release()))
  })

  it('notice a deletion made by another instance', async () => {
    const [a, b] = await instances(2) as [WorkspaceStore, WorkspaceStore]
    const made = await a.create('acme', { id: 'gone' })
    await b.find('acme', 'gone')
    await a.delete('acme', 'gone')
    expect(existsSync(made.dir)).toBe(false)
    expect(await codeOf(b.find('acme', 'gone'))).toBe('NotFound')
    expect(await codeOf(b.delete('acme', 'gone'))).toBe('NotFound')
  })

  it('take an id another instance removed and made again for the new workspace: its record, its TTL, never the old one\'s written back', async () => {
    const [a, b] = await instances(2) as [WorkspaceStore, WorkspaceStore]
    await a.create('t', { id: 'again' })
    await b.delete('t', 'again')
    const made = await b.create('t', { id: 'again', ttlSeconds: 7200 })
    const seen = await a.find('t', 'again')
    expect([seen.createdAt, seen.ttlSeconds]).toEqual([made.createdAt, 7200])
    const lease = await a.acquire('t', 'again')
    await lease.release()
    expect(await b.find('t', 'again')).toMatchObject({ createdAt: made.createdAt, ttlSeconds: 7200 })
  })

  it('tell apart a workspace another instance removed and made again in the same millisecond (the same createdAt)', async () => {
    const [a] = await instances(1) as [WorkspaceStore]
    const old = await a.create('t', { id: 'twin' })
    // What another instance's removal and creation within that millisecond leave: a new record, its own TTL.
    const file = path.join(a.root, 'tenants', 't', 'meta', `${directoryNameOf('twin')}.json`)
    const twin = { ...JSON.parse(await readFile(file, 'utf8')) as Record<string, unknown>, ttlSeconds: 7200, expiresAt: old.createdAt + 7_200_000, incarnation: 'another' }
    await writeFile(file, JSON.stringify(twin))
    expect(await a.find('t', 'twin')).toMatchObject({ createdAt: old.createdAt, ttlSeconds: 7200, incarnation: 'another' })
  })

  it('run a process in the workspace there is now, not in one another instance removed and made again within the recheck time', async () => {
    // A long recheck time: the first instance's record of the old workspace is fresh throughout.
    const [a, b] = await instances(2, { recheckMs: 60_000 }) as [WorkspaceStore, WorkspaceStore]
    await a.create('t', { id: 'again' })
    await (await a.acquire('t', 'again')).release()
    await b.delete('t', 'again')
    const remade = await b.create('t', { id: 'again' })
    const ended: string[] = []
    a.onRemoval(async (dir) => { ended.push(dir) })
    const hold = await a.acquire('t', 'again', { lasting: true })
    // What this instance kept of the old workspace (its ended processes, its usage) went as the new one replaced it.
    expect(ended).toEqual([hold.dir])
    // Held, the workspace is looked at again by every sweep: the old record's would take it for removed elsewhere.
    await a.sweep()
    expect(ended).toEqual([hold.dir])
    expect(await a.find('t', 'again')).toMatchObject({ createdAt: remade.createdAt, incarnation: (remade as { incarnation?: string }).incarnation })
    await hold.release()
  })

  it('end what runs in a workspace another instance deleted, even when a renewal written late brought its record back', async () => {
    const [a, b] = await instances(2) as [WorkspaceStore, WorkspaceStore]
    await a.create('t', { id: 'held' })
    const ended: string[] = []
    a.onRemoval(async (dir) => { ended.push(dir) })
    const hold = await a.acquire('t', 'held', { lasting: true })
    const file = path.join(a.root, 'tenants', 't', 'meta', `${directoryNameOf('held')}.json`)
    const record = await readFile(file, 'utf8')
    await b.delete('t', 'held')
    // The holder's renewal, under way as the other instance deleted, lands after the deletion.
    await writeFile(file, record)
    await a.sweep()
    expect(ended).toEqual([hold.dir])
    expect(await codeOf(b.find('t', 'held'))).toBe('NotFound')
    // Its release writes no renewal back.
    await hold.release()
    await new Promise((resolve) => setTimeout(resolve, 50))
    expect(existsSync(file)).toBe(false)
  })

  it('answer Conflict, not the quota, for an id another instance made while this one read the disk', async () => {
    const [a] = await instances(1, { maxWorkspaces: 1 }) as [WorkspaceStore]
    await a.create('t', { id: 'taken' })
    // What a second instance's creation finds once the first's record is on disk: the id is taken, and the quota full.
    const layout = new WorkspaceLayout(a.root)
    const entry = materialise(new CachedWorkspaces(), layout, { tenant: 't', id: 'taken', ttlSeconds: 3600, limit: 1 })
    await expect(entry.ready).rejects.toBeInstanceOf(ClaimedElsewhere)
  })

  it('take a record an instance of an older version renewed (without an incarnation) for the same workspace: what runs in it goes on', async () => {
    const [a] = await instances(1) as [WorkspaceStore]
    const made = await a.create('t', { id: 'shared' })
    const ended: string[] = []
    a.onRemoval(async (dir) => { ended.push(dir) })
    const hold = await a.acquire('t', 'shared', { lasting: true })
    const file = path.join(a.root, 'tenants', 't', 'meta', `${directoryNameOf('shared')}.json`)
    // The hold's own renewal (two sweep intervals ahead) is written first.
    const saved = async (): Promise<number> => (JSON.parse(await readFile(file, 'utf8')) as { expiresAt: number }).expiresAt
    for (let i = 0; i < 100 && await saved() < Date.now() + 3_600_000; i++) await new Promise((resolve) => setTimeout(resolve, 20))
    // The older version writes back the five fields it knows.
    const { incarnation: _dropped, ...renewed } = JSON.parse(await readFile(file, 'utf8')) as Record<string, unknown>
    await writeFile(file, JSON.stringify({ ...renewed, expiresAt: Date.now() + 7_200_000 }))
    await a.sweep()
    expect(ended).toEqual([])
    expect(await a.find('t', 'shared')).toMatchObject({ createdAt: made.createdAt })
    await hold.release()
  })

  it('make an id another instance removed, or that expired, instead of answering Conflict', async () => {
    const [a, b] = await instances(2) as [WorkspaceStore, WorkspaceStore]
    await a.create('t', { id: 'freed' })
    await b.delete('t', 'freed')
    expect(await codeOf(a.create('t', { id: 'freed' }))).toBe('ok')
    expect(await codeOf(a.create('t', { id: 'freed' }))).toBe('Conflict')
    await a.create('t', { id: 'brief', ttlSeconds: 1 })
    await new Promise((resolve) => setTimeout(resolve, 1100))
    expect(await codeOf(a.create('t', { id: 'brief' }))).toBe('ok')
  })

  it('count against the quota what the disk holds, not workspaces another instance removed', async () => {
    const [a, b] = await instances(2, { maxWorkspaces: 2 }) as [WorkspaceStore, WorkspaceStore]
    await a.create('t', { id: 'x' })
    await a.create('t', { id: 'y' })
    expect(await codeOf(a.create('t', { id: 'z' }))).toBe('PermissionDenied')
    await b.delete('t', 'x')
    await b.delete('t', 'y')
    expect(await codeOf(a.create('t', { id: 'z' }))).toBe('ok')
  })

  it('count every instance\'s workspaces against the tenant\'s quota', async () => {
    const [a, b] = await instances(2, { maxWorkspaces: 2 }) as [WorkspaceStore, WorkspaceStore]
    await a.create('acme', { id: 'one' })
    await b.create('acme', { id: 'two' })
    expect(await codeOf(a.create('acme', { id: 'three' }))).toBe('PermissionDenied')
    expect(await codeOf(b.acquire('acme', 'three'))).toBe('PermissionDenied')
  })

  it('sweep by what the disk says: a workspace renewed elsewhere stays, an expired one of any instance goes', async () => {
    const [a, b] = await instances(2, { ttlSeconds: 60 }) as [WorkspaceStore, WorkspaceStore]
    await a.create('acme', { id: 'busy' })
    const idle = await a.create('acme', { id: 'idle' })
    await b.find('acme', 'busy')
    const file = path.join(a.root, 'tenants', 'acme', 'meta', `${directoryNameOf('busy')}.json`)
    const saved = async (): Promise<number> => (JSON.parse(await readFile(file, 'utf8')) as { expiresAt: number }).expiresAt
    // Much later, `a` renews `busy` (a use); `b` only knows the old expiry.
    const later = Date.now() + 3_600_000
    const realNow = Date.now
    Date.now = () => later
    try {
      const lease = await a.acquire('acme', 'busy')
      await lease.release()
      // The renewal is written in the background: the sweep comes once it is on disk (tries counted, as Date.now stands still).
      for (let i = 0; i < 100 && await saved() <= later; i++) await new Promise((resolve) => setTimeout(resolve, 20))
      expect(await b.sweep(later + 1000)).toBe(1)
    } finally {
      Date.now = realNow
    }
    expect(existsSync(idle.dir)).toBe(false)
    expect((await a.find('acme', 'busy')).id).toBe('busy')
  })

  it('keep ephemeral workspaces apart: starting one instance leaves another\'s in-flight ones alone', async () => {
    const [a, b] = await instances(2) as [WorkspaceStore, WorkspaceStore]
    const lease = await a.ephemeral()
    await b.init()
    expect(existsSync(lease.dir)).toBe(true)
    expect(path.dirname(lease.dir)).not.toBe(b.ephemeralRoot)
    await lease.release()
    expect(await readdir(a.ephemeralRoot)).toEqual(['.owner'])
  })

  it('treat metadata whose directory is gone as no workspace, and make a fresh one on the next use', async () => {
    const [a, b] = await instances(2) as [WorkspaceStore, WorkspaceStore]
    const made = await a.create('acme', { id: 'half' })
    // Another instance's removal deleted the directory, and its metadata came back (a late renewal).
    await rm(made.dir, { recursive: true })
    expect(await codeOf(b.find('acme', 'half'))).toBe('NotFound')
    const lease = await b.acquire('acme', 'half')
    expect(existsSync(lease.dir)).toBe(true)
    await lease.release()
  })

  it('never bring a deleted workspace back through a renewal written late', async () => {
    const [a] = await instances(1, { ttlSeconds: 1 }) as [WorkspaceStore]
    await a.create('acme', { id: 'late' })
    const lease = await a.acquire('acme', 'late')
    // Past a tenth of the TTL: the release writes a renewal, and the delete comes right behind it.
    await new Promise((resolve) => setTimeout(resolve, 150))
    await lease.release()
    await a.delete('acme', 'late')
    await new Promise((resolve) => setTimeout(resolve, 100))
    expect(existsSync(path.join(a.root, 'tenants', 'acme', 'meta', 'late.json'))).toBe(false)
    expect(await codeOf(a.find('acme', 'late'))).toBe('NotFound')
  })

  it('never bring back through a renewal of its own a workspace another instance deleted', async () => {
    const [a, b] = await instances(2, { ttlSeconds: 1 }) as [WorkspaceStore, WorkspaceStore]
    await a.create('acme', { id: 'elsewhere' })
    const lease = await a.acquire('acme', 'elsewhere')
    // Past a tenth of the TTL: the release writes a renewal, after the other instance's delete.
    await new Promise((resolve) => setTimeout(resolve, 150))
    await b.delete('acme', 'elsewhere')
    await lease.release()
    await new Promise((resolve) => setTimeout(resolve, 100))
    expect(existsSync(path.join(a.root, 'tenants', 'acme', 'meta', 'elsewhere.json'))).toBe(false)
  })

  it('end what runs in a workspace another instance deleted when a lookup here finds it gone before a sweep does', async () => {
    const [a, b] = await instances(2) as [WorkspaceStore, WorkspaceStore]
    await a.create('t', { id: 'looked' })
    const ended: string[] = []
    b.onRemoval(async (dir) => { ended.push(dir) })
    const hold = await b.acquire('t', 'looked', { lasting: true })
    await a.delete('t', 'looked')
    expect(await codeOf(b.find('t', 'looked'))).toBe('NotFound')
    expect(ended).toEqual([hold.dir])
    await b.sweep()
    expect(ended).toEqual([hold.dir])
    await hold.release()
  })

  it('remove only the metadata a lookup found without its directory, never a workspace made again under the id since', async () => {
    const [a, b] = await instances(2) as [WorkspaceStore, WorkspaceStore]
    await a.create('t', { id: 'again' })
    const layout = new WorkspaceLayout(a.root)
    const old = await layout.read('t', 'again')
    await b.delete('t', 'again')
    const made = await b.create('t', { id: 'again' })
    await writeContained(made.dir, path.join(made.dir, 'kept.txt'), 'kept.txt', 'kept', { quota: workspaceQuota(made.dir, 1024) })
    // What an instance that read the old metadata, and found no directory, then removes.
    await layout.removeMetaOf(old as NonNullable<typeof old>)
    expect(await a.find('t', 'again')).toMatchObject({ createdAt: made.createdAt })
    expect(existsSync(path.join(made.dir, 'kept.txt'))).toBe(true)
    // Its own metadata it does remove.
    const current = await layout.read('t', 'again')
    await layout.removeMetaOf(current as NonNullable<typeof current>)
    expect(await layout.read('t', 'again')).toBe(null)
  })

  it('never write a renewal over the metadata of a workspace another instance deleted and made again', async () => {
    const [a, b] = await instances(2, { ttlSeconds: 1 }) as [WorkspaceStore, WorkspaceStore]
    await a.create('t', { id: 'renewed' })
    const lease = await a.acquire('t', 'renewed')
    // Past a tenth of the TTL: the release writes a renewal, after the other instance deleted and made the id again.
    await new Promise((resolve) => setTimeout(resolve, 150))
    await b.delete('t', 'renewed')
    const made = await b.create('t', { id: 'renewed', ttlSeconds: 600 })
    await lease.release()
    await new Promise((resolve) => setTimeout(resolve, 100))
    expect(await new WorkspaceLayout(a.root).read('t', 'renewed')).toMatchObject({ createdAt: made.createdAt, ttlSeconds: 600 })
  })

  it('show none of what it counted in a workspace another instance deleted and made again', async () => {
    const [a, b] = await instances(2) as [WorkspaceStore, WorkspaceStore]
    const made = await a.create('t', { id: 'counted' })
    await writeContained(made.dir, path.join(made.dir, 'old.txt'), 'old.txt', 'old bytes', { quota: workspaceQuota(made.dir, 1024) })
    expect(await a.info('t', 'counted')).toMatchObject({ files: 1, bytes: 9 })
    await b.delete('t', 'counted')
    await b.create('t', { id: 'counted' })
    expect(await a.info('t', 'counted')).toMatchObject({ files: 0, bytes: 0 })
  })

  it('leave alone, when removing metadata that outlived its directory, a record another instance is still writing', async () => {
    const [a] = await instances(1) as [WorkspaceStore]
    await a.create('t', { id: 'claimed' })
    const layout = new WorkspaceLayout(a.root)
    const old = await layout.read('t', 'claimed') as NonNullable<Awaited<ReturnType<WorkspaceLayout['read']>>>
    // The old record gone, and the name taken by a record not yet whole (as a non-atomic write would leave it).
    const file = path.join(a.root, 'tenants', 't', 'meta', `${directoryNameOf('claimed')}.json`)
    await writeFile(file, '')
    await layout.removeMetaOf(old)
    expect(existsSync(file)).toBe(true)
  })

  it('sweep away nothing by name when the expired workspace it knows was removed and made again elsewhere', async () => {
    const [a, b] = await instances(2, { ttlSeconds: 1 }) as [WorkspaceStore, WorkspaceStore]
    await a.create('t', { id: 'swept' })
    await (await a.acquire('t', 'swept')).release()
    await b.delete('t', 'swept')
    const made = await b.create('t', { id: 'swept', ttlSeconds: 600 })
    await writeContained(made.dir, path.join(made.dir, 'new.txt'), 'new.txt', 'new', { quota: workspaceQuota(made.dir, 1024) })
    // Past the old workspace's expiry, as a's sweep sees it.
    await a.sweep(Date.now() + 5000)
    expect(await b.find('t', 'swept')).toMatchObject({ createdAt: made.createdAt })
    expect(existsSync(path.join(made.dir, 'new.txt'))).toBe(true)
  })

  it('take nothing of a workspace made again under the id when a removal decided on the old one lands late', async () => {
    const [a, b] = await instances(2) as [WorkspaceStore, WorkspaceStore]
    await a.create('t', { id: 'late-removal' })
    const layout = new WorkspaceLayout(a.root)
    const old = await layout.read('t', 'late-removal') as NonNullable<Awaited<ReturnType<WorkspaceLayout['read']>>>
    // Another instance removes it and makes the id again, with a file, before this removal lands.
    await b.delete('t', 'late-removal')
    const made = await b.create('t', { id: 'late-removal' })
    await writeContained(made.dir, path.join(made.dir, 'new.txt'), 'new.txt', 'new', { quota: workspaceQuota(made.dir, 1024) })
    await layout.remove(old)
    expect(await a.find('t', 'late-removal')).toMatchObject({ createdAt: made.createdAt })
    expect(existsSync(path.join(made.dir, 'new.txt'))).toBe(true)
  })

  it('delete the workspace there is now, not the one it last read, when another instance removed the id and made it again', async () => {
    // A long recheck time: the first instance's record of the old workspace is fresh throughout.
    const [a, b] = await instances(2, { recheckMs: 60_000 }) as [WorkspaceStore, WorkspaceStore]
    await a.create('t', { id: 'redone' })
    await a.find('t', 'redone')
    await b.delete('t', 'redone')
    const made = await b.create('t', { id: 'redone' })
    await writeContained(made.dir, path.join(made.dir, 'new.txt'), 'new.txt', 'new', { quota: workspaceQuota(made.dir, 1024) })
    await a.delete('t', 'redone')
    expect(await codeOf(b.find('t', 'redone'))).toBe('NotFound')
    expect(await codeOf(a.find('t', 'redone'))).toBe('NotFound')
  })
})
