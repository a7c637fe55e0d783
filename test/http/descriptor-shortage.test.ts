/**
 * Out of file descriptors (EMFILE), the service answers 503 with
 * Retry-After, never a wrong answer: a workspace whose record could not be
 * read for want of one is not "no workspace" (404, which would let a client
 * take its id again). Running out of descriptors cannot be arranged safely
 * inside the test runner, so the read of that one record fails as it would.
 */
import { describe, expect, it, vi } from 'vitest'
import { asToolError } from '../../src/errors.ts'
import { buildTestApp, tempDir } from '../helper.ts'
import { expectProblem } from '../support/problem.ts'

const starved = vi.hoisted(() => ({ on: false, suffix: '/meta/starved.json' }))
vi.mock('node:fs/promises', async (importOriginal) => {
  const original = await importOriginal<typeof import('node:fs/promises')>()
  const readFile = (async (file: unknown, ...rest: unknown[]) => {
    if (starved.on && String(file).endsWith(starved.suffix)) throw Object.assign(new Error('EMFILE: too many open files'), { code: 'EMFILE' })
    return (original.readFile as (...args: unknown[]) => Promise<unknown>)(file, ...rest)
  }) as typeof original.readFile
  return { ...original, default: { ...original, readFile }, readFile }
})

describe('no file descriptor free', () => {
  it('answers 503 with Retry-After for a workspace whose record cannot be read just now, not 404; then 200', async () => {
    const root = await tempDir('toolport-ws-')
    const maker = await buildTestApp({ workspaces: { root } })
    expect((await maker.inject({ method: 'POST', url: '/v1/workspaces', payload: { id: 'starved' } })).statusCode).toBe(201)
    // Another instance on the volume: it has not seen the workspace, so it reads its record.
    const other = await buildTestApp({ workspaces: { root } })
    starved.on = true
    const answer = await other.inject({ method: 'GET', url: '/v1/workspaces/starved' })
    expectProblem({ status: answer.statusCode, body: answer.json(), headers: answer.headers }, 503, 'Overloaded')
    expect(answer.headers['retry-after']).toBe('1')
    starved.on = false
    expect((await other.inject({ method: 'GET', url: '/v1/workspaces/starved' })).statusCode).toBe(200)
  })

  it('answers 503 for a process whose record cannot be read just now, not "no process"', async () => {
    const root = await tempDir('toolport-ws-')
    const owner = await buildTestApp({ workspaces: { root }, tools: { builtin: ['*'] } })
    expect((await owner.inject({ method: 'POST', url: '/v1/workspaces', payload: { id: 'busy' } })).statusCode).toBe(201)
    const started = await owner.inject({ method: 'POST', url: '/v1/workspaces/busy/processes', payload: { command: 'sleep 30' } })
    expect(started.statusCode).toBe(201)
    const id = String(started.json()['id'])
    const other = await buildTestApp({ workspaces: { root }, tools: { builtin: ['*'] } })
    Object.assign(starved, { on: true, suffix: `/processes/busy/${id}.json` })
    try {
      const answer = await other.inject({ method: 'GET', url: `/v1/workspaces/busy/processes/${id}` })
      expectProblem({ status: answer.statusCode, body: answer.json(), headers: answer.headers }, 503, 'Overloaded')
    } finally {
      Object.assign(starved, { on: false, suffix: '/meta/starved.json' })
    }
  })

  it('maps EMFILE and ENFILE to Overloaded with Retry-After, other errors to ExecutionFailed', () => {
    for (const code of ['EMFILE', 'ENFILE']) expect(asToolError(Object.assign(new Error(code), { code }))).toMatchObject({ code: 'Overloaded', retryAfterSeconds: 1 })
    expect(asToolError(Object.assign(new Error('EIO'), { code: 'EIO' }))).toMatchObject({ code: 'ExecutionFailed' })
  })
})
