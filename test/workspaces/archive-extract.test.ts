/**
 * An upload read into its staging directory, then moved into the workspace
 * it was meant for: only if that is still the workspace that was there.
 */
import { existsSync, statSync } from 'node:fs'
import { randomBytes } from 'node:crypto'
import { mkdir, readdir, readlink, rename, rm } from 'node:fs/promises'
import path from 'node:path'
import { Readable } from 'node:stream'
import { describe, expect, it } from 'vitest'
import { ToolError } from '../../src/errors.ts'
import { stageArchive, workspaceSeen } from '../../src/workspaces/archive-extract.ts'
import type { Identity } from '../../src/workspaces/usage-directory.ts'
import { workspaceQuota } from '../../src/workspaces/quotas.ts'
import { tarOf } from '../support/tarball.ts'
import { tempDir } from '../support/temp.ts'
import { eventually } from '../sources/helpers.ts'

const LIMITS = { maxEntries: 100, maxBytes: 1024 * 1024, maxBodyBytes: 1024 * 1024 }

/** Descriptors of this process open on a file under `dir` (or a name it was renamed to, deleted). */
async function openUnder (dir: string): Promise<string[]> {
  const targets = await Promise.all((await readdir('/proc/self/fd')).map((fd) => readlink(`/proc/self/fd/${fd}`).catch(() => '')))
  return targets.filter((target) => target.startsWith(dir))
}

describe('stageArchive', () => {
  it('closes the file it was writing when the archive ends mid-entry (truncated, or a client gone): no descriptor, no disk kept', async () => {
    const root = await tempDir('toolport-extract-')
    const stagingDir = path.join(root, 'staging')
    const archive = tarOf([{ name: 'big.bin', content: randomBytes(3 * 1024 * 1024) }])
    for (const cut of [Readable.from([archive.subarray(0, archive.length / 2)]), Readable.from((async function * () {
      yield archive.subarray(0, archive.length / 2)
      throw new Error('the client went away')
    })())]) {
      await expect(stageArchive(cut, stagingDir, { ...LIMITS, maxBytes: 8 * 1024 * 1024, maxBodyBytes: 8 * 1024 * 1024 })).rejects.toThrow()
      expect(await eventually(async () => (await openUnder(stagingDir)).length === 0, 3000)).toBe(true)
    }
    expect(await readdir(stagingDir)).toEqual([])
  })

  it('unpacks into a directory of its own that no other user of the host may enter, under a staging directory made open', async () => {
    const root = await tempDir('toolport-extract-')
    const stagingDir = path.join(root, 'staging')
    await mkdir(stagingDir, { mode: 0o755 })
    const staged = await stageArchive(Readable.from([tarOf([{ name: 'a.txt', content: 'a' }])]), stagingDir, LIMITS)
    const [own] = await readdir(stagingDir)
    expect(statSync(path.join(stagingDir, own ?? '')).mode & 0o777).toBe(0o700)
    await staged.discard()
  })

  it('places nothing into a workspace deleted and made again as the move begins, and answers NotFound, also when it is only deleted', async () => {
    for (const madeAgain of [true, false]) {
      const root = await tempDir('toolport-extract-')
      const workspace = path.join(root, 'ws')
      await mkdir(workspace)
      const seen = workspaceSeen(workspace)
      const staged = await stageArchive(Readable.from([tarOf([{ name: 'a.txt', content: 'a' }, { name: 'd/b.txt', content: 'b' }])]), path.join(root, 'staging'), LIMITS)
      // The deletion (and a creation under the id) lands after the move's first look, before its first entry.
      const quota = {
        ...workspaceQuota(workspace, 1024 * 1024),
        ensureRoom: async () => {
          await rename(workspace, path.join(root, 'trashed'))
          if (madeAgain) await mkdir(workspace)
        }
      }
      await expect(staged.moveInto(workspace, quota, seen)).rejects.toMatchObject({ code: 'NotFound', message: 'the workspace was deleted during the upload' })
      if (madeAgain) expect(await readdir(workspace)).toEqual([])
      await staged.discard()
    }
  })

  it('moves nothing into a workspace deleted and made again while it was read, even one that got the same inode back', async () => {
    const root = await tempDir('toolport-extract-')
    const workspace = path.join(root, 'ws')
    await mkdir(workspace)
    const before = workspaceSeen(workspace) as Identity
    const staged = await stageArchive(Readable.from([tarOf([{ name: 'a.txt', content: 'a' }])]), path.join(root, 'staging'), LIMITS)
    // Deleted (moved to the trash, then removed) and made again. ext4 usually hands the freed inode straight
    // back, but another file made meanwhile may take it: the directory as it was seen is the old one's birth
    // with the new one's inode, what a reused inode looks like either way.
    await rename(workspace, path.join(root, 'trashed'))
    await rm(path.join(root, 'trashed'), { recursive: true })
    await mkdir(workspace)
    const seen = { ...workspaceSeen(workspace) as Identity, born: before.born }
    expect(statSync(workspace).birthtimeMs).not.toBe(before.born)
    const moved = staged.moveInto(workspace, workspaceQuota(workspace, 1024 * 1024), seen)
    await expect(moved).rejects.toBeInstanceOf(ToolError)
    await expect(moved).rejects.toMatchObject({ code: 'NotFound' })
    expect(existsSync(path.join(workspace, 'a.txt'))).toBe(false)
    await staged.discard()
  })
})
