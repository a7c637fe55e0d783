/**
 * When the instance that runs a process does not answer: the process is
 * told `lost` at once, but lost for good (its record says so, and that
 * address is never asked again) only once the instance has not answered
 * through `lostAfterMs`, as this instance saw it; the record is written by no
 * one else meanwhile, and marking it lost never brings back a removed record
 * or overwrites one that names another run. Real records on a real root, a
 * real address where nothing listens.
 */
import http from 'node:http'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { buildTestApp } from '../helper.ts'
import { ToolError } from '../../src/errors.ts'
import type { ProcessInfo } from '../../src/processes/managed-process.ts'
import { PEER_KEY_FILE, PeerKey } from '../../src/processes/peer-key.ts'
import { INSTANCE_HEADER, Peers } from '../../src/processes/peers.ts'
import { type Asker, ProcessLocator } from '../../src/processes/process-locator.ts'
import { type ProcessRecord, ProcessRecords } from '../../src/processes/process-records.ts'
import { freePort } from '../support/server-process.ts'

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

async function setUp () {
  const app = await buildTestApp({ tools: { builtin: ['*'] } })
  const made = await app.inject({ method: 'POST', url: '/v1/tools/write_file/execute', payload: { arguments: { path: 'a', content: 'a' }, workspace: 'w' } })
  expect(made.statusCode).toBe(200)
  const records = new ProcessRecords(() => app.runtime.workspaces.root)
  const record: ProcessRecord = { id: 'p_00000000abcd', workspace: 'w', command: 'sleep 1000', started_at: new Date().toISOString(), ended_at: null, owner: `http://127.0.0.1:${await freePort()}`, instance: 'run-1' }
  await records.write('default', record)
  const asker: Asker = { tenant: 'default', workspace: 'w', dir: app.runtime.workspaces.get('default', 'w').dir }
  const peers = new Peers(new PeerKey(() => path.join(app.runtime.workspaces.root, PEER_KEY_FILE)))
  const locator = (lostAfterMs: number) => new ProcessLocator({ table: app.runtime.processes, records, peers, self: null, keepEnded: 10, longestCallMs: 1000, lostAfterMs })
  return { records, record, asker, locator, close: () => peers.close() }
}

/** Starts `true` where the workspace's processes run: the process started elsewhere, or 'here'. */
const startAtHome = (locator: ProcessLocator, asker: Asker): Promise<ProcessInfo | 'here'> =>
  locator.startAtHome<ProcessInfo | 'here'>(asker, { there: async (owner) => await locator.startThere(owner, { command: 'true' }, asker), here: async () => 'here' })

describe('a process whose instance does not answer', () => {
  it('is lost in each answer, and lost for good only once its instance has not answered through lostAfterMs', async () => {
    const { records, record, asker, locator, close } = await setUp()
    const patient = locator(60_000)
    for (let round = 0; round < 3; round++) {
      expect((await patient.list(asker)).map((each) => [each.id, each.state])).toEqual([[record.id, 'lost']])
      expect((await patient.locate(asker, record.id)).where).toBe('elsewhere')
    }
    expect(await records.read('default', 'w', record.id)).toEqual(record)
    expect((await records.running('default', 'w')).map((each) => each.id)).toEqual([record.id])

    const hasty = locator(200)
    let lostForGood = false
    for (let round = 0; round < 100 && !lostForGood; round++) {
      expect((await hasty.list(asker)).map((each) => each.state)).toEqual(['lost'])
      await sleep(50)
      lostForGood = (await records.read('default', 'w', record.id))?.owner === null
    }
    expect(lostForGood).toBe(true)
    expect((await hasty.locate(asker, record.id)).where).toBe('lost')
    expect(await records.running('default', 'w')).toEqual([])
    await close()
  })

  it('counts an unhealthy answer at the address as no answer, and a healthy one from something else as the process gone', async () => {
    const { records, record, asker, locator, close } = await setUp()
    let status = 503
    const squatter = http.createServer((_request, response) => { response.statusCode = status; response.end('{}') })
    await new Promise<void>((resolve) => squatter.listen(Number(new URL(record.owner as string).port), '127.0.0.1', resolve))
    try {
      const patient = locator(60_000)
      expect((await patient.list(asker)).map((each) => each.state)).toEqual(['lost'])
      await sleep(100)
      expect(await records.read('default', 'w', record.id)).toEqual(record)
      status = 200
      expect((await patient.list(asker)).map((each) => each.state)).toEqual(['lost'])
      for (let round = 0; round < 100 && (await records.read('default', 'w', record.id))?.owner !== null; round++) await sleep(20)
      expect(await records.read('default', 'w', record.id)).toEqual({ ...record, owner: null })
    } finally {
      await new Promise<void>((resolve) => squatter.close(() => resolve()))
      await close()
    }
  })

  it('marks lost only the record as it is now: never one removed meanwhile, nor one that names another run', async () => {
    const { records, record, locator, close } = await setUp()
    const certain = locator(0)
    await records.write('default', { ...record, instance: 'run-2' }, { update: true })
    certain.silences.markLost('default', record)
    await sleep(100)
    expect(await records.read('default', 'w', record.id)).toEqual({ ...record, instance: 'run-2' })
    await records.remove('default', 'w', record.id)
    certain.silences.markLost('default', record)
    await sleep(100)
    expect(await records.read('default', 'w', record.id)).toBeNull()
    expect(await records.list('default', 'w')).toEqual([])
    await close()
  })

  it('passes on a refusal of the instance where the workspace\'s processes run as the same problem, its Retry-After included', async () => {
    const { record, asker, locator, close } = await setUp()
    const home = http.createServer((request, response) => {
      if (request.url === '/healthz') {
        response.writeHead(200, { [INSTANCE_HEADER]: record.instance }).end('{"status":"ok"}')
        return
      }
      response.writeHead(503, { 'content-type': 'application/problem+json', 'retry-after': '7' })
      response.end(JSON.stringify({ type: 'about:blank', title: 'Overloaded', status: 503, detail: 'the service is shutting down', code: 'Overloaded', request_id: 'r' }))
    })
    await new Promise<void>((resolve) => home.listen(Number(new URL(record.owner ?? '').port), '127.0.0.1', resolve))
    try {
      const refused = await startAtHome(locator(60_000), asker).catch((error: unknown) => error)
      expect(refused).toBeInstanceOf(ToolError)
      expect(refused).toMatchObject({ code: 'Overloaded', message: 'the service is shutting down', retryAfterSeconds: 7 })
    } finally {
      home.closeAllConnections()
      await new Promise<void>((resolve) => home.close(() => resolve()))
      await close()
    }
  })

  it('asks an instance that runs several of the workspace\'s processes once, when it does not answer, before running here', async () => {
    const { records, record, asker, locator, close } = await setUp()
    await records.write('default', { ...record, id: 'p_00000000abce', started_at: new Date().toISOString() })
    let asked = 0
    const unhealthy = http.createServer((_request, response) => { asked++; response.writeHead(503).end('{}') })
    await new Promise<void>((resolve) => unhealthy.listen(Number(new URL(record.owner ?? '').port), '127.0.0.1', resolve))
    try {
      expect(await startAtHome(locator(60_000), asker)).toBe('here')
      expect(asked).toBe(1)
    } finally {
      unhealthy.closeAllConnections()
      await new Promise<void>((resolve) => unhealthy.close(() => resolve()))
      await close()
    }
  })
})
