import { describe, expect, it } from 'vitest'
import { truncateResult } from '../../src/execution/truncate.ts'

const size = (value: unknown): number => Buffer.byteLength(JSON.stringify(value))

describe('truncateResult', () => {
  it('leaves a result within the limit untouched', () => {
    const value = { content: 'small' }
    expect(truncateResult(value, 1000)).toEqual({ value, truncated: false })
  })

  it('cuts a string, keeps its start and appends a suffix naming the truncation', () => {
    const text = 'x'.repeat(200_000)
    const { value, truncated } = truncateResult(text, 65_536)
    expect(truncated).toBe(true)
    expect(typeof value).toBe('string')
    const kept = (value as string).match(/^x*/)![0].length
    expect(kept).toBeGreaterThan(60_000)
    expect((value as string).slice(kept)).toMatch(/truncated: 200000 total bytes/)
    expect(size(value)).toBeLessThanOrEqual(65_536)
  })

  it('keeps leading array elements in order and ends with a sentinel', () => {
    const items = Array.from({ length: 3000 }, (_, i) => ({ i, pad: 'p'.repeat(40) }))
    const { value, truncated } = truncateResult(items, 65_536)
    const array = value as Array<Record<string, unknown>>
    expect(truncated).toBe(true)
    expect(array.length).toBeGreaterThan(10)
    array.slice(0, -1).forEach((element, i) => expect(element['i']).toBe(i))
    const sentinel = array.at(-1)!
    expect(sentinel).toMatchObject({ _truncated: true, total_elements: 3000 })
    expect(sentinel['message']).toMatch(new RegExp(`showing ${array.length - 1} of 3000`))
    expect(size(value)).toBeLessThanOrEqual(65_536)
  })

  it('wraps an object in a _truncated_json envelope holding the start of its JSON', () => {
    const { value, truncated } = truncateResult({ content: 'abcdefghij'.repeat(20_000) }, 65_536)
    expect(truncated).toBe(true)
    const envelope = value as Record<string, unknown>
    expect(typeof envelope['_truncated_json']).toBe('string')
    expect((envelope['_truncated_json'] as string).startsWith('{"content":"abcdefghij')).toBe(true)
    expect(envelope['_original_bytes']).toBe(200_014)
    expect(size(value)).toBeLessThanOrEqual(65_536)
  })

  it('names no size for a result the tool gave only the start of: it is not the whole\'s', () => {
    const object = truncateResult({ content: 'abcdefghij'.repeat(200) }, 300, { partial: true }).value as Record<string, unknown>
    expect(Object.keys(object)).toEqual(['_truncated_json'])
    const text = truncateResult('abcdefghij'.repeat(200), 300, { partial: true }).value as string
    expect(text).toMatch(/\n\.\.\. \(output truncated, showing first \d+ bytes\)$/)
    expect(text).not.toMatch(/total/)
    expect(size(text)).toBeLessThanOrEqual(300)
  })

  it('accounts for JSON escaping when the content is full of quotes', () => {
    const { value } = truncateResult({ content: '"\\'.repeat(10_000) }, 1000)
    expect(size(value)).toBeLessThanOrEqual(1000)
  })

  it('never splits a surrogate pair or exceeds the byte budget with multi-byte text', () => {
    const { value } = truncateResult('é✓😀'.repeat(2000), 1000)
    expect(size(value)).toBeLessThanOrEqual(1000)
    expect(value as string).not.toMatch(/[\uD800-\uDBFF](?![\uDC00-\uDFFF])/)
  })

  it('never lets the longest numbers slip past the limit', () => {
    const longest = -1.2345678901234567e-6
    expect(JSON.stringify(longest)).toHaveLength(25)
    const { value, truncated } = truncateResult(Array.from({ length: 39 }, () => longest), 1000)
    expect(truncated).toBe(true)
    expect(Buffer.byteLength(JSON.stringify(value))).toBeLessThanOrEqual(1000)
  })
})
