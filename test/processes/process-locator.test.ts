/**
 * When the instance that runs a process does not answer: the process is
 * told `lost` at once, but lost for good (its record says so, and that
 * address is never asked again) only once the instance has not answered for
 * `lostAfterMs`; an answer before that forgets the silence. Real records on a
 * real root, a real address where nothing listens.
 */
import { describe, expect, it } from 'vitest'
import { buildTestApp } from '../helper.ts'
import { Peers } from '../../src/processes/peers.ts'
import { type Asker, ProcessLocator } from '../../src/processes/process-locator.ts'
import { type ProcessRecord, ProcessRecords } from '../../src/processes/process-records.ts'
import { freePort } from '../support/server-process.ts'

async function until<T> (read: () => Promise<T>, done: (value: T) => boolean): Promise<T> {
  for (let round = 0; ; round++) {
    const value = await read()
    if (done(value) || round > 200) return value
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
}

describe('a process whose instance does not answer', () => {
  it('is lost at once for that answer, and for good only after lostAfterMs of silence', async () => {
    const app = await buildTestApp({ tools: { builtin: ['*'] } })
    const made = await app.inject({ method: 'POST', url: '/v1/tools/write_file/execute', payload: { arguments: { path: 'a', content: 'a' }, workspace: 'w' } })
    expect(made.statusCode).toBe(200)
    const dir = app.runtime.workspaces.get('default', 'w').dir
    const records = new ProcessRecords(() => app.runtime.workspaces.root)
    const record: ProcessRecord = { id: 'p_00000000abcd', workspace: 'w', command: 'sleep 1000', started_at: new Date().toISOString(), ended_at: null, owner: `http://127.0.0.1:${await freePort()}`, instance: 'run-1' }
    await records.write('default', record)
    const asker: Asker = { tenant: 'default', workspace: 'w', dir }
    const peers = new Peers()
    const locator = (lostAfterMs: number) => new ProcessLocator({ table: app.runtime.processes, records, peers, self: null, keepEnded: 10, longestCallMs: 1000, lostAfterMs })
    const patient = locator(60_000)

    // Not answering: lost in the answer, and the record notes since when, still naming its instance.
    expect((await patient.list(asker)).map((each) => [each.id, each.state])).toEqual([[record.id, 'lost']])
    const noted = await until(() => records.read('default', 'w', record.id), (read) => read?.unanswered_since !== undefined)
    expect(noted).toMatchObject({ owner: record.owner, instance: 'run-1' })
    expect((await patient.locate(asker, record.id)).where).toBe('elsewhere')
    expect((await patient.list(asker)).map((each) => each.state)).toEqual(['lost'])
    expect((await records.read('default', 'w', record.id))?.owner).toBe(record.owner)

    // An answer forgets the silence.
    patient.ownerAnswered('default', noted as ProcessRecord)
    expect(await until(() => records.read('default', 'w', record.id), (read) => read?.unanswered_since === undefined)).toEqual(record)

    // Silent for longer than lostAfterMs: lost for good.
    const hasty = locator(0)
    await hasty.list(asker)
    await until(() => records.read('default', 'w', record.id), (read) => read?.unanswered_since !== undefined)
    expect((await hasty.list(asker)).map((each) => each.state)).toEqual(['lost'])
    const gone = await until(() => records.read('default', 'w', record.id), (read) => read?.owner === null)
    expect(gone).toMatchObject({ id: record.id, owner: null })
    expect(gone?.unanswered_since).toBeUndefined()
    expect((await hasty.locate(asker, record.id)).where).toBe('lost')
    expect(await records.running('default', 'w')).toEqual([])
    await peers.close()
  })
})
