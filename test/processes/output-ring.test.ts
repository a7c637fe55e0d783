/** The output ring on its own: cursor arithmetic, paging, UTF-8 and overflow. */
import { describe, expect, it } from 'vitest'
import { OutputRing } from '../../src/processes/output-ring.ts'

const text = (ring: OutputRing, after: number, max: number) => {
  const read = ring.read(after, max)
  return { text: read.chunks.map((c) => c.data).join(''), ...read }
}

describe('OutputRing', () => {
  it('keeps both streams in arrival order, one cursor over their bytes', () => {
    const ring = new OutputRing(1024)
    ring.append('stdout', Buffer.from('abc'))
    ring.append('stderr', Buffer.from('defgh'))
    ring.append('stdout', Buffer.from('ij'))
    expect(ring.read(0, 100).chunks).toEqual([
      { stream: 'stdout', offset: 0, data: 'abc' },
      { stream: 'stderr', offset: 3, data: 'defgh' },
      { stream: 'stdout', offset: 8, data: 'ij' },
    ])
    expect(ring.read(5, 100)).toEqual({ chunks: [{ stream: 'stderr', offset: 5, data: 'fgh' }, { stream: 'stdout', offset: 8, data: 'ij' }], next: 10, dropped: 0 })
    expect(ring.read(10, 100)).toEqual({ chunks: [], next: 10, dropped: 0 })
  })

  it('pages that reassemble the exact output, never splitting a character', () => {
    const ring = new OutputRing(1 << 20)
    const expected = Array.from({ length: 500 }, (_, i) => `${i}€é😀\n`).join('')
    const bytes = Buffer.from(expected)
    // Written in 7-byte pieces: characters are cut between writes.
    for (let i = 0; i < bytes.length; i += 7) ring.append(i % 2 === 0 ? 'stdout' : 'stdout', bytes.subarray(i, i + 7))
    let cursor = 0
    let got = ''
    while (cursor < bytes.length) {
      const page = text(ring, cursor, 5)
      expect(page.text).not.toContain('\uFFFD')
      expect(page.next).toBeGreaterThan(cursor)
      got += page.text
      cursor = page.next
    }
    expect(got).toBe(expected)
  })

  it('holds back half a character until the rest comes, and reads at least one whole one', () => {
    const ring = new OutputRing(1024)
    ring.append('stdout', Buffer.from([0xe2, 0x82]))
    expect(ring.read(0, 100)).toEqual({ chunks: [], next: 0, dropped: 0 })
    ring.append('stderr', Buffer.from('x'))
    ring.append('stdout', Buffer.from([0xac]))
    expect(text(ring, 0, 100).text).toBe('x€')
    expect(text(ring, 1, 1)).toMatchObject({ text: '€', next: 4 })
  })

  it('turns invalid bytes into U+FFFD and counts them as bytes', () => {
    const ring = new OutputRing(1024)
    ring.append('stdout', Buffer.from([0x6f, 0x6b, 0xff, 0x0a]))
    expect(text(ring, 0, 100)).toMatchObject({ text: 'ok\uFFFD\n', next: 4 })
  })

  it('keeps output that starts with bytes that are not UTF-8 (a lone continuation byte is one U+FFFD, not half a character)', () => {
    const ring = new OutputRing(1024)
    ring.append('stdout', Buffer.from([0x80, 0x81, 0x61, 0x62, 0x63, 0x0a]))
    ring.append('stdout', Buffer.from([0xbf, 0x78, 0x0a]))
    expect(text(ring, 0, 100)).toMatchObject({ text: '\uFFFD\uFFFDabc\n\uFFFDx\n', next: 9, dropped: 0 })
    const all = new OutputRing(65_536)
    all.append('stdout', Buffer.alloc(60_000, 0x80))
    expect(text(all, 0, 1 << 20)).toMatchObject({ next: 60_000, dropped: 0 })
  })

  it('bounds the UTF-8 of what it returns by maxBytes, bytes that are not UTF-8 (three bytes each as U+FFFD) included', () => {
    const ring = new OutputRing(65_536)
    ring.append('stdout', Buffer.alloc(60_000, 0xff))
    const page = text(ring, 0, 10)
    expect(Buffer.byteLength(page.text)).toBeLessThanOrEqual(10)
    expect(page.text).toBe('\uFFFD'.repeat(3))
    expect(page.next).toBe(3)
    let cursor = 0
    let pages = 0
    while (cursor < 60_000) {
      const next = text(ring, cursor, 4096)
      expect(Buffer.byteLength(next.text)).toBeLessThanOrEqual(4096)
      expect(next.next).toBeGreaterThan(cursor)
      cursor = next.next
      pages++
    }
    expect(pages).toBeLessThan(60)
    // A run of continuation bytes longer than a character's is read in pieces too, never as one "character".
    const continuations = new OutputRing(65_536)
    continuations.append('stdout', Buffer.alloc(60_000, 0x80))
    expect(Buffer.byteLength(text(continuations, 0, 12).text)).toBeLessThanOrEqual(12)
    // One character larger decoded than maxBytes still comes whole.
    expect(text(ring, 0, 1)).toMatchObject({ text: '\uFFFD', next: 1 })
    // Each lone continuation byte is a character of its own: one is due, one comes.
    expect(text(continuations, 0, 3)).toMatchObject({ text: '\uFFFD', next: 1 })
    const mixed = new OutputRing(1024)
    mixed.append('stdout', Buffer.from([0xc3, 0x80, 0x80, 0x80, 0x80]))
    expect(text(mixed, 0, 2)).toMatchObject({ text: 'À', next: 2 })
    // A sequence that is not well-formed (an encoded surrogate, a code point past U+10FFFF) is a U+FFFD per byte, read so.
    const malformed = new OutputRing(1024)
    malformed.append('stdout', Buffer.from([0xed, 0xa0, 0x80, 0xf4, 0x90, 0x80, 0x80, 0x58]))
    expect(text(malformed, 0, 3)).toMatchObject({ text: '\uFFFD', next: 1 })
    expect(text(malformed, 3, 8)).toMatchObject({ text: '\uFFFD\uFFFD', next: 5 })
  })

  it('starts after a character cut by letting older bytes go, also when one write is larger than the ring', () => {
    const ring = new OutputRing(16)
    ring.append('stdout', Buffer.from(`${'é'.repeat(20)}a`))
    expect(text(ring, 0, 100)).toMatchObject({ text: `${'é'.repeat(7)}a`, dropped: 26 })
    ring.append('stdout', Buffer.from('€€'))
    expect(text(ring, 0, 100).text).not.toContain('\uFFFD')
  })

  it('keeps only the last capacity bytes and says how many were dropped; memory stays at the capacity', () => {
    const ring = new OutputRing(4096)
    let all = ''
    for (let i = 0; i < 2000; i++) {
      const line = `line ${i}\n`
      all += line
      ring.append('stdout', Buffer.from(line))
    }
    ring.append('stderr', Buffer.alloc(10_000, 'z'))
    all += 'z'.repeat(10_000)
    const read = text(ring, 0, 1 << 20)
    expect(read.dropped).toBe(all.length - 4096)
    expect(read.text).toBe(all.slice(-4096))
    expect(text(ring, all.length - 10, 100)).toMatchObject({ text: 'z'.repeat(10), dropped: 0 })
  })
})
