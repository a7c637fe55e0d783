/**
 * Something loaded by its first use: loaded once for every use that comes
 * while and after it loads, and tried again after a load that failed (a
 * module that could not be read for want of a descriptor), never failing
 * every later use.
 */
import { describe, expect, it } from 'vitest'
import { loadOnce } from '../src/load-once.ts'

describe('loadOnce', () => {
  it('loads once for the uses that come together and after', async () => {
    let loads = 0
    const value = loadOnce(async () => ++loads)
    expect(value.begun).toBeUndefined()
    expect(await Promise.all([value(), value(), value()])).toEqual([1, 1, 1])
    expect(await value()).toBe(1)
    expect(await value.begun).toBe(1)
    expect(loads).toBe(1)
  })

  it('forgets a load that failed: the next use tries again, and nothing is left rejected', async () => {
    const outcomes = [new Error('EMFILE: too many open files'), 'loaded']
    const value = loadOnce(async () => {
      const next = outcomes.shift()
      if (next instanceof Error) throw next
      return next
    })
    const failing = value()
    // What must close it sees no value, rather than the failure.
    expect(await value.begun).toBeUndefined()
    await expect(failing).rejects.toThrow(/EMFILE/)
    expect(value.begun).toBeUndefined()
    expect(await value()).toBe('loaded')
    expect(await value()).toBe('loaded')
  })
})
