/** The instances' key for forwarded requests (src/processes/peer-key.ts), on a real directory as instances share it. */
import { execFileSync } from 'node:child_process'
import { mkdir, readdir, readFile, stat, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { PEER_KEY_FILE, PeerKey } from '../../src/processes/peer-key.ts'
import { tempDir } from '../support/temp.ts'

describe('the instances\' key', () => {
  it('admits nothing before any instance has made it', async () => {
    const dir = await tempDir('toolport-peer-key-')
    const key = new PeerKey(() => path.join(dir, PEER_KEY_FILE))
    expect(await key.admits('')).toBe(false)
    expect(await key.admits('1')).toBe(false)
    expect(await readdir(dir)).toEqual([])
  })

  it('is one key for instances that make it at the same moment, private, and admits only itself', async () => {
    const dir = await tempDir('toolport-peer-key-')
    const file = path.join(dir, PEER_KEY_FILE)
    const instances = Array.from({ length: 8 }, () => new PeerKey(() => file))
    const values = await Promise.all(instances.map((each) => each.value()))
    expect(new Set(values).size).toBe(1)
    const [value] = values as [string]
    expect(value).toMatch(/^[0-9a-f]{64}$/)
    expect((await stat(file)).mode & 0o777).toBe(0o600)
    // No drafts left beside it.
    expect(await readdir(dir)).toEqual([PEER_KEY_FILE])
    for (const each of instances) {
      expect(await each.admits(value)).toBe(true)
      expect(await each.admits(value.slice(1))).toBe(false)
      expect(await each.admits(`${value}0`)).toBe(false)
      expect(await each.admits('1')).toBe(false)
    }
  })

  it('replaces a file that holds no key (emptied, cut short), and never admits what it held', async () => {
    const dir = await tempDir('toolport-peer-key-')
    const file = path.join(dir, PEER_KEY_FILE)
    const key = new PeerKey(() => file)
    for (const spoilt of ['', '1', 'abc\n', 'f'.repeat(63)]) {
      await writeFile(file, spoilt)
      expect(await key.admits(spoilt.trim())).toBe(false)
      const value = await key.value()
      expect(value).toMatch(/^[0-9a-f]{64}$/)
      expect((await readFile(file, 'utf8')).trim()).toBe(value)
    }
    // A key replaced on the volume holds at once: the old one is no longer admitted.
    const before = await key.value()
    await writeFile(file, 'e'.repeat(64))
    expect(await key.admits(before)).toBe(false)
    expect(await key.admits('e'.repeat(64))).toBe(true)
  })

  it('says what is wrong when the key cannot be read (a directory in its place, another user\'s file)', async () => {
    const dir = await tempDir('toolport-peer-key-')
    await mkdir(path.join(dir, PEER_KEY_FILE))
    const key = new PeerKey(() => path.join(dir, PEER_KEY_FILE))
    // One at a time: a second one made at once would reject before it is awaited.
    for (const attempt of [() => key.value(), () => key.admits('x')]) {
      await expect(attempt()).rejects.toMatchObject({ code: 'ExecutionFailed', message: expect.stringContaining('cannot be read (EISDIR); it must be a file the service made') })
    }
  })

  it('never waits on a FIFO in its place', async () => {
    const dir = await tempDir('toolport-peer-key-')
    execFileSync('mkfifo', [path.join(dir, PEER_KEY_FILE)])
    const key = new PeerKey(() => path.join(dir, PEER_KEY_FILE))
    expect(await key.admits('x')).toBe(false)
  }, 5000)
})
