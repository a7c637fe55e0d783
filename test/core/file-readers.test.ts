/**
 * The reader threads (core/file-readers.ts): one round trip per small read,
 * answering what the caller needs to refuse a file the same way the
 * ordinary open would, and handing a read back when a thread is gone.
 */
import { execFileSync } from 'node:child_process'
import { link, mkdir, symlink, truncate, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { FileReaders } from '../../src/core/file-readers.ts'
import { tempDir } from '../support/temp.ts'

let readers: FileReaders | undefined
afterEach(async () => { await readers?.close() })

/** A directory holding `big`, a sparse file of `bytes` (slow to read whole), and `small` with `text`. */
async function bigAndSmall (bytes: number, text: string): Promise<string> {
  const dir = await tempDir('readers-')
  await writeFile(path.join(dir, 'big'), '')
  await truncate(path.join(dir, 'big'), bytes)
  await writeFile(path.join(dir, 'small'), text)
  return dir
}

/** A read's answer without the thread's request id. */
async function answer (file: string, maxBytes: number): Promise<Record<string, unknown>> {
  const { id: _id, ...rest } = await (readers as FileReaders).read(file, maxBytes) as Record<string, unknown>
  return rest
}

describe('file readers', () => {
  it('read a capped prefix of a regular file, decoded as UTF-8', async () => {
    readers = new FileReaders({ size: 2 })
    const dir = await tempDir('readers-')
    await writeFile(path.join(dir, 'a.txt'), 'héllo wörld\n')
    expect(await answer(path.join(dir, 'a.txt'), 1000)).toEqual({ opened: true, kind: 'file', nlink: 1, text: 'héllo wörld\n' })
    expect(await readers.read(path.join(dir, 'a.txt'), 5)).toMatchObject({ text: 'h\u00e9ll' })
    await writeFile(path.join(dir, 'empty'), '')
    expect(await readers.read(path.join(dir, 'empty'), 10)).toMatchObject({ kind: 'file', text: '' })
  })

  it('hand back what they do not open (a symlink at the name, a missing file) and read nothing that is not a one-name regular file', async () => {
    readers = new FileReaders({ size: 1 })
    const dir = await tempDir('readers-')
    await writeFile(path.join(dir, 'target'), 'secret')
    await symlink(path.join(dir, 'target'), path.join(dir, 'link'))
    await link(path.join(dir, 'target'), path.join(dir, 'hard'))
    await mkdir(path.join(dir, 'sub'))
    execFileSync('mkfifo', [path.join(dir, 'fifo')])
    expect(await answer(path.join(dir, 'link'), 100)).toEqual({ opened: false })
    expect(await answer(path.join(dir, 'missing'), 100)).toEqual({ opened: false })
    expect(await answer(path.join(dir, 'hard'), 100)).toEqual({ opened: true, kind: 'file', nlink: 2 })
    expect(await answer(path.join(dir, 'sub'), 100)).toEqual({ opened: true, kind: 'directory', nlink: 2 })
    // A FIFO without a writer answers at once: the open does not block, and it is never read.
    expect(await answer(path.join(dir, 'fifo'), 100)).toEqual({ opened: true, kind: 'other', nlink: 1 })
  })

  it('answer each of many reads sent in the same turn of the event loop with its own file', async () => {
    readers = new FileReaders({ size: 2 })
    const dir = await tempDir('readers-')
    await Promise.all(Array.from({ length: 300 }, (_, i) => writeFile(path.join(dir, `f${i}`), `content ${i}`)))
    const answers = await Promise.all(Array.from({ length: 300 }, (_, i) => readers?.read(path.join(dir, `f${i}`), 100)))
    expect(answers.map((a) => (a as { text: string }).text)).toEqual(Array.from({ length: 300 }, (_, i) => `content ${i}`))
  })

  it('answer a batch that mixes small texts, a text too large for the shared answer area, refusals and a failed read, each in its place', async () => {
    readers = new FileReaders({ size: 1 })
    const dir = await tempDir('readers-')
    const large = 'é'.repeat(400 * 1024)
    await writeFile(path.join(dir, 'large'), large)
    await writeFile(path.join(dir, 'small'), 'small')
    await mkdir(path.join(dir, 'sub'))
    const answers = await Promise.all([
      answer(path.join(dir, 'small'), 100),
      answer(path.join(dir, 'large'), 2 * large.length),
      answer(path.join(dir, 'sub'), 100),
      // Reading a process's own memory at offset 0 fails with EIO after a good open and fstat.
      answer('/proc/self/mem', 100),
      answer(path.join(dir, 'missing'), 100),
      answer(path.join(dir, 'small'), 3),
    ])
    expect(answers).toEqual([
      { opened: true, kind: 'file', nlink: 1, text: 'small' },
      { opened: true, kind: 'file', nlink: 1, text: large },
      { opened: true, kind: 'directory', nlink: 2 },
      { opened: true, errorCode: 'EIO' },
      { opened: false },
      { opened: true, kind: 'file', nlink: 1, text: 'sma' },
    ])
  })

  it('split reads that do not fit the shared memory at once into several batches', async () => {
    readers = new FileReaders({ size: 1 })
    const dir = await tempDir('readers-')
    const texts = Array.from({ length: 120 }, (_, i) => `${i} `.repeat(20_000).slice(0, 100_000))
    await Promise.all(texts.map((text, i) => writeFile(path.join(dir, `f${i}`), text)))
    // 120 reads of up to 100 kB each are more than the 4 MiB answer area holds.
    const answers = await Promise.all(texts.map((_, i) => readers?.read(path.join(dir, `f${i}`), 100_000)))
    expect(answers.map((a) => (a as { text: string }).text)).toEqual(texts)
  })

  it('keep answering while one reader is busy with a long read', async () => {
    readers = new FileReaders({ size: 2 })
    const dir = await bigAndSmall(128 * 1024 * 1024, 'small')
    let longDone = false
    const long = readers.read(path.join(dir, 'big'), 128 * 1024 * 1024).finally(() => { longDone = true })
    expect(await readers.read(path.join(dir, 'small'), 100)).toMatchObject({ text: 'small' })
    expect(longDone).toBe(false)
    expect(((await long) as { text: string }).text).toHaveLength(128 * 1024 * 1024)
  }, 30_000)

  it('hand a read back when its thread stops, and start fresh threads for the next', async () => {
    readers = new FileReaders({ size: 1 })
    const dir = await bigAndSmall(512 * 1024 * 1024, 'still here')
    const pending = readers.read(path.join(dir, 'big'), 512 * 1024 * 1024)
    await readers.close()
    expect(await pending).toEqual({ opened: false })
    expect(await readers.read(path.join(dir, 'small'), 100)).toMatchObject({ text: 'still here' })
  }, 30_000)

  it('send new reads past a reader that has stalled, and answer at once when every reader has', async () => {
    readers = new FileReaders({ size: 2, stalledMs: 30 })
    const dir = await bigAndSmall(128 * 1024 * 1024, 'small')
    let longDone = false
    const long = readers.read(path.join(dir, 'big'), 128 * 1024 * 1024).finally(() => { longDone = true })
    await new Promise((resolve) => setTimeout(resolve, 60))
    // The stalled reader has one read waiting; the other takes all three, though a tie would go to the first.
    const answers = await Promise.all([1, 2, 3].map(() => readers?.read(path.join(dir, 'small'), 100)))
    expect(answers.map((a) => (a as { text?: string }).text)).toEqual(['small', 'small', 'small'])
    expect(longDone).toBe(false)
    await long
    const alone = new FileReaders({ size: 1, stalledMs: 30 })
    try {
      const stuck = alone.read(path.join(dir, 'big'), 128 * 1024 * 1024)
      await new Promise((resolve) => setTimeout(resolve, 60))
      expect(await alone.read(path.join(dir, 'small'), 100)).toEqual({ opened: false })
      expect(await stuck).toMatchObject({ opened: true, kind: 'file' })
    } finally {
      await alone.close()
    }
  }, 30_000)

  it('hand every read back when no reader thread can run', async () => {
    const dir = await tempDir('readers-')
    await writeFile(path.join(dir, 'broken.mjs'), 'throw new Error("no reader here")\n')
    await writeFile(path.join(dir, 'a.txt'), 'a')
    readers = new FileReaders({ size: 2, threadFile: path.join(dir, 'broken.mjs') })
    expect(await readers.read(path.join(dir, 'a.txt'), 100)).toEqual({ opened: false })
    // Within the back-off no new thread is tried: the answer is immediate.
    expect(await readers.read(path.join(dir, 'a.txt'), 100)).toEqual({ opened: false })
  })
})
