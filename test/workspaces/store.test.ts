import { execFileSync } from 'node:child_process'
import { closeSync, constants, existsSync, openSync } from 'node:fs'
import { chmod, mkdir, readdir, readFile, realpath, rename, stat, symlink, unlink, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { pino } from 'pino'
import { describe, expect, it } from 'vitest'
import { validateWorkspaceId, directoryNameOf } from '../../src/workspaces/ids.ts'
import { WorkspaceScope } from '../../src/workspaces/scope.ts'
import { writeContained } from '../../src/workspace-fs/write.ts'
import { workspaceQuota } from '../../src/workspaces/quotas.ts'
import { WorkspaceStore } from '../../src/workspaces/store.ts'
import { ToolError } from '../../src/errors.ts'
import { tempDir } from '../support/temp.ts'

async function store (ttlSeconds = 3600): Promise<WorkspaceStore> {
  const s = new WorkspaceStore({ root: await tempDir(), ttlSeconds, sweepIntervalSeconds: 3600, log: pino({ level: 'silent' }) })
  await s.init()
  return s
}

const codeOfAsync = async (promise: Promise<unknown>): Promise<string> => promise.then(() => 'ok', (error: unknown) => (error as ToolError).code)

const codeOf = (fn: () => unknown): string => {
  try {
    fn()
    return 'ok'
  } catch (error) {
    return (error as ToolError).code
  }
}

describe('workspace ids', () => {
  it.each(['', '..', 'a..b', 'a/b', 'a\\b', 'a\u0000b', 'a\u0007b', 'a\nb', 'x'.repeat(257), 'é'.repeat(129), 'a\ud800', 'a\udc00b', '\udbff'])('refuses %j', (id) => {
    expect(codeOf(() => validateWorkspaceId(id))).toBe('InvalidArgs')
  })

  it('accepts 256 bytes and ordinary ids', () => {
    expect(codeOf(() => validateWorkspaceId('w'.repeat(256)))).toBe('ok')
    expect(codeOf(() => validateWorkspaceId('my workspace: ünïcode'))).toBe('ok')
    // A surrogate pair is one character: only a lone half is refused.
    expect(codeOf(() => validateWorkspaceId('emoji \ud83d\ude00'))).toBe('ok')
  })

  it('maps ids to safe, distinct directory names', () => {
    expect(directoryNameOf('plain-id_1.x')).toBe('plain-id_1.x')
    const hashed = directoryNameOf('w'.repeat(256))
    expect(hashed).toMatch(/^~[0-9a-f]{40}$/)
    expect(directoryNameOf('a b')).not.toBe(directoryNameOf('a_b'))
  })
})

describe('WorkspaceStore', () => {
  it('creates, describes, conflicts and deletes', async () => {
    const s = await store()
    const record = await s.create('t1', { id: 'one', ttlSeconds: 120 })
    expect(record.expiresAt - record.createdAt).toBe(120_000)
    // Through the contained write the file tools use: the usage follows its delta.
    await writeContained(record.dir, path.join(record.dir, 'a.txt'), 'a.txt', 'abc', { quota: workspaceQuota(record.dir, 1024) })
    expect(await s.info('t1', 'one')).toMatchObject({ id: 'one', files: 1, bytes: 3 })
    await expect(s.create('t1', { id: 'one' })).rejects.toMatchObject({ code: 'Conflict' })
    await s.delete('t1', 'one')
    expect(existsSync(record.dir)).toBe(false)
    expect(codeOf(() => s.get('t1', 'one'))).toBe('NotFound')
  })

  it('lets no other user of the host into the workspaces, even under a root made open (a command may leave a setuid program there)', async () => {
    const root = await tempDir()
    await chmod(root, 0o755)
    await mkdir(path.join(root, 'tenants'), { mode: 0o755 })
    await chmod(path.join(root, 'tenants'), 0o755)
    const s = new WorkspaceStore({ root, ttlSeconds: 3600, sweepIntervalSeconds: 3600, log: pino({ level: 'silent' }) })
    await s.init()
    const record = await s.create('acme', { id: 'w' })
    expect((await stat(path.join(root, 'tenants'))).mode & 0o777).toBe(0o700)
    expect(record.dir.startsWith(path.join(await realpath(root), 'tenants') + path.sep)).toBe(true)
    // An ephemeral workspace is private itself: its root may be an operator's too.
    const ephemeral = await s.ephemeral()
    expect((await stat(ephemeral.dir)).mode & 0o777).toBe(0o700)
    await ephemeral.release()
    s.close()
  })

  it('gives up on a workspace whose metadata can be neither read nor made again (an empty file a crash left), instead of trying for good', async () => {
    const root = await tempDir()
    const s = new WorkspaceStore({ root, ttlSeconds: 3600, sweepIntervalSeconds: 3600, log: pino({ level: 'silent' }), recheckMs: 0 })
    await s.init()
    await s.create('acme', { id: 'w' })
    const metaDir = path.join(await realpath(root), 'tenants', directoryNameOf('acme'), 'meta')
    for (const file of await readdir(metaDir)) await writeFile(path.join(metaDir, file), '')
    // An instance that knows it only from the disk (until the file is written again: crash-left-meta.test.ts).
    const other = new WorkspaceStore({ root, ttlSeconds: 3600, sweepIntervalSeconds: 3600, log: pino({ level: 'silent' }), recheckMs: 0 })
    await other.init()
    await expect(other.acquire('acme', 'w')).rejects.toMatchObject({ code: 'ExecutionFailed', message: expect.stringMatching(/neither found nor made/) })
    // The instance that made it goes on with it as it knows it.
    await (await s.acquire('acme', 'w')).release()
    other.close()
    s.close()
  })

  it('never takes a directory it cannot look at for one that is gone: the call fails, the workspace stays', async () => {
    const s = await store()
    const { dir } = await s.create('acme', { id: 'w' })
    await writeFile(path.join(dir, 'kept.txt'), 'kept')
    // What a volume that fails for a moment answers (EIO, ESTALE) stands here as a link loop (ELOOP).
    const away = `${dir}.away`
    await rename(dir, away)
    await symlink(path.basename(dir), dir)
    await expect(s.find('acme', 'w')).rejects.toMatchObject({ code: 'ELOOP' })
    await unlink(dir)
    await rename(away, dir)
    expect((await s.find('acme', 'w')).dir).toBe(dir)
    expect(await readFile(path.join(dir, 'kept.txt'), 'utf8')).toBe('kept')
    s.close()
  })

  it('keeps tenants apart', async () => {
    const s = await store()
    await s.create('acme', { id: 'shared-name' })
    expect(codeOf(() => s.get('beta', 'shared-name'))).toBe('NotFound')
    const beta = await s.create('beta', { id: 'shared-name' })
    expect(beta.dir).not.toBe(s.get('acme', 'shared-name').dir)
  })

  it('creates a workspace implicitly on first use and renews its expiry', async () => {
    const s = await store(60)
    const lease = await s.acquire('t', 'implicit')
    expect(existsSync(lease.dir)).toBe(true)
    await lease.release()
    expect(s.get('t', 'implicit').expiresAt).toBeGreaterThan(Date.now() + 59_000)
  })

  it('gives concurrent first uses of a new id one existing directory', async () => {
    const s = await store()
    const leases = await Promise.all(Array.from({ length: 8 }, () => s.acquire('t', 'fresh')))
    expect(new Set(leases.map((l) => l.dir)).size).toBe(1)
    for (const lease of leases) expect(existsSync(lease.dir)).toBe(true)
    await Promise.all(leases.map((l) => l.release()))
  })

  it('sweeps expired workspaces but never one in use', async () => {
    const s = await store(1)
    const idle = await s.create('t', { id: 'idle' })
    const lease = await s.acquire('t', 'busy')
    expect(await s.sweep(Date.now() + 5000)).toBe(1)
    expect(existsSync(idle.dir)).toBe(false)
    expect(existsSync(lease.dir)).toBe(true)
    await lease.release()
    // Held through a sweep, its expiry reached past two sweep intervals (3600 s here), whatever its TTL:
    // another instance's sweep must not find it expired while it is held.
    expect(await s.sweep(Date.now() + 5000)).toBe(0)
    expect(await s.sweep(Date.now() + 2 * 3600_000 + 5000)).toBe(1)
    expect(existsSync(lease.dir)).toBe(false)
  })

  it('keeps a workspace a process holds past every instance\'s next sweep, however short its TTL', async () => {
    const s = await store(1)
    const processHold = await s.acquire('t', 'held', { lasting: true })
    // Saved for the other instances: two sweep intervals ahead, not one second.
    const savedExpiry = async (): Promise<number> => (JSON.parse(await readFile(path.join(s.root, 'tenants', 't', 'meta', `${directoryNameOf('held')}.json`), 'utf8')) as { expiresAt: number }).expiresAt
    for (let i = 0; i < 50 && await savedExpiry() < Date.now() + 60_000; i++) await new Promise((resolve) => setTimeout(resolve, 20))
    expect(await savedExpiry()).toBeGreaterThan(Date.now() + 2 * 3600_000 - 60_000)
    await processHold.release()
  })

  it('remembers persistent workspaces across restarts', async () => {
    const root = await tempDir()
    const log = pino({ level: 'silent' })
    const first = new WorkspaceStore({ root, ttlSeconds: 3600, sweepIntervalSeconds: 3600, log })
    await first.init()
    await first.create('t', { id: 'kept' })
    first.close()
    const second = new WorkspaceStore({ root, ttlSeconds: 3600, sweepIntervalSeconds: 3600, log })
    await second.init()
    expect((await second.find('t', 'kept')).id).toBe('kept')
    // The first sweep after the restart adopts what it has not seen, and removes it once expired.
    expect(await second.sweep(Date.now() + 2 * 3600_000)).toBe(1)
    expect(existsSync(path.join(second.root, 'tenants', 't', 'ws', directoryNameOf('kept')))).toBe(false)
    second.close()
  })

  it('after a restart, answers Conflict for an id on disk and makes again one that expired, within the tenant\'s quota', async () => {
    const root = await tempDir()
    const log = pino({ level: 'silent' })
    const first = new WorkspaceStore({ root, ttlSeconds: 3600, sweepIntervalSeconds: 3600, log, maxWorkspacesOf: () => 2 })
    await first.init()
    await first.create('t', { id: 'short', ttlSeconds: 1 })
    await first.create('t', { id: 'kept' })
    first.close()
    await new Promise((resolve) => setTimeout(resolve, 1100))
    const second = new WorkspaceStore({ root, ttlSeconds: 3600, sweepIntervalSeconds: 3600, log, maxWorkspacesOf: () => 2 })
    await second.init()
    // On disk: Conflict (not the quota's PermissionDenied, which counts it).
    expect(await codeOfAsync(second.create('t', { id: 'kept' }))).toBe('Conflict')
    // Expired: made again (not Conflict), the expired one not counted.
    expect((await second.create('t', { id: 'short' })).ttlSeconds).toBe(3600)
    second.close()
  })

  it('does not count expired workspaces against the quota, before a sweep has come by', async () => {
    const s = new WorkspaceStore({ root: await tempDir(), ttlSeconds: 3600, sweepIntervalSeconds: 3600, log: pino({ level: 'silent' }), maxWorkspacesOf: () => 2 })
    await s.init()
    await s.create('t', { id: 'e1', ttlSeconds: 1 })
    await s.create('t', { id: 'e2', ttlSeconds: 1 })
    expect(await codeOfAsync(s.create('t', { id: 'early' }))).toBe('PermissionDenied')
    await new Promise((resolve) => setTimeout(resolve, 1100))
    expect(await codeOfAsync(s.create('t', { id: 'fresh' }))).toBe('ok')
    s.close()
  })

  it('answers Conflict to the creations of an id that come together but the first, also at the quota\'s last place', async () => {
    for (const limit of [1, 3, Infinity]) {
      const s = new WorkspaceStore({ root: await tempDir(), ttlSeconds: 3600, sweepIntervalSeconds: 3600, log: pino({ level: 'silent' }), maxWorkspacesOf: () => limit })
      await s.init()
      const codes = await Promise.all([0, 1, 2].map(async () => codeOfAsync(s.create('t', { id: 'x' }))))
      expect(codes.sort(), String(limit)).toEqual(['Conflict', 'Conflict', 'ok'])
      s.close()
    }
  })

  it('starts without reading the metadata of the workspaces on disk, and a sweep reads only those it has not seen', async () => {
    const root = await tempDir()
    const log = pino({ level: 'silent' })
    const first = new WorkspaceStore({ root, ttlSeconds: 3600, sweepIntervalSeconds: 3600, log })
    await first.init()
    for (const id of ['a', 'b']) await first.create('t', { id })
    first.close()
    // A record whose read would never end (a FIFO nobody writes): reading it would hang the start, or the sweep.
    const metaOf = (id: string) => path.join(first.root, 'tenants', 't', 'meta', `${directoryNameOf(id)}.json`)
    await rename(metaOf('b'), `${metaOf('b')}.saved`)
    execFileSync('mkfifo', [metaOf('b')])
    const hung = (task: Promise<unknown>) => Promise.race([task.then(() => 'done'), new Promise((resolve) => setTimeout(resolve, 2000, 'hung'))])
    const second = new WorkspaceStore({ root, ttlSeconds: 3600, sweepIntervalSeconds: 3600, log })
    try {
      expect(await hung(second.init())).toBe('done')
      expect((await second.find('t', 'a')).id).toBe('a')
      // b's record restored, found (so known), then made a FIFO again: the sweep does not read it.
      await unlink(metaOf('b'))
      await rename(`${metaOf('b')}.saved`, metaOf('b'))
      expect((await second.find('t', 'b')).id).toBe('b')
      await rename(metaOf('b'), `${metaOf('b')}.saved`)
      execFileSync('mkfifo', [metaOf('b')])
      // Made by another instance meanwhile: the sweep adopts it.
      const third = new WorkspaceStore({ root, ttlSeconds: 3600, sweepIntervalSeconds: 3600, log })
      await third.init()
      await third.create('t', { id: 'c' })
      third.close()
      expect(await hung(second.sweep())).toBe('done')
      expect(second.get('t', 'c').id).toBe('c')
    } finally {
      // Opened for reading and writing, a FIFO lets a read blocked in it go on.
      if (existsSync(metaOf('b'))) closeSync(openSync(metaOf('b'), constants.O_RDWR))
      second.close()
    }
  })

  it('removes an ephemeral workspace on release', async () => {
    const s = await store()
    const lease = await s.ephemeral()
    await writeFile(path.join(lease.dir, 'x'), 'x')
    await lease.release()
    expect(existsSync(lease.dir)).toBe(false)
    // Only the root's record of its owner (ephemeral.ts) stays.
    expect(await readdir(path.dirname(lease.dir))).toEqual(['.owner'])
  })
})

describe('WorkspaceScope', () => {
  it('shares one ephemeral workspace between calls and removes it on close', async () => {
    const s = await store()
    const scope = new WorkspaceScope(s, 't')
    const a = await scope.lease()
    const b = await scope.lease()
    expect(a.dir).toBe(b.dir)
    await a.release()
    expect(existsSync(a.dir)).toBe(true)
    await scope.close()
    expect(existsSync(a.dir)).toBe(false)
  })

  it('validates the id before anything touches the disk', async () => {
    const s = await store()
    expect(codeOf(() => new WorkspaceScope(s, 't', 'a/../b').validate())).toBe('InvalidArgs')
  })
})
