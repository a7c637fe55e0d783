import net from 'node:net'
import { chmod, mkdir, readdir, readFile, stat, symlink, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { editFileTool } from '../../src/tools/edit-file.ts'
import { listDirectoryTool } from '../../src/tools/list-directory.ts'
import { readTool } from '../../src/tools/omega/index.ts'
import { readFileTool } from '../../src/tools/read-file.ts'
import { writeFileTool } from '../../src/tools/write-file.ts'
import { buildTestApp, exec } from '../helper.ts'
import { codeOf, toolContext } from '../support/context.ts'
import { expectProblem } from '../support/problem.ts'
import { tempDir } from '../support/temp.ts'

describe('write_file', () => {
  it('writes, creates parents, counts UTF-8 bytes and overwrites', async () => {
    const ctx = await toolContext()
    expect(await writeFileTool.execute({ path: 'a/b/c.txt', content: 'héllo ✓' }, ctx)).toEqual({ message: 'Successfully wrote 10 bytes to a/b/c.txt' })
    await writeFileTool.execute({ path: 'a/b/c.txt', content: 'second' }, ctx)
    expect(await readFile(path.join(ctx.workspaceDir, 'a/b/c.txt'), 'utf8')).toBe('second')
    // No temporary files are left beside the target.
    expect(await readdir(path.join(ctx.workspaceDir, 'a/b'))).toEqual(['c.txt'])
  })

  it('refuses escapes, absolute paths, directories and the workspace itself', async () => {
    const ctx = await toolContext()
    const outside = await tempDir()
    await symlink(outside, path.join(ctx.workspaceDir, 'out'))
    await mkdir(path.join(ctx.workspaceDir, 'dir'))
    expect(await codeOf(writeFileTool.execute({ path: '../x.txt', content: 'x' }, ctx))).toBe('InvalidPath')
    expect(await codeOf(writeFileTool.execute({ path: '/tmp/x.txt', content: 'x' }, ctx))).toBe('InvalidPath')
    expect(await codeOf(writeFileTool.execute({ path: 'out/x.txt', content: 'x' }, ctx))).toBe('InvalidPath')
    expect(await codeOf(writeFileTool.execute({ path: 'dir', content: 'x' }, ctx))).toBe('InvalidArgs')
    expect(await codeOf(writeFileTool.execute({ path: '.', content: 'x' }, ctx))).toBe('InvalidArgs')
    // A trailing slash names a directory: no file called `newdir` appears.
    expect(await codeOf(writeFileTool.execute({ path: 'newdir/', content: 'x' }, ctx))).toBe('InvalidArgs')
    expect(await readdir(ctx.workspaceDir)).toEqual(['dir', 'out'])
    expect(await readdir(outside)).toEqual([])
  })
})

describe('read_file', () => {
  it('reads a file, and FileNotFound for a missing one', async () => {
    const ctx = await toolContext()
    await writeFile(path.join(ctx.workspaceDir, 'r.txt'), 'line "one"\n\ttwo\n')
    expect(await readFileTool.execute({ path: 'r.txt' }, ctx)).toEqual({ content: 'line "one"\n\ttwo\n' })
    expect(await codeOf(readFileTool.execute({ path: 'missing.txt' }, ctx))).toBe('FileNotFound')
    expect(await codeOf(readFileTool.execute({ path: '.' }, ctx))).toBe('InvalidArgs')
  })

  it('refuses a file named as a directory (a.txt/, a.txt/.), as the kernel does, in every reading tool', async () => {
    const ctx = await toolContext()
    await writeFile(path.join(ctx.workspaceDir, 'a.txt'), 'hello\n')
    for (const named of ['a.txt/', 'a.txt/.', './a.txt//']) {
      await expect(readFileTool.execute({ path: named }, ctx)).rejects.toThrow(`${JSON.stringify(named)} ends with a slash, . or ..: it names a directory, not a file`)
      expect(await codeOf(readTool.execute({ file_path: named }, ctx))).toBe('InvalidArgs')
    }
    expect(await readFileTool.execute({ path: './a.txt' }, ctx)).toEqual({ content: 'hello\n' })
  })

  it('reads no more than the result limit (plus one byte)', async () => {
    const ctx = await toolContext({ maxResultBytes: 1000 })
    await writeFile(path.join(ctx.workspaceDir, 'big.txt'), 'x'.repeat(1_000_000))
    const result = await readFileTool.execute({ path: 'big.txt' }, ctx) as { content: string }
    expect(result.content.length).toBe(1001)
  })

  it('pages by lines with offset and limit', async () => {
    const ctx = await toolContext()
    await writeFile(path.join(ctx.workspaceDir, 'lines.txt'), Array.from({ length: 10 }, (_, i) => `line ${i + 1}`).join('\n') + '\n')
    expect(await readFileTool.execute({ path: 'lines.txt', offset: 3, limit: 2 }, ctx)).toEqual({ content: 'line 3\nline 4\n', offset: 3, lines: 2, next_offset: 5 })
    expect(await readFileTool.execute({ path: 'lines.txt', offset: 9 }, ctx)).toEqual({ content: 'line 9\nline 10\n', offset: 9, lines: 2 })
  })

  it('never reads through a symlink that leads outside', async () => {
    const ctx = await toolContext()
    const outside = await tempDir()
    await writeFile(path.join(outside, 'secret.txt'), 'TOPSECRET')
    await symlink(path.join(outside, 'secret.txt'), path.join(ctx.workspaceDir, 'leak.txt'))
    expect(await codeOf(readFileTool.execute({ path: 'leak.txt' }, ctx))).toBe('InvalidPath')
  })
})

describe('edit_file', () => {
  it('replaces exactly one match', async () => {
    const ctx = await toolContext()
    await writeFile(path.join(ctx.workspaceDir, 'e.txt'), 'alpha beta gamma $& $1\n')
    expect(await editFileTool.execute({ path: 'e.txt', old_text: 'beta', new_text: 'B$&' }, ctx)).toEqual({ message: 'Successfully edited e.txt' })
    expect(await readFile(path.join(ctx.workspaceDir, 'e.txt'), 'utf8')).toBe('alpha B$& gamma $& $1\n')
  })

  it('refuses zero and several matches with the count, leaving the file unchanged', async () => {
    const ctx = await toolContext()
    await writeFile(path.join(ctx.workspaceDir, 't.txt'), 'x marks one x')
    await expect(editFileTool.execute({ path: 't.txt', old_text: 'x', new_text: 'y' }, ctx)).rejects.toMatchObject({ code: 'InvalidArgs', message: expect.stringMatching(/appears 2 times/) })
    await expect(editFileTool.execute({ path: 't.txt', old_text: 'zzz', new_text: 'y' }, ctx)).rejects.toMatchObject({ code: 'InvalidArgs', message: expect.stringMatching(/not found/) })
    expect(await codeOf(editFileTool.execute({ path: 't.txt', old_text: '', new_text: 'y' }, ctx))).toBe('InvalidArgs')
    expect(await readFile(path.join(ctx.workspaceDir, 't.txt'), 'utf8')).toBe('x marks one x')
    expect(await codeOf(editFileTool.execute({ path: 'ghost.txt', old_text: 'a', new_text: 'b' }, ctx))).toBe('FileNotFound')
  })

  it('keeps every other byte and the file\'s permissions; refuses a file that is not UTF-8, leaving it as it was', async () => {
    const ctx = await toolContext()
    const script = path.join(ctx.workspaceDir, 'run.sh')
    await writeFile(script, '\uFEFF#!/bin/sh\necho OLD\n', { mode: 0o750 })
    await chmod(script, 0o750)
    await editFileTool.execute({ path: 'run.sh', old_text: 'OLD', new_text: 'NEW' }, ctx)
    expect(await readFile(script, 'utf8')).toBe('\uFEFF#!/bin/sh\necho NEW\n')
    expect((await stat(script)).mode & 0o777).toBe(0o750)
    const binary = Buffer.from('caf\xe9 OLD \xff\xfe\x00\x01 end', 'latin1')
    await writeFile(path.join(ctx.workspaceDir, 'b.bin'), binary)
    await expect(editFileTool.execute({ path: 'b.bin', old_text: 'OLD', new_text: 'NEW' }, ctx)).rejects.toMatchObject({ code: 'InvalidArgs', message: expect.stringMatching(/not UTF-8/) })
    expect(await readFile(path.join(ctx.workspaceDir, 'b.bin'))).toEqual(binary)
  })

  it('answers a Unix socket as not a regular file (400), as every file tool does', async () => {
    const ctx = await toolContext()
    const server = net.createServer()
    await new Promise<void>((resolve) => server.listen(path.join(ctx.workspaceDir, 's.sock'), resolve))
    try {
      // Each call made when it is awaited: a second one made at once would reject unawaited.
      for (const use of [
        () => editFileTool.execute({ path: 's.sock', old_text: 'a', new_text: 'b' }, ctx),
        () => readFileTool.execute({ path: 's.sock' }, ctx),
      ]) await expect(use()).rejects.toMatchObject({ code: 'InvalidArgs', message: expect.stringMatching(/not a regular file/) })
    } finally {
      server.close()
    }
  })

  it('serialises concurrent edits of one file (no lost update)', async () => {
    const ctx = await toolContext()
    await writeFile(path.join(ctx.workspaceDir, 'c.txt'), 'A B C D E F')
    await Promise.all(['A', 'B', 'C', 'D', 'E', 'F'].map((letter) => editFileTool.execute({ path: 'c.txt', old_text: letter, new_text: letter.toLowerCase() }, ctx)))
    expect(await readFile(path.join(ctx.workspaceDir, 'c.txt'), 'utf8')).toBe('a b c d e f')
  })
})

describe('list_directory', () => {
  it('lists immediate children sorted, with is_dir and size', async () => {
    const ctx = await toolContext()
    await writeFile(path.join(ctx.workspaceDir, 'b.txt'), 'bb')
    await writeFile(path.join(ctx.workspaceDir, 'a.txt'), 'a')
    await mkdir(path.join(ctx.workspaceDir, 'c'))
    await writeFile(path.join(ctx.workspaceDir, 'c', 'inner.txt'), 'not listed')
    const { entries } = await listDirectoryTool.execute({ path: '.' }, ctx) as { entries: Array<{ name: string, is_dir: boolean, size: number }> }
    expect(entries.map((e) => [e.name, e.is_dir])).toEqual([['a.txt', false], ['b.txt', false], ['c', true]])
    expect(entries.slice(0, 2).map((e) => e.size)).toEqual([1, 2])
  })

  it('answers FileNotFound for a missing directory and InvalidArgs for a file', async () => {
    const ctx = await toolContext()
    await writeFile(path.join(ctx.workspaceDir, 'f'), 'x')
    expect(await codeOf(listDirectoryTool.execute({ path: 'no/such' }, ctx))).toBe('FileNotFound')
    expect(await codeOf(listDirectoryTool.execute({ path: 'f' }, ctx))).toBe('InvalidArgs')
    expect(await codeOf(listDirectoryTool.execute({ path: '..' }, ctx))).toBe('InvalidPath')
  })
})

describe('file tools through the app', () => {
  it('edit_file: 0 or several matches are 400 InvalidArgs naming the count; one match edits', async () => {
    const app = await buildTestApp()
    const ws = { workspace: 'edits' }
    await exec(app, 'write_file', { path: 'e.txt', content: 'one two two three three three' }, ws)
    const several = expectProblem(await exec(app, 'edit_file', { path: 'e.txt', old_text: 'three', new_text: '3' }, ws), 400, 'InvalidArgs', 'edit_file')
    expect(several['detail']).toMatch(/3 times/)
    const none = expectProblem(await exec(app, 'edit_file', { path: 'e.txt', old_text: 'four', new_text: '4' }, ws), 400, 'InvalidArgs', 'edit_file')
    expect(none['detail']).toMatch(/not found/)
    expect((await exec(app, 'edit_file', { path: 'e.txt', old_text: 'one', new_text: '1' }, ws)).body.result).toEqual({ message: 'Successfully edited e.txt' })
    expect((await exec(app, 'read_file', { path: 'e.txt' }, ws)).body.result).toEqual({ content: '1 two two three three three' })
    expectProblem(await exec(app, 'edit_file', { path: 'nope.txt', old_text: 'a', new_text: 'b' }, ws), 404, 'FileNotFound', 'edit_file')
  })

  it('list_directory: entries sorted by name (byte order), with name, is_dir and size only', async () => {
    const app = await buildTestApp()
    const ws = { workspace: 'listing' }
    for (const name of ['b.txt', 'B.txt', 'a/inner.txt', '_z']) await exec(app, 'write_file', { path: name, content: 'xyz' }, ws)
    const { entries } = (await exec(app, 'list_directory', { path: '.' }, ws)).body.result as { entries: Array<Record<string, unknown>> }
    expect(entries.map((entry) => entry['name'])).toEqual(['B.txt', '_z', 'a', 'b.txt'])
    for (const entry of entries) expect(Object.keys(entry)).toEqual(['name', 'is_dir', 'size'])
    expect(entries.find((entry) => entry['name'] === 'a')?.['is_dir']).toBe(true)
    expect(entries.find((entry) => entry['name'] === 'b.txt')).toEqual({ name: 'b.txt', is_dir: false, size: 3 })
    expect((await exec(app, 'list_directory', { path: 'a' }, ws)).body.result).toEqual({ entries: [{ name: 'inner.txt', is_dir: false, size: 3 }] })
  })
})
