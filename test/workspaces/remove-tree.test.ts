/**
 * Removing a workspace never follows a symlink: not one left in it, and not
 * one swapped in while the removal runs (a command still running there).
 */
import { existsSync } from 'node:fs'
import { spawn } from 'node:child_process'
import { mkdir, readdir, symlink, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { directorySize } from '../../src/workspaces/directory-size.ts'
import { removeTree } from '../../src/workspaces/remove-tree.ts'
import { tempDir } from '../support/temp.ts'

async function outsideWithFiles (): Promise<string> {
  const outside = path.join(await tempDir('toolport-victim-'), 'victim')
  await mkdir(path.join(outside, 'deep'), { recursive: true })
  for (let i = 0; i < 20; i++) await writeFile(path.join(outside, `f${i}`), 'keep')
  await writeFile(path.join(outside, 'deep', 'g'), 'keep')
  return outside
}

describe('removeTree', () => {
  it('removes a tree of files, directories and links, and nothing a link points to', async () => {
    const outside = await outsideWithFiles()
    const ws = path.join(await tempDir(), 'ws')
    await mkdir(path.join(ws, 'a', 'b', 'c'), { recursive: true })
    await writeFile(path.join(ws, 'a', 'b', 'c', 'x'), 'x')
    await writeFile(path.join(ws, 'top'), 'y')
    await symlink(outside, path.join(ws, 'a', 'to-outside'))
    await symlink(path.join(outside, 'f1'), path.join(ws, 'file-link'))
    await symlink('/nonexistent', path.join(ws, 'dangling'))
    await removeTree(ws)
    expect(existsSync(ws)).toBe(false)
    expect((await readdir(outside)).length).toBe(21)
    await removeTree(ws)
    await removeTree(path.join(outside, 'f0'))
    expect(existsSync(path.join(outside, 'f0'))).toBe(false)
  })

  it('removes, and counts, entries whose names are not UTF-8', async () => {
    const ws = path.join(await tempDir(), 'ws')
    await mkdir(ws)
    const bytes = (name: string) => Buffer.concat([Buffer.from(`${ws}/`), Buffer.from(name, 'latin1')])
    await writeFile(bytes('caf\xe9.txt'), 'abc')
    await mkdir(bytes('dir\xff'))
    await writeFile(Buffer.concat([bytes('dir\xff'), Buffer.from('/keep\xfe', 'latin1')]), 'defg')
    expect(await directorySize(ws)).toEqual({ files: 2, bytes: 7 })
    await removeTree(ws)
    expect(existsSync(ws)).toBe(false)
  })

  it('holds while a directory inside is swapped for a symlink to the outside during the removal', async () => {
    const outside = await outsideWithFiles()
    for (let round = 0; round < 15; round++) {
      const ws = path.join(await tempDir(), 'ws')
      const sub = path.join(ws, 'sub')
      await mkdir(sub, { recursive: true })
      // Many entries: a removal by path spends long enough inside `sub` for the swap to land.
      await Promise.all(Array.from({ length: 400 }, (_, i) => writeFile(path.join(sub, `f${i}`), 'mine')))
      // Another process (as a command still running there would) turns `sub` into a link to the outside and back.
      const swapper = spawn('sh', ['-c', `cd '${ws}' && while :; do mv sub real; ln -s '${outside}' sub; rm -f sub; mv real sub; done`], { stdio: 'ignore' })
      try {
        await new Promise((resolve) => setTimeout(resolve, 20))
        await removeTree(ws).catch(() => {})
      } finally {
        swapper.kill('SIGKILL')
        await new Promise((resolve) => swapper.once('exit', resolve))
      }
      expect((await readdir(outside)).sort()).toEqual([...Array.from({ length: 20 }, (_, i) => `f${i}`), 'deep'].sort())
      expect(await readdir(path.join(outside, 'deep'))).toEqual(['g'])
    }
  })
})
