/**
 * What the file tools do to a file's content, through the app: a write and
 * an edit of one file never lose one another, long multi-byte names are
 * writable, bytes that are not UTF-8 are never read as U+FFFD, a path that
 * names a directory never becomes a file, a contained dangling link reads
 * as a missing file, and an append is refused only when it would not fit;
 * a write refused, by the quota or by a full disk, changes nothing.
 */
import { execFileSync } from 'node:child_process'
import { mkdir, readdir, readFile, readlink, stat, symlink, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { buildTestApp, exec, onCleanup, tempDir } from '../helper.ts'
import { expectProblem } from '../support/problem.ts'

const ALL = { tools: { builtin: ['*'] } }

async function workspaceDir (app: Awaited<ReturnType<typeof buildTestApp>>, id: string): Promise<string> {
  await exec(app, 'list_directory', { path: '.' }, { workspace: id })
  return app.runtime.workspaces.get('default', id).dir
}

describe('a write and an edit of one file at once', () => {
  for (const [writer, args] of [['write_file', { path: 'f.txt', content: 'REPLACED' }], ['write', { file_path: 'f.txt', content: 'REPLACED' }]] as const) {
    it(`${writer} is never lost to an edit that read the file before it`, async () => {
      const app = await buildTestApp(ALL)
      for (let round = 0; round < 5; round++) {
        await exec(app, 'write_file', { path: 'f.txt', content: `HEAD\n${'x'.repeat(20_000)}` }, { workspace: 'race' })
        const response = await app.inject({
          method: 'POST',
          url: '/v1/tool-calls',
          payload: { workspace: 'race', parallel: true, calls: [{ id: 'e', name: 'edit_file', arguments: { path: 'f.txt', old_text: 'HEAD', new_text: 'EDITED' } }, { id: 'w', name: writer, arguments: args }] },
        })
        expect(response.statusCode).toBe(200)
        // Whichever ran first, the write's content is what is left: an edit after it finds no HEAD.
        const content = await readFile(path.join(await workspaceDir(app, 'race'), 'f.txt'), 'utf8')
        expect(content, JSON.stringify(response.json()).slice(0, 400)).toBe('REPLACED')
      }
    })
  }
})

describe('names of up to 255 bytes in multi-byte characters', () => {
  it('are written, edited and overwritten by every writing tool', async () => {
    const app = await buildTestApp(ALL)
    for (const name of ['文'.repeat(69), '文'.repeat(85)]) {
      expect((await exec(app, 'write_file', { path: name, content: 'one' }, { workspace: 'names' })).status).toBe(200)
      expect((await exec(app, 'edit_file', { path: name, old_text: 'one', new_text: 'two' }, { workspace: 'names' })).status).toBe(200)
      expect((await exec(app, 'edit', { file_path: name, old_string: 'two', new_string: 'three' }, { workspace: 'names' })).status).toBe(200)
      expect((await exec(app, 'write', { file_path: name, content: 'four' }, { workspace: 'names' })).status).toBe(200)
      expect(await readFile(path.join(await workspaceDir(app, 'names'), name), 'utf8')).toBe('four')
    }
    expect((await readdir(await workspaceDir(app, 'names'))).sort()).toEqual(['文'.repeat(69), '文'.repeat(85)].sort())
  })
})

describe('text with a lone surrogate (half of a UTF-16 pair, which JSON can carry)', () => {
  it('is refused in every writing tool\'s arguments, sent as an object or as a string, the file left as it was', async () => {
    const app = await buildTestApp(ALL)
    const dir = await workspaceDir(app, 'halves')
    await writeFile(path.join(dir, 'f.txt'), 'kept')
    for (const [tool, args] of [
      ['write_file', { path: 'f.txt', content: 'a\ud800b' }],
      ['write', { file_path: 'f.txt', content: '\udc00' }],
      ['edit_file', { path: 'f.txt', old_text: 'kept', new_text: 'x\ud83d' }],
      // Half of a character, which could only ever match half of one in the file as text.
      ['edit', { file_path: 'f.txt', old_string: '\ud83d', new_string: '\ud83e' }],
      ['memory_write', { content: 'note \ud800' }],
      ['exec_shell', { command: 'printf \'\ud800\' > f.txt' }],
    ] as const) {
      const problem = expectProblem(await exec(app, tool, args, { workspace: 'halves' }), 400, 'BadRequest')
      expect(problem['detail']).toMatch(/not well-formed Unicode \(an unpaired surrogate/)
      const asString = await app.inject({ method: 'POST', url: `/v1/tools/${tool}/execute`, payload: { workspace: 'halves', arguments: JSON.stringify(args) } })
      expect(expectProblem({ status: asString.statusCode, body: asString.json(), headers: asString.headers }, 400, 'InvalidArgs', tool)['detail']).toMatch(/^arguments holds a string that is not well-formed Unicode/)
    }
    expect(await readFile(path.join(dir, 'f.txt'), 'utf8')).toBe('kept')
    expect(await readdir(dir)).toEqual(['f.txt'])
  })
})

describe('bytes that are not UTF-8', () => {
  it('are refused by read_file (whole or paged) and read, never shown as U+FFFD', async () => {
    const app = await buildTestApp(ALL)
    const dir = await workspaceDir(app, 'bin')
    await writeFile(path.join(dir, 'bin.dat'), Buffer.from('ab\xffcd\x00ef\n', 'latin1'))
    for (const [tool, args] of [['read_file', { path: 'bin.dat' }], ['read_file', { path: 'bin.dat', offset: 1, limit: 5 }], ['read', { file_path: 'bin.dat' }]] as const) {
      const problem = expectProblem(await exec(app, tool, args, { workspace: 'bin' }), 400, 'InvalidArgs', tool)
      expect(problem['detail']).toMatch(/bin\.dat is not UTF-8 text/)
    }
  })

  it('beyond what is read do not matter, nor a character the read limit cuts in two', async () => {
    const app = await buildTestApp({ ...ALL, limits: { max_result_bytes: 1000 } })
    const dir = await workspaceDir(app, 'cut')
    // 999 ASCII bytes, then a 4-byte character across the 1001-byte prefix that read_file reads, then bytes that are not UTF-8.
    await writeFile(path.join(dir, 'mixed.txt'), Buffer.concat([Buffer.from(`${'a'.repeat(999)}😀\nline two\n`), Buffer.from([0xff, 0xfe])]))
    const whole = await exec(app, 'read_file', { path: 'mixed.txt' }, { workspace: 'cut' })
    expect(whole.status, JSON.stringify(whole.body).slice(0, 300)).toBe(200)
    expect(whole.body.truncated).toBe(true)
    expect(JSON.stringify(whole.body.result)).toMatch(/^\{"_truncated_json":"\{\\"content\\":\\"a{50}/)
    expect(JSON.stringify(whole.body.result)).not.toContain('\uFFFD')
    const page = await exec(app, 'read_file', { path: 'mixed.txt', offset: 2, limit: 1 }, { workspace: 'cut' })
    expect(page.body.result).toEqual({ content: 'line two\n', offset: 2, lines: 1, next_offset: 3 })
  })
})

describe('a path whose last component is . or ..', () => {
  for (const [tool, key] of [['write_file', 'path'], ['write', 'file_path']] as const) {
    it(`names a directory: ${tool} refuses it and makes no file`, async () => {
      const app = await buildTestApp(ALL)
      const dir = await workspaceDir(app, 'dots')
      for (const userPath of ['nd/.', 'x/y/..', 'sub/./.', '.']) {
        const problem = expectProblem(await exec(app, tool, { [key]: userPath, content: 'c' }, { workspace: 'dots' }), 400, 'InvalidArgs', tool)
        expect(problem['detail']).toMatch(/names a directory|workspace itself/)
      }
      expect(await readdir(dir)).toEqual([])
    })
  }
})

describe('a dangling symbolic link whose target would be inside the workspace', () => {
  it('reads as a missing file (404), and a write creates its target, keeping the link', async () => {
    const app = await buildTestApp(ALL)
    const dir = await workspaceDir(app, 'links')
    await mkdir(path.join(dir, 'sub'))
    await symlink('target.txt', path.join(dir, 'link'))
    await symlink('../later/deep.txt', path.join(dir, 'sub', 'up'))
    await symlink('link', path.join(dir, 'chain'))
    for (const userPath of ['link', 'sub/up', 'chain']) {
      expectProblem(await exec(app, 'read_file', { path: userPath }, { workspace: 'links' }), 404, 'FileNotFound', 'read_file')
      expectProblem(await exec(app, 'read', { file_path: userPath }, { workspace: 'links' }), 404, 'FileNotFound', 'read')
    }
    expect((await exec(app, 'write_file', { path: 'chain', content: 'made' }, { workspace: 'links' })).status).toBe(200)
    expect(await readFile(path.join(dir, 'target.txt'), 'utf8')).toBe('made')
    expect(await readlink(path.join(dir, 'chain'))).toBe('link')
    expect((await exec(app, 'write', { file_path: 'sub/up', content: 'deep' }, { workspace: 'links' })).status).toBe(200)
    expect(await readFile(path.join(dir, 'later', 'deep.txt'), 'utf8')).toBe('deep')
    expect((await exec(app, 'read_file', { path: 'link' }, { workspace: 'links' })).body.result).toEqual({ content: 'made' })
  })

  it('leading outside stays InvalidPath, also through a chain of links', async () => {
    const app = await buildTestApp(ALL)
    const dir = await workspaceDir(app, 'out')
    await symlink('../../elsewhere/new.txt', path.join(dir, 'away'))
    await symlink('away', path.join(dir, 'via'))
    for (const userPath of ['away', 'via']) {
      expectProblem(await exec(app, 'read_file', { path: userPath }, { workspace: 'out' }), 400, 'InvalidPath')
      expectProblem(await exec(app, 'write_file', { path: userPath, content: 'x' }, { workspace: 'out' }), 400, 'InvalidPath')
    }
  })
})

describe('memory_write append against the quota', () => {
  it('is refused only when what it adds (its separator counted as needed) would not fit', async () => {
    const app = await buildTestApp({ workspaces: { max_bytes: 10_000 } })
    expect((await exec(app, 'memory_write', { content: 'a\n\n' }, { workspace: 'q' })).status).toBe(200)
    expect((await exec(app, 'write_file', { path: 'fill', content: 'x'.repeat(10_000 - 3 - 10) }, { workspace: 'q' })).status).toBe(200)
    // `a\n\n` needs no separator: ten more bytes bring the workspace to exactly its quota.
    expect((await exec(app, 'memory_write', { content: 'b'.repeat(10) }, { workspace: 'q' })).status).toBe(200)
    // Now a separator is needed, and one byte more does not fit.
    expectProblem(await exec(app, 'memory_write', { content: 'c' }, { workspace: 'q' }), 413, 'PayloadTooLarge', 'memory_write')
    expect(await readFile(path.join(await workspaceDir(app, 'q'), 'memory', 'MEMORY.md'), 'utf8')).toBe(`a\n\n${'b'.repeat(10)}`)
  })
})

describe('a write that is refused changes nothing', () => {
  it('over the quota, a write into directories still to be made makes none of them', async () => {
    const app = await buildTestApp({ ...ALL, workspaces: { max_bytes: 10_000 } })
    for (const [tool, args] of [['write_file', { path: 'deep/er/f.txt', content: 'x'.repeat(20_000) }], ['write', { file_path: 'deep/er/f.txt', content: 'x'.repeat(20_000) }], ['memory_write', { content: 'x'.repeat(20_000), mode: 'overwrite' }]] as const) {
      expectProblem(await exec(app, tool, args, { workspace: 'q' }), 413, 'PayloadTooLarge', tool)
    }
    expect(await readdir(await workspaceDir(app, 'q'))).toEqual([])
    expect((await exec(app, 'write_file', { path: 'deep/er/f.txt', content: 'fits' }, { workspace: 'q' })).status).toBe(200)
  })

  it('on a disk that fills up part-way, memory_write\'s append leaves the memory as it was, and makes no memory file where there was none', async () => {
    // A real full filesystem: a small tmpfs for the workspaces root.
    const volume = await tempDir('toolport-full-')
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=512k', 'tmpfs', volume])
    onCleanup(async () => { execFileSync('umount', ['-l', volume]) })
    const app = await buildTestApp({ workspaces: { root: path.join(volume, 'root') } })
    expect((await exec(app, 'memory_write', { content: '# notes\nkeep this', mode: 'overwrite' }, { workspace: 'm' })).status).toBe(200)
    const big = 'Y'.repeat(1024 * 1024)
    expectProblem(await exec(app, 'memory_write', { content: big }, { workspace: 'm' }), 500, 'ExecutionFailed', 'memory_write')
    expect(await readFile(path.join(await workspaceDir(app, 'm'), 'memory', 'MEMORY.md'), 'utf8')).toBe('# notes\nkeep this')
    expectProblem(await exec(app, 'memory_write', { content: big }, { workspace: 'new' }), 500, 'ExecutionFailed', 'memory_write')
    await expect(stat(path.join(await workspaceDir(app, 'new'), 'memory', 'MEMORY.md'))).rejects.toThrow(/ENOENT/)
  })
})
