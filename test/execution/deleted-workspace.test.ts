/**
 * A call that failed because its persistent workspace was deleted under it
 * answers NotFound, as a call after the deletion does: also when the
 * workspace was already gone when the call looked at its directory, just
 * after its lookup (a file tool then met a path that "leaves the workspace").
 */
import { mkdir, rm } from 'node:fs/promises'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { ToolError } from '../../src/errors.ts'
import { asDeletedWorkspace } from '../../src/execution/execute.ts'
import { identityAt } from '../../src/workspaces/usage-directory.ts'
import { tempDir } from '../support/temp.ts'

const lease = (dir: string) => ({ id: 'w', dir, release: async () => {} })
const leaves = new ToolError('InvalidPath', '"y/n.txt" leaves the workspace')

describe('asDeletedWorkspace', () => {
  it('answers NotFound for a workspace gone before the call first looked at it', async () => {
    const dir = path.join(await tempDir(), 'gone')
    expect(await asDeletedWorkspace(leaves, lease(dir), undefined)).toMatchObject({ code: 'NotFound', message: 'workspace "w" was deleted during the call' })
  })

  it('answers NotFound for a workspace deleted and made again during the call', async () => {
    const dir = path.join(await tempDir(), 'w')
    await mkdir(dir)
    const found = await identityAt(dir)
    await rm(dir, { recursive: true })
    await mkdir(dir)
    expect(await asDeletedWorkspace(leaves, lease(dir), found)).toMatchObject({ code: 'NotFound' })
  })

  it('keeps the error of a call whose workspace is there as it was, or that could not be looked at, or that failed otherwise', async () => {
    const dir = path.join(await tempDir(), 'w')
    await mkdir(dir)
    expect(await asDeletedWorkspace(leaves, lease(dir), await identityAt(dir))).toBe(leaves)
    // Not looked at (found undefined), yet there: its own error, never NotFound.
    expect(await asDeletedWorkspace(leaves, lease(dir), undefined)).toBe(leaves)
    const invalid = new ToolError('InvalidArgs', 'bad')
    expect(await asDeletedWorkspace(invalid, lease(path.join(dir, 'gone')), undefined)).toBe(invalid)
    // An ephemeral workspace has no id to be deleted under.
    expect(await asDeletedWorkspace(leaves, { ...lease(path.join(dir, 'gone')), id: null }, undefined)).toBe(leaves)
  })
})
