/**
 * An edit on a file system whose times come from a coarse clock (a second
 * on ext2/ext3, a few milliseconds on ext4 before Linux 6.13): a rewrite of
 * the same size within the same tick leaves inode, size and times as they
 * were, so the edit's last look compares the bytes of a file changed that
 * recently. This machine's file system stamps nanoseconds; the clock's tick
 * is made coarse here by reading every change time and modification time
 * as one instant, the stats' only part that is not the file system's own.
 */
import { closeSync, openSync, type Stats, writeSync } from 'node:fs'
import { open, readFile, realpath, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { editFile } from '../../src/workspace-fs/edit.ts'
import { tempDir } from '../support/temp.ts'

/** One tick for every change: now, to the second. */
const tick = vi.hoisted(() => ({ at: 0 }))
const coarse = (stats: Stats): Stats => Object.assign(stats, { mtimeMs: tick.at, ctimeMs: tick.at })
vi.mock('node:fs/promises', async (importOriginal) => {
  const original = await importOriginal<typeof import('node:fs/promises')>()
  const lstat = (async (...args: Parameters<typeof original.lstat>) => coarse(await original.lstat(...args) as Stats)) as typeof original.lstat
  return { ...original, default: { ...original, lstat }, lstat }
})

afterEach(() => { vi.restoreAllMocks() })

describe('editFile on coarse file times', () => {
  it('makes the edit again on a file rewritten in place, at the same size, within the tick of its read', async () => {
    tick.at = Math.floor(Date.now() / 1000) * 1000
    const dir = await realpath(await tempDir('toolport-edit-'))
    const file = path.join(dir, 'f.txt')
    await writeFile(file, 'C=00\nE=\n')
    // The descriptor's stat (the edit's read) gets the same coarse times as lstat (its last look).
    const probe = await open(file)
    const fileHandle = Object.getPrototypeOf(probe) as { stat: (...args: unknown[]) => Promise<Stats> }
    await probe.close()
    const stat = fileHandle.stat
    vi.spyOn(fileHandle, 'stat').mockImplementation(async function (this: unknown, ...args: unknown[]) { return coarse(await stat.apply(this, args)) })

    let first = true
    await editFile(dir, 'f.txt', undefined, (text) => {
      if (first) {
        // Another process's write in place: same size, same inode.
        const fd = openSync(file, 'r+')
        writeSync(fd, 'C=42', 0)
        closeSync(fd)
      }
      first = false
      return { text: text.replace('E=', 'E=e'), result: undefined }
    })
    expect(await readFile(file, 'utf8')).toBe('C=42\nE=e\n')
  })
})
