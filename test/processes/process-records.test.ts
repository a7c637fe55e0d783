/**
 * Process records on the shared root: written whole, listed, and the
 * running ones found from their markers alone (an instance asks this before
 * every command call in a workspace, so it must not read every record kept).
 */
import { mkdir, readdir, rm } from 'node:fs/promises'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { type ProcessRecord, ProcessRecords } from '../../src/processes/process-records.ts'
import { WorkspaceLayout } from '../../src/workspaces/meta.ts'
import { tempDir } from '../support/temp.ts'

const record = (n: number, extra: Partial<ProcessRecord> = {}): ProcessRecord => ({
  id: `p_${n.toString(16).padStart(12, '0')}`,
  workspace: 'w',
  command: `echo ${n}`,
  started_at: new Date(1_700_000_000_000 + n).toISOString(),
  ended_at: null,
  owner: 'http://10.0.0.1:8080',
  instance: 'run-1',
  ...extra,
})

describe('process records', () => {
  it('finds the running processes from their markers, which follow each record\'s state', async () => {
    const root = await tempDir('toolport-records-')
    const records = new ProcessRecords(() => root)
    for (let n = 1; n <= 6; n++) await records.write('acme', record(n))
    for (let n = 1; n <= 4; n++) await records.write('acme', record(n, { ended_at: new Date().toISOString() }), { update: true })
    await records.write('acme', record(5, { owner: null }), { update: true })
    expect((await records.list('acme', 'w')).map((each) => each.id)).toHaveLength(6)
    expect((await records.running('acme', 'w')).map((each) => each.id)).toEqual([record(6).id])
    const markers = path.join(new WorkspaceLayout(root).processesDir('acme', 'w'), 'running')
    expect(await readdir(markers)).toEqual([record(6).id])
    await records.remove('acme', 'w', record(6).id)
    expect(await readdir(markers)).toEqual([])
    expect(await records.running('acme', 'w')).toEqual([])
    // Another tenant's records are apart, and an update never brings back a removed workspace's.
    expect(await records.running('other', 'w')).toEqual([])
    await records.write('other', record(7), { update: true }).catch(() => {})
    expect(await records.list('other', 'w')).toEqual([])
  })

  it('never brings a removed workspace\'s record into the workspace made again under its id', async () => {
    const root = await tempDir('toolport-records-')
    const records = new ProcessRecords(() => root)
    await records.write('acme', record(1))
    // The workspace is removed with its records, then made again, with a process of its own.
    await rm(new WorkspaceLayout(root).processesDir('acme', 'w'), { recursive: true, force: true })
    await records.write('acme', record(2))
    // The old process ends on its instance, which writes its end.
    await records.write('acme', record(1, { ended_at: new Date().toISOString() }), { update: true })
    expect((await records.list('acme', 'w')).map((each) => each.id)).toEqual([record(2).id])
  })
})

describe('the home lock', () => {
  it('lets one holder at a time look and start, across instances (two stores on one root), and takes over one left by a dead holder', async () => {
    const root = await tempDir('toolport-home-lock-')
    // A live holder touches the lock every fifth of the stale time: a stale time of 1 s leaves a stalled event loop
    // (a loaded machine) 800 ms, not 240, before a waiter would take a live lock.
    const [one, two] = [new ProcessRecords(() => root, { staleLockMs: 1000 }), new ProcessRecords(() => root, { staleLockMs: 1000 })]
    const order: string[] = []
    const release = await one.holdHome('acme', 'w')
    const waiting = two.holdHome('acme', 'w').then((releaseTwo) => { order.push('two holds'); return releaseTwo })
    await new Promise((resolve) => setTimeout(resolve, 150))
    order.push('one releases')
    await release()
    await (await waiting)()
    expect(order).toEqual(['one releases', 'two holds'])
    // Other workspaces and tenants have their own; none leaves a directory behind, nor makes the workspace's records'.
    await Promise.all([(await one.holdHome('acme', 'v'))(), (await two.holdHome('other', 'w'))()])
    const layout = new WorkspaceLayout(root)
    expect(await readdir(path.dirname(layout.homeLock('acme', 'w')))).toEqual([])
    await expect(readdir(layout.processesDir('acme', 'w'))).rejects.toThrow(/ENOENT/)

    // A holder that died holding it (nothing touches it): once it has not changed for the stale time, one waiter
    // of several takes it over, and they hold it one at a time. (A holder touches the lock every fifth of the stale
    // time: with 300 ms, a loaded machine's stalled loop let a second waiter take a live holder's lock.)
    const lock = layout.homeLock('acme', 'w')
    await mkdir(lock)
    let holding = 0
    let most = 0
    await Promise.all(Array.from({ length: 6 }, async (_, i) => {
      const release = await [one, two][i % 2]!.holdHome('acme', 'w')
      most = Math.max(most, ++holding)
      await new Promise((resolve) => setTimeout(resolve, 30))
      holding--
      await release()
    }))
    expect(most).toBe(1)
    expect(await readdir(path.dirname(lock))).toEqual([])

    // A holder that holds it longer than the stale time keeps it: it touches it.
    const long = await one.holdHome('acme', 'w')
    const next = two.holdHome('acme', 'w')
    const settled = await Promise.race([next.then(() => 'taken'), new Promise((resolve) => setTimeout(() => resolve('waiting'), 2500))])
    expect(settled).toBe('waiting')
    await long()
    await (await next)()

    // A waiter whose caller left stops waiting.
    const held = await one.holdHome('acme', 'w')
    const left = new AbortController()
    const waiter = two.holdHome('acme', 'w', left.signal)
    left.abort(new Error('left'))
    await expect(waiter).rejects.toThrow('left')
    await held()
  })
})
