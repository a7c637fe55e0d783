import { mkdir, realpath, symlink, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { beforeEach, describe, expect, it } from 'vitest'
import { isInside, resolveInWorkspace } from '../../src/workspace-fs/paths.ts'
import { ToolError } from '../../src/errors.ts'
import { tempDir } from '../support/temp.ts'

let ws: string
let outside: string

beforeEach(async () => {
  const base = await realpath(await tempDir())
  ws = path.join(base, 'ws')
  outside = path.join(base, 'outside')
  await mkdir(path.join(ws, 'sub'), { recursive: true })
  await mkdir(outside)
  await writeFile(path.join(outside, 'secret.txt'), 'secret')
  await writeFile(path.join(ws, 'sub', 'a.txt'), 'a')
})

async function codeOf (userPath: string): Promise<string> {
  const error = await resolveInWorkspace(ws, userPath).then(() => null, (e: unknown) => e)
  return error instanceof ToolError ? error.code : String(error)
}

describe('isInside', () => {
  it('knows `..` as a component from a name that merely starts with two dots', () => {
    expect(isInside('/ws', '/ws')).toBe(true)
    expect(isInside('/ws', '/ws/..notes')).toBe(true)
    expect(isInside('/ws', '/ws/...')).toBe(true)
    expect(isInside('/ws', '/ws/a/..b/c')).toBe(true)
    expect(isInside('/ws', '/')).toBe(false)
    expect(isInside('/ws', '/ws-other/x')).toBe(false)
    expect(isInside('/ws', '/other')).toBe(false)
  })
})

describe('resolveInWorkspace', () => {
  it('resolves contained paths, existing or not', async () => {
    expect(await resolveInWorkspace(ws, 'sub/a.txt')).toEqual({ absolute: path.join(ws, 'sub', 'a.txt'), exists: true })
    expect(await resolveInWorkspace(ws, 'sub/../sub/new.txt')).toEqual({ absolute: path.join(ws, 'sub', 'new.txt'), exists: false })
    expect(await resolveInWorkspace(ws, 'deep/er/x.txt')).toEqual({ absolute: path.join(ws, 'deep', 'er', 'x.txt'), exists: false })
    expect(await resolveInWorkspace(ws, '.')).toEqual({ absolute: ws, exists: true })
  })

  it.each([
    ['../outside/secret.txt'],
    ['sub/../../outside/secret.txt'],
    ['..'],
    ['/etc/passwd'],
    ['/'],
    ['a\u0000b'],
    ['C:\\Windows'],
    ['\\\\server\\share'],
    ['a\ud800'],
    ['dir/\udfff.txt'],
  ])('refuses %j with InvalidPath', async (userPath) => {
    expect(await codeOf(userPath)).toBe('InvalidPath')
  })

  it('refuses a symlink that points outside, and paths through it', async () => {
    await symlink(outside, path.join(ws, 'link'))
    await symlink(path.join(outside, 'secret.txt'), path.join(ws, 'file-link'))
    expect(await codeOf('link')).toBe('InvalidPath')
    expect(await codeOf('link/secret.txt')).toBe('InvalidPath')
    expect(await codeOf('link/new-file.txt')).toBe('InvalidPath')
    expect(await codeOf('file-link')).toBe('InvalidPath')
  })

  it('follows a dangling symlink to where it points: a missing path inside, an escape outside', async () => {
    await symlink(path.join(outside, 'not-yet.txt'), path.join(ws, 'dangling'))
    await symlink('nowhere-inside', path.join(ws, 'dangling-inside'))
    await symlink('../later/x.txt', path.join(ws, 'sub', 'up'))
    expect(await codeOf('dangling')).toBe('InvalidPath')
    expect(await codeOf('dangling/x')).toBe('InvalidPath')
    expect(await resolveInWorkspace(ws, 'dangling-inside')).toEqual({ absolute: path.join(ws, 'nowhere-inside'), exists: false })
    expect(await resolveInWorkspace(ws, 'dangling-inside/a/b.txt')).toEqual({ absolute: path.join(ws, 'nowhere-inside', 'a', 'b.txt'), exists: false })
    expect(await resolveInWorkspace(ws, 'sub/up')).toEqual({ absolute: path.join(ws, 'later', 'x.txt'), exists: false })
  })

  it('refuses a dangling symlink reached through a directory outside, even when it points back inside', async () => {
    await symlink(outside, path.join(ws, 'out'))
    await symlink(path.join(ws, 'back.txt'), path.join(outside, 'back'))
    expect(await codeOf('out/back')).toBe('InvalidPath')
  })

  it('refuses dangling symlinks that point at one another', async () => {
    await symlink('b', path.join(ws, 'a'))
    await symlink('a', path.join(ws, 'b'))
    expect(await codeOf('a')).toBe('InvalidPath')
  })

  it('follows a symlink that stays inside', async () => {
    await symlink('sub', path.join(ws, 'alias'))
    expect(await resolveInWorkspace(ws, 'alias/a.txt')).toEqual({ absolute: path.join(ws, 'sub', 'a.txt'), exists: true })
  })

  it('refuses a path longer than 4096 bytes', async () => {
    expect(await codeOf('a/'.repeat(2100))).toBe('InvalidPath')
  })

  it('quotes the start of an over-long path without cutting a character in two', async () => {
    for (const userPath of [`a${'😀'.repeat(64)}`, `a${'😀'.repeat(1100)}`]) {
      const error = await resolveInWorkspace(ws, userPath).then(() => undefined, (thrown: unknown) => thrown)
      expect(error).toBeInstanceOf(ToolError)
      const { code, message } = error as ToolError
      expect(code).toBe('InvalidPath')
      expect(message.isWellFormed(), message).toBe(true)
      expect(message).toMatch(/^"a(😀){31}\uFFFD…" (has a name longer than the filesystem allows|is longer than 4096 bytes)$/)
    }
  })
})
