/**
 * The Idempotency-Key records on disk: claims, replays, takeover of a claim
 * whose instance died, expiry on access and by the sweep. Two stores on one
 * directory stand for two instances sharing a workspace root.
 */
import { execFileSync } from 'node:child_process'
import { chmod, mkdir, readdir, rm, stat, utimes, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { pino } from 'pino'
import { describe, expect, it } from 'vitest'
import { ABANDONED_AFTER_MS, type ClaimResult, IdempotencyStore, type Ticket } from '../../src/http/idempotency-store.ts'
import { onCleanup, tempDir } from '../helper.ts'

const log = pino({ level: 'silent' })
const ANSWER = { status: 200, headers: { 'content-type': 'application/json; charset=utf-8' }, body: '{"ok":true}' }

const ticketOf = (result: ClaimResult): Ticket => {
  if (result.kind !== 'claimed') throw new Error(`expected a claim, got ${result.kind}`)
  return result.ticket
}

/** Sets a file's mtime `ms` into the past, as if its instance stopped touching it that long ago. */
const ageBy = (file: string, ms: number) => utimes(file, new Date(Date.now() - ms), new Date(Date.now() - ms))

describe('IdempotencyStore', () => {
  it('claims once across two stores on one root, then replays, refuses another fingerprint, and keeps tenants apart', async () => {
    const root = await tempDir()
    const a = new IdempotencyStore({ root, ttlSeconds: 60, log })
    const b = new IdempotencyStore({ root, ttlSeconds: 60, log })
    const ticket = ticketOf(await a.claim('acme', 'key', 'f1'))
    expect(await b.claim('acme', 'key', 'f1')).toEqual({ kind: 'running' })
    expect(await b.claim('acme', 'key', 'f2')).toEqual({ kind: 'reused' })
    expect((await b.claim('beta', 'key', 'f1')).kind).toBe('claimed')
    await a.complete(ticket, ANSWER)
    expect(await b.claim('acme', 'key', 'f1')).toEqual({ kind: 'replay', answer: ANSWER })
    expect(await b.claim('acme', 'key', 'f2')).toEqual({ kind: 'reused' })
  })

  it('keeps the records (whole answers) from other users of the host, under a root and a records directory made open', async () => {
    const root = await tempDir()
    await chmod(root, 0o755)
    await mkdir(path.join(root, 'idempotency'), { mode: 0o755 })
    await chmod(path.join(root, 'idempotency'), 0o755)
    const store = new IdempotencyStore({ root, ttlSeconds: 60, log })
    const ticket = ticketOf(await store.claim('acme', 'key', 'f1'))
    await store.complete(ticket, ANSWER)
    const modeOf = async (at: string) => (await stat(at)).mode & 0o777
    expect(await modeOf(path.join(root, 'idempotency'))).toBe(0o700)
    const [tenantDir] = await readdir(path.join(root, 'idempotency'))
    expect(await modeOf(path.join(root, 'idempotency', tenantDir ?? ''))).toBe(0o700)
    const records = await readdir(path.join(root, 'idempotency', tenantDir ?? ''))
    expect(records.length).toBeGreaterThan(0)
    for (const name of records) expect(await modeOf(path.join(root, 'idempotency', tenantDir ?? '', name))).toBe(0o600)
  })

  it('tries to make its directory again after a claim found it could not (something in its way, removed since)', async () => {
    const root = await tempDir()
    await writeFile(path.join(root, 'idempotency'), 'in the way')
    const store = new IdempotencyStore({ root, ttlSeconds: 60, log })
    await expect(store.claim('acme', 'key', 'f1')).rejects.toThrow()
    await rm(path.join(root, 'idempotency'))
    expect((await store.claim('beta', 'key', 'f1')).kind).toBe('claimed')
  })

  it('counts the bytes each tenant\'s records hold: as it stores them, and on a sweep from the disk (another instance\'s, or before a restart)', async () => {
    const root = await tempDir()
    const a = new IdempotencyStore({ root, ttlSeconds: 60, log })
    const b = new IdempotencyStore({ root, ttlSeconds: 60, log })
    await a.complete(ticketOf(await a.claim('acme', 'one', 'f')), ANSWER)
    await a.complete(ticketOf(await a.claim('acme', 'two', 'f')), ANSWER)
    const onDisk = async (tenant: string) => {
      const dir = path.join(a.dir, tenant)
      let total = 0
      for (const name of await readdir(dir)) total += (await stat(path.join(dir, name))).size
      return total
    }
    expect(a.storedBytes('acme')).toBe(await onDisk('acme'))
    expect(a.storedBytes('beta')).toBe(0)
    expect(b.storedBytes('acme')).toBe(0)
    await b.sweep()
    expect(b.storedBytes('acme')).toBe(await onDisk('acme'))
  })

  it('loses no answer stored while a sweep walks the records, and counts what claims set aside until they end', async () => {
    const root = await tempDir()
    const store = new IdempotencyStore({ root, ttlSeconds: 60, log })
    for (let i = 0; i < 500; i++) await store.complete(ticketOf(await store.claim('acme', `old-${i}`, 'f')), ANSWER)
    const sweeping = store.sweep()
    for (let i = 0; i < 100; i++) await store.complete(ticketOf(await store.claim('acme', `new-${i}`, 'f')), ANSWER)
    await sweeping
    const dir = path.join(store.dir, 'acme')
    let onDisk = 0
    for (const name of await readdir(dir)) onDisk += (await stat(path.join(dir, name))).size
    expect(store.storedBytes('acme')).toBeGreaterThanOrEqual(onDisk)
    const before = store.storedBytes('acme')
    const running = ticketOf(await store.claim('acme', 'running', 'f'))
    store.reserve(running, 1000)
    expect(store.storedBytes('acme')).toBe(before + 1000)
    await store.release(running)
    expect(store.storedBytes('acme')).toBe(before)
  })

  it('lets exactly one of several requests take over a running claim whose heartbeat stopped', async () => {
    const root = await tempDir()
    const dead = new IdempotencyStore({ root, ttlSeconds: 60, log })
    const stale = ticketOf(await dead.claim('acme', 'key', 'f1'))
    await ageBy(stale.file, ABANDONED_AFTER_MS + 5000)
    const others = Array.from({ length: 4 }, () => new IdempotencyStore({ root, ttlSeconds: 60, log }))
    const results = await Promise.all(others.map((store) => store.claim('acme', 'key', 'f1')))
    expect(results.filter((result) => result.kind === 'claimed')).toHaveLength(1)
    expect(results.filter((result) => result.kind === 'running')).toHaveLength(3)
    // The dead instance's late release does not free the new claim.
    await dead.release(stale)
    expect(await others[0]?.claim('acme', 'key', 'f1')).toEqual({ kind: 'running' })
  })

  it('takes a half-written claim for a running one while it is recent, and replaces it once it is old', async () => {
    const root = await tempDir()
    const store = new IdempotencyStore({ root, ttlSeconds: 60, log })
    const ticket = ticketOf(await store.claim('acme', 'key', 'f1'))
    await writeFile(ticket.file, '{"state":"runn')
    expect(await store.claim('acme', 'key', 'f1')).toEqual({ kind: 'running' })
    await ageBy(ticket.file, ABANDONED_AFTER_MS + 5000)
    expect((await store.claim('acme', 'key', 'f1')).kind).toBe('claimed')
  })

  it('ignores an expired answer (the key runs again) and sweeps expired records and old markers away', async () => {
    const root = await tempDir()
    const store = new IdempotencyStore({ root, ttlSeconds: 1, log })
    await store.complete(ticketOf(await store.claim('acme', 'again', 'f1')), ANSWER)
    await store.complete(ticketOf(await store.claim('acme', 'gone', 'f1')), ANSWER)
    await new Promise((resolve) => setTimeout(resolve, 1100))
    // Expired: another request with the key is no reuse; it runs, and its answer replaces the old one.
    const again = ticketOf(await store.claim('acme', 'again', 'f2'))
    await store.complete(again, ANSWER)
    const dir = path.dirname(again.file)
    // Every file there untouched for longer than the abandonment bound and a marker's keep.
    for (const name of await readdir(dir)) await ageBy(path.join(dir, name), ABANDONED_AFTER_MS + 11 * 60_000)
    const running = ticketOf(await store.claim('acme', 'running', 'f1'))
    await store.sweep()
    // Left: the new answer of `again` (not expired yet, however old its file) and the running claim.
    expect((await readdir(dir)).sort()).toEqual([path.basename(again.file), path.basename(running.file)].sort())
  })

  it('on a full volume: leaves no empty claim, marker or temp file, and holds a claim whose answer it could not store until it can', async () => {
    const root = await tempDir()
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=64k', 'tmpfs', root])
    onCleanup(async () => { execFileSync('umount', ['-l', root]) })
    const store = new IdempotencyStore({ root, ttlSeconds: 60, log, heartbeatMs: 50 })
    store.start()
    onCleanup(async () => { store.stop() })
    const other = new IdempotencyStore({ root, ttlSeconds: 60, log })
    const ticket = ticketOf(await store.claim('acme', 'key', 'f1'))
    const dir = path.dirname(ticket.file)
    const filler = path.join(root, 'filler')
    const fill = async (): Promise<void> => { await writeFile(filler, Buffer.alloc(256 * 1024)).catch(() => {}) }
    await fill()
    // The answer cannot be written: the claim stays, a retry is told it still runs (never run twice)...
    await expect(store.complete(ticket, { ...ANSWER, body: 'x'.repeat(20_000) })).rejects.toMatchObject({ code: 'ENOSPC' })
    expect(await readdir(dir)).toEqual([path.basename(ticket.file)])
    expect(await other.claim('acme', 'key', 'f1')).toEqual({ kind: 'running' })
    // ...while its heartbeat goes on (the claim is not taken for abandoned)...
    const touched = (await stat(ticket.file)).mtimeMs
    await new Promise((resolve) => setTimeout(resolve, 300))
    expect((await stat(ticket.file)).mtimeMs).toBeGreaterThan(touched)
    // ...and once there is room, the answer is stored at a heartbeat and replayed.
    await rm(filler)
    const deadline = Date.now() + 5000
    let found = await other.claim('acme', 'key', 'f1')
    while (found.kind === 'running' && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 50))
      found = await other.claim('acme', 'key', 'f1')
    }
    expect(found).toMatchObject({ kind: 'replay', answer: { body: 'x'.repeat(20_000) } })
    // A claim that cannot be written is no claim: nothing is left that would answer "still running".
    await fill()
    await expect(store.claim('acme', 'fresh', 'f1')).rejects.toMatchObject({ code: 'ENOSPC' })
    expect(await readdir(dir)).toEqual([path.basename(ticket.file)])
    // Nor is a takeover that could not write: its marker goes, so a later request may take the key over.
    await rm(filler)
    const stale = ticketOf(await other.claim('acme', 'stale', 'f1'))
    await ageBy(stale.file, ABANDONED_AFTER_MS + 5000)
    await fill()
    await expect(store.claim('acme', 'stale', 'f1')).rejects.toMatchObject({ code: 'ENOSPC' })
    expect((await readdir(dir)).filter((name) => name.endsWith('.replace') || name.endsWith('.tmp'))).toEqual([])
    await rm(filler)
    expect((await store.claim('acme', 'stale', 'f1')).kind).toBe('claimed')
  })

  it('frees a released claim: the next request with the key runs', async () => {
    const root = await tempDir()
    const store = new IdempotencyStore({ root, ttlSeconds: 60, log })
    await store.release(ticketOf(await store.claim('acme', 'key', 'f1')))
    expect((await store.claim('acme', 'key', 'f2')).kind).toBe('claimed')
  })
})
