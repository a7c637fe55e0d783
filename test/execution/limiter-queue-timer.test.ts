/**
 * The limiter's queue shares one timer, due at its head's deadline: each
 * waiter must still get its own full wait, whatever happened to the
 * waiters before it.
 */
import { describe, expect, it } from 'vitest'
import { Limiter } from '../../src/execution/limiter.ts'
import { ToolError } from '../../src/errors.ts'

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

describe('Limiter queue deadlines', () => {
  it('times out each waiter on its own deadline, not on an earlier waiter\'s', async () => {
    const limiter = new Limiter({ name: 'service', maxConcurrent: 1, maxQueue: 5, queueTimeoutMs: 400 })
    const release = await limiter.acquire()
    const first = limiter.acquire().catch((e: unknown) => e)
    await sleep(250)
    const second = limiter.acquire().catch((e: unknown) => e)
    expect(((await first) as ToolError).code).toBe('Overloaded')
    // The first has timed out; the second, queued 250 ms later, is still waiting.
    expect(limiter.queued).toBe(1)
    expect(((await second) as ToolError).message).toMatch(/waited 400 ms/)
    expect(limiter.queued).toBe(0)
    release()
    expect(limiter.inFlight).toBe(0)
  })

  it('gives a waiter behind a cancelled head its full wait, and a slot when one frees', async () => {
    const limiter = new Limiter({ name: 'service', maxConcurrent: 1, maxQueue: 5, queueTimeoutMs: 1000 })
    const release = await limiter.acquire()
    const controller = new AbortController()
    const cancelled = limiter.acquire(controller.signal).catch((e: unknown) => e)
    await sleep(300)
    const waiting = limiter.acquire()
    controller.abort()
    expect(((await cancelled) as ToolError).code).toBe('ExecutionFailed')
    await sleep(850)
    // Past the cancelled head's deadline (1000 ms), within its own (1300 ms).
    expect(limiter.queued).toBe(1)
    release()
    const next = await waiting
    expect(limiter.inFlight).toBe(1)
    next()
    expect(limiter.inFlight).toBe(0)
  })
})
