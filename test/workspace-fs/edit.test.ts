/**
 * The edit procedure: a file changed between the edit's read and its write
 * (an archive upload renaming a file over it, another instance's write, a
 * command appending) is never overwritten with text made from the old one:
 * the edit is made again on the file as it is now, or refused with nothing
 * written when the file keeps changing.
 */
import { appendFileSync, renameSync, unlinkSync, writeFileSync } from 'node:fs'
import { readdir, readFile, realpath, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { editFile, occurrencesOf } from '../../src/workspace-fs/edit.ts'
import { tempDir } from '../support/temp.ts'

async function workspaceWith (content: string): Promise<{ dir: string, file: string }> {
  const dir = await realpath(await tempDir('toolport-edit-'))
  await writeFile(path.join(dir, 'f.txt'), content)
  return { dir, file: path.join(dir, 'f.txt') }
}

const appendMark = (text: string) => ({ text: `${text}e|`, result: text })

describe('editFile', () => {
  it('makes the edit again on a file replaced after it was read (renamed over, as an upload does)', async () => {
    const { dir, file } = await workspaceWith('OLD\n')
    const seen: string[] = []
    await editFile(dir, 'f.txt', undefined, (text) => {
      seen.push(text)
      if (seen.length === 1) {
        writeFileSync(`${file}.new`, 'ARCHIVE\n')
        renameSync(`${file}.new`, file)
      }
      return appendMark(text)
    })
    expect(seen).toEqual(['OLD\n', 'ARCHIVE\n'])
    expect(await readFile(file, 'utf8')).toBe('ARCHIVE\ne|')
  })

  it('makes it again on a file changed in place after it was read (a command appending)', async () => {
    const { dir, file } = await workspaceWith('one\n')
    let first = true
    await editFile(dir, 'f.txt', undefined, (text) => {
      if (first) appendFileSync(file, 'two\n')
      first = false
      return appendMark(text)
    })
    expect(await readFile(file, 'utf8')).toBe('one\ntwo\ne|')
  })

  it('answers FileNotFound, writing nothing, for a file deleted after it was read, on its last try too', async () => {
    const { dir, file } = await workspaceWith('doomed\n')
    let tries = 0
    const editing = editFile(dir, 'f.txt', undefined, (text) => {
      // Changed under four tries, then deleted under the fifth: gone, not "kept changing".
      if (++tries < 5) {
        writeFileSync(`${file}.new`, `change ${tries}\n`)
        renameSync(`${file}.new`, file)
      } else {
        unlinkSync(file)
      }
      return appendMark(text)
    })
    await expect(editing).rejects.toMatchObject({ code: 'FileNotFound' })
    expect(await readdir(dir)).toEqual([])
  })

  it('writes nothing, and says so, when the file changes under every try', async () => {
    const { dir, file } = await workspaceWith('start\n')
    let tries = 0
    const editing = editFile(dir, 'f.txt', undefined, (text) => {
      writeFileSync(`${file}.new`, `change ${++tries}\n`)
      renameSync(`${file}.new`, file)
      return appendMark(text)
    })
    await expect(editing).rejects.toMatchObject({ code: 'Conflict', message: expect.stringMatching(/kept changing while it was being edited; nothing was written/) })
    expect(await readFile(file, 'utf8')).toBe(`change ${tries}\n`)
  })
})

describe('occurrencesOf', () => {
  /** What a search by indexOf finds: the first occurrence, and how many without overlapping. */
  function byIndexOf (text: string, needle: string): { first: number, count: number } {
    let count = 0
    for (let at = text.indexOf(needle); at !== -1; at = text.indexOf(needle, at + needle.length)) count++
    return { first: text.indexOf(needle), count }
  }

  it('finds what indexOf finds, overlapping candidates and characters outside the BMP included', () => {
    for (const [text, needle] of [['aaaa', 'aa'], ['aaaaa', 'aa'], ['abababab', 'abab'], ['aabaabaab', 'aab'], ['xyz', 'xyzw'], ['😀😀a😀', '😀a'], ['', 'a'], ['abc', 'abc']] as Array<[string, string]>) {
      expect(occurrencesOf(text, needle), `${text} / ${needle}`).toEqual(byIndexOf(text, needle))
    }
    // Texts and needles of a small alphabet, where partial matches and fallbacks are many.
    let seed = 7
    const next = (): number => { seed = (seed * 1103515245 + 12345) % 2 ** 31; return seed }
    const word = (length: number): string => Array.from({ length }, () => 'ab\n'[next() % 3]).join('')
    for (let round = 0; round < 2000; round++) {
      const text = word(next() % 60)
      const needle = word(1 + (next() % 6))
      expect(occurrencesOf(text, needle), `${JSON.stringify(text)} / ${JSON.stringify(needle)}`).toEqual(byIndexOf(text, needle))
    }
  })

  it('answers a needle that almost matches everywhere (a…ab a…a in a long run of a) as not found', () => {
    const needle = `${'a'.repeat(5000)}b${'a'.repeat(4999)}`
    expect(occurrencesOf('a'.repeat(200_000), needle)).toEqual({ first: -1, count: 0 })
    expect(occurrencesOf(`${'a'.repeat(100_000)}${needle}${'a'.repeat(100)}`, needle)).toEqual({ first: 100_000, count: 1 })
  })
})
