/**
 * An upload's staged entry put in place of what the workspace holds at its
 * name: a file renamed over a file, so that a reader sees the old file or
 * the new one and never none; a directory at the name removed first.
 */
import { mkdir, readFile, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { describe, expect, it, vi } from 'vitest'
import { moveInto } from '../../src/workspaces/archive-move.ts'
import { tempDir } from '../support/temp.ts'

const removed = vi.hoisted(() => [] as string[])
vi.mock('../../src/workspaces/remove-tree.ts', async (importOriginal) => {
  const original = await importOriginal<typeof import('../../src/workspaces/remove-tree.ts')>()
  return {
    ...original,
    removeTree: async (at: string) => {
      removed.push(path.basename(at))
      await original.removeTree(at)
    },
  }
})

const report = () => ({ files: 0, directories: 0, symlinks: 0, skipped: [], skipped_count: 0 })

describe('moveInto', () => {
  it('renames a file over the file there (never removing it first), and removes a directory in a file\'s way', async () => {
    const staging = await tempDir('toolport-staged-')
    const workspace = await tempDir('toolport-ws-')
    await writeFile(path.join(staging, 'f.txt'), 'new')
    await writeFile(path.join(staging, 'was-dir'), 'now a file')
    await writeFile(path.join(workspace, 'f.txt'), 'old')
    await mkdir(path.join(workspace, 'was-dir'))
    removed.length = 0
    await moveInto(staging, workspace, report(), () => {})
    expect(await readFile(path.join(workspace, 'f.txt'), 'utf8')).toBe('new')
    expect(await readFile(path.join(workspace, 'was-dir'), 'utf8')).toBe('now a file')
    expect(removed).toEqual(['was-dir'])
  })
})
