/**
 * The walk removal and counting share: relative to descriptors, never into a
 * symlink, and never above its root, even when what it stands in moves away.
 */
import { mkdir, readdir, rename, symlink, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { TreeCursor } from '../../src/workspace-fs/tree-cursor.ts'
import { onCleanup, tempDir } from '../support/temp.ts'

async function cursorOver (root: string): Promise<TreeCursor> {
  const cursor = await TreeCursor.open(root)
  if (!cursor) throw new Error(`${root} is not a directory`)
  onCleanup(() => cursor.close())
  return cursor
}

describe('TreeCursor', () => {
  it('goes down and back up by descriptors, and refuses symlinks, files and a step above its root', async () => {
    const base = await tempDir()
    const ws = path.join(base, 'ws')
    await mkdir(path.join(ws, 'a', 'b'), { recursive: true })
    await writeFile(path.join(ws, 'a', 'b', 'x'), 'x')
    await writeFile(path.join(ws, 'file'), 'f')
    await symlink(path.join(ws, 'a'), path.join(ws, 'link'))
    expect(await TreeCursor.open(path.join(ws, 'link'))).toBeNull()
    expect(await TreeCursor.open(path.join(ws, 'missing'))).toBeNull()
    const cursor = await cursorOver(ws)
    expect(await cursor.enter('link')).toBe(false)
    expect(await cursor.enter('file')).toBe(false)
    expect(await cursor.enter('a')).toBe(true)
    expect(await cursor.enter('b')).toBe(true)
    expect([cursor.depth, await readdir(cursor.here)]).toEqual([2, ['x']])
    expect(await cursor.leave()).toBe(1)
    expect(await cursor.leave()).toBe(0)
    expect((await readdir(cursor.here)).sort()).toEqual(['a', 'file', 'link'])
    await expect(cursor.leave()).rejects.toThrow(/root/)
  })

  it('does not climb out with a directory moved out of its tree, but walks down again from the root', async () => {
    const base = await tempDir()
    const ws = path.join(base, 'ws')
    const outside = path.join(base, 'outside')
    await mkdir(path.join(ws, 'a', 'b', 'c'), { recursive: true })
    await mkdir(outside)
    await writeFile(path.join(outside, 'secret'), 'keep')
    const cursor = await cursorOver(ws)
    for (const name of ['a', 'b', 'c']) expect(await cursor.enter(name)).toBe(true)
    // A process moves b (with the walk inside it) out of the tree.
    await rename(path.join(ws, 'a', 'b'), path.join(outside, 'b'))
    // c's parent is still the b it came through: fine to go up into it, wherever it is.
    expect(await cursor.leave()).toBe(2)
    expect(await readdir(cursor.here)).toEqual(['c'])
    // b's parent is now `outside`, not a: the walk goes back to a, through the root.
    expect(await cursor.leave()).toBe(1)
    expect(await readdir(cursor.here)).toEqual([])
    expect(await cursor.leave()).toBe(0)
    expect(await readdir(cursor.here)).toEqual(['a'])
  })

  it('drops the levels that moved away when it walks down again', async () => {
    const base = await tempDir()
    const ws = path.join(base, 'ws')
    await mkdir(path.join(ws, 'a', 'b', 'c', 'd'), { recursive: true })
    const cursor = await cursorOver(ws)
    for (const name of ['a', 'b', 'c', 'd']) expect(await cursor.enter(name)).toBe(true)
    // d moves to the root, and a new b takes the old one's name: the old way down leads elsewhere from b on.
    await rename(path.join(ws, 'a', 'b', 'c', 'd'), path.join(ws, 'd'))
    await rename(path.join(ws, 'a', 'b'), path.join(ws, 'old-b'))
    await mkdir(path.join(ws, 'a', 'b', 'c'), { recursive: true })
    expect(await cursor.leave()).toBe(1)
    expect(await readdir(cursor.here)).toEqual(['b'])
  })
})
