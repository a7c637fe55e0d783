/**
 * Process records on the shared root: written whole, listed, and the
 * running ones found from their markers alone (an instance asks this before
 * every command call in a workspace, so it must not read every record kept).
 */
import { readdir, rm } from 'node:fs/promises'
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
