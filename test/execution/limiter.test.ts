import { describe, expect, it } from 'vitest'
import { Limiter } from '../../src/execution/limiter.ts'
import { ToolError } from '../../src/errors.ts'

describe('Limiter', () => {
  it('admits up to maxConcurrent, queues FIFO, and hands slots over in order', async () => {
    const limiter = new Limiter({ name: 'test', maxConcurrent: 2, maxQueue: 5, queueTimeoutMs: 5000 })
    const a = await limiter.acquire()
    const b = await limiter.acquire()
    const order: string[] = []
    const c = limiter.acquire().then((release) => { order.push('c'); return release })
    const d = limiter.acquire().then((release) => { order.push('d'); return release })
    expect(limiter.inFlight).toBe(2)
    expect(limiter.queued).toBe(2)
    a()
    b()
    ;(await c)()
    ;(await d)()
    expect(order).toEqual(['c', 'd'])
    expect(limiter.inFlight).toBe(0)
  })

  it('is fair between owners: a slot given back goes to the owner holding fewest, and a full queue refuses the owner crowding it', async () => {
    const limiter = new Limiter({ name: 'test', maxConcurrent: 2, maxQueue: 4, queueTimeoutMs: 5000 })
    const held = [await limiter.acquire(undefined, 'hog'), await limiter.acquire(undefined, 'hog')]
    const order: string[] = []
    const waiting = (owner: string, name: string): Promise<unknown> =>
      limiter.acquire(undefined, owner).then((release) => { order.push(name); return release }, (error: unknown) => { order.push(`${name} refused`); return error })
    // The hog fills the queue; another tenant still gets in, in place of the hog's newest.
    const hogs = [waiting('hog', 'h1'), waiting('hog', 'h2'), waiting('hog', 'h3'), waiting('hog', 'h4')]
    const other = waiting('other', 'o1')
    await hogs[3]
    expect(order).toEqual(['h4 refused'])
    // A fifth hog finds the queue full of its own and another's one: refused itself.
    expect(await limiter.acquire(undefined, 'hog').catch((error: unknown) => (error as ToolError).code)).toBe('Overloaded')
    // The first slot given back goes to the tenant holding none, ahead of the hogs that came first.
    held[0]?.()
    expect(await other).toBeInstanceOf(Function)
    expect(order).toEqual(['h4 refused', 'o1'])
    held[1]?.()
    await hogs[0]
    expect(order).toEqual(['h4 refused', 'o1', 'h1'])
  })

  it('rejects with Overloaded and Retry-After when the queue is full', async () => {
    const limiter = new Limiter({ name: 'service', maxConcurrent: 1, maxQueue: 0, queueTimeoutMs: 3000 })
    const release = await limiter.acquire()
    const error = await limiter.acquire().catch((e: unknown) => e) as ToolError
    expect(error).toBeInstanceOf(ToolError)
    expect(error.code).toBe('Overloaded')
    expect(error.retryAfterSeconds).toBe(3)
    release()
  })

  it('rejects a waiter whose queue wait times out', async () => {
    const limiter = new Limiter({ name: 'service', maxConcurrent: 1, maxQueue: 1, queueTimeoutMs: 50 })
    const release = await limiter.acquire()
    const error = await limiter.acquire().catch((e: unknown) => e) as ToolError
    expect(error.code).toBe('Overloaded')
    expect(error.message).toMatch(/waited 50 ms/)
    expect(limiter.queued).toBe(0)
    release()
  })

  it('uses the configured rejection code (spawn: ExecutionFailed naming the limit)', async () => {
    const limiter = new Limiter({ name: 'spawn', maxConcurrent: 1, maxQueue: 0, queueTimeoutMs: 1, rejectCode: 'ExecutionFailed' })
    const release = await limiter.acquire()
    const error = await limiter.acquire().catch((e: unknown) => e) as ToolError
    expect(error.code).toBe('ExecutionFailed')
    expect(error.message).toMatch(/spawn concurrency limit of 1/)
    expect(error.retryAfterSeconds).toBeUndefined()
    release()
  })

  it('removes an aborted waiter from the queue', async () => {
    const limiter = new Limiter({ name: 'service', maxConcurrent: 1, maxQueue: 5, queueTimeoutMs: 5000 })
    const release = await limiter.acquire()
    const controller = new AbortController()
    const waiting = limiter.acquire(controller.signal).catch((e: unknown) => e)
    expect(limiter.queued).toBe(1)
    controller.abort()
    expect(await waiting).toBeInstanceOf(ToolError)
    expect(limiter.queued).toBe(0)
    release()
    expect(limiter.inFlight).toBe(0)
  })

  it('refuses a request cancelled before it asks, at once, whether a slot is free or it would queue', async () => {
    const limiter = new Limiter({ name: 'service', maxConcurrent: 1, maxQueue: 5, queueTimeoutMs: 60_000 })
    const cancelled = AbortSignal.abort(new ToolError('Unauthorized', 'the token was revoked'))
    expect(((await limiter.acquire(cancelled).catch((e: unknown) => e)) as ToolError).code).toBe('Unauthorized')
    expect(limiter.inFlight).toBe(0)
    const release = await limiter.acquire()
    expect(((await limiter.acquire(AbortSignal.abort()).catch((e: unknown) => e)) as ToolError).code).toBe('ExecutionFailed')
    expect(limiter.queued).toBe(0)
    release()
  })

  it('refuses everything once closed, holders finishing normally', async () => {
    const limiter = new Limiter({ name: 'service', maxConcurrent: 1, maxQueue: 5, queueTimeoutMs: 5000 })
    const release = await limiter.acquire()
    const queued = limiter.acquire().catch((e: unknown) => e)
    limiter.close()
    expect(((await queued) as ToolError).code).toBe('Overloaded')
    expect(((await limiter.acquire().catch((e: unknown) => e)) as ToolError).code).toBe('Overloaded')
    release()
    expect(limiter.inFlight).toBe(0)
  })
})
