import { execFileSync } from 'node:child_process'
import { link, mkdir, readFile, rm, symlink, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { memoryReadTool } from '../../src/tools/memory-read.ts'
import { memoryWriteTool } from '../../src/tools/memory-write.ts'
import { buildTestApp, exec } from '../helper.ts'
import { codeOf, toolContext } from '../support/context.ts'
import { tempDir } from '../support/temp.ts'

const P1 = '## Auth\nWe decided to use JWT tokens for authentication.'
const P2 = '## Storage\nPostgreSQL is the primary datastore.'
const P3 = 'Sessions expire after an hour; AUTHENTICATION is refreshed silently.'

describe('memory tools', () => {
  it('answers the seed object when there is no memory file', async () => {
    const ctx = await toolContext()
    expect(await memoryReadTool.execute({}, ctx)).toEqual({ content: '', message: 'No memory file found' })
    // The same answer with a query: there is nothing to search.
    expect(await memoryReadTool.execute({ query: 'anything' }, ctx)).toEqual({ content: '', message: 'No memory file found' })
  })

  it('appends with a blank-line separator and overwrites', async () => {
    const ctx = await toolContext()
    expect(await memoryWriteTool.execute({ content: 'alpha' }, ctx)).toEqual({ message: 'Successfully wrote 5 bytes to memory (mode: append)', path: 'memory/MEMORY.md' })
    await memoryWriteTool.execute({ content: 'beta\n' }, ctx)
    await memoryWriteTool.execute({ content: 'gamma' }, ctx)
    // Appending nothing adds nothing: no blank paragraph.
    expect(await memoryWriteTool.execute({ content: '' }, ctx)).toMatchObject({ message: 'Successfully wrote 0 bytes to memory (mode: append)' })
    expect(await memoryReadTool.execute({}, ctx)).toEqual({ content: 'alpha\n\nbeta\n\ngamma' })
    await memoryWriteTool.execute({ content: 'fresh', mode: 'overwrite' }, ctx)
    expect(await readFile(path.join(ctx.workspaceDir, 'memory', 'MEMORY.md'), 'utf8')).toBe('fresh')
  })

  it('refuses a memory that is not UTF-8, read whole or searched, as every file tool does (never U+FFFD an agent would write back)', async () => {
    const ctx = await toolContext()
    await mkdir(path.join(ctx.workspaceDir, 'memory'))
    await writeFile(path.join(ctx.workspaceDir, 'memory', 'MEMORY.md'), Buffer.concat([Buffer.from('note '), Buffer.from([0xff, 0xfe]), Buffer.from(' café')]))
    expect(await codeOf(memoryReadTool.execute({}, ctx))).toBe('InvalidArgs')
    expect(await codeOf(memoryReadTool.execute({ query: 'note' }, ctx))).toBe('InvalidArgs')
    // Cut inside a character at the result limit: the character is left out, not replaced.
    const small = await toolContext({ maxResultBytes: 1000 })
    await mkdir(path.join(small.workspaceDir, 'memory'))
    await writeFile(path.join(small.workspaceDir, 'memory', 'MEMORY.md'), 'é'.repeat(2000))
    expect((await memoryReadTool.execute({}, small) as { content: string }).content).toMatch(/^é+$/)
  })

  it('filters paragraphs case-insensitively', async () => {
    const ctx = await toolContext()
    await memoryWriteTool.execute({ content: `${P1}\n\n${P2}\n\n\n${P3}`, mode: 'overwrite' }, ctx)
    expect(await memoryReadTool.execute({ query: 'authentication' }, ctx)).toEqual({ query: 'authentication', matches: [P1, P3], count: 2 })
    expect(await memoryReadTool.execute({ query: 'kubernetes' }, ctx)).toEqual({ query: 'kubernetes', matches: [], count: 0 })
  })

  it('finds the same paragraphs as a whole-file reading would, across the chunks it reads in (CRLF, indented and whitespace-only lines)', async () => {
    const ctx = await toolContext()
    // Paragraphs of every length up to past a chunk, so that lines, paragraphs and the needle fall across chunk ends.
    const parts: string[] = []
    for (let i = 0; i < 400; i++) {
      const body = `${i % 3 === 0 ? '  ' : ''}note ${i} ${'x'.repeat((i * 997) % 70_000)}${i % 7 === 0 ? ' Needle-Here' : ''}`
      parts.push(i % 5 === 0 ? `${body}\r\nsecond line ${i}` : `${body}\nsecond line ${i}`)
    }
    // Lone carriage returns end lines too; and a \r\n split by the end of the first 64 KiB chunk is one line end.
    const content = `${'y'.repeat(65_529)}\r\n\r\nab\r\nneedle-here\r\ralpha\r\rbeta needle-here\r\n\n` +
      parts.map((part, i) => part + (i % 4 === 0 ? '\n \t \n' : i % 9 === 0 ? '\r\r' : '\n\n')).join('')
    await mkdir(path.join(ctx.workspaceDir, 'memory'))
    await writeFile(path.join(ctx.workspaceDir, 'memory', 'MEMORY.md'), content)
    // The reading it replaced: readline's lines (crlfDelay: Infinity), a blank one ending each paragraph.
    const expected = content.split(/\r\n|\r|\n/).reduce<{ all: string[], current: string[] }>((acc, line) => {
      if (line.trim() === '') { if (acc.current.length > 0) acc.all.push(acc.current.join('\n')); acc.current = [] } else acc.current.push(line)
      return acc
    }, { all: [], current: [] }).all.filter((paragraph) => paragraph.toLowerCase().includes('needle-here'))
    const big = await toolContext({ workspaceDir: ctx.workspaceDir, maxResultBytes: 50_000_000 })
    expect(await memoryReadTool.execute({ query: 'NEEDLE-here' }, big)).toEqual({ query: 'NEEDLE-here', matches: expected, count: expected.length })
    expect(expected.length).toBeGreaterThan(50)
  })

  it('finds a query across the pieces a long paragraph is read in, and refuses a query of more than 256 characters', async () => {
    const ctx = await toolContext()
    await mkdir(path.join(ctx.workspaceDir, 'memory'))
    // Many short lines, then the query split across the end of the first 64 KiB chunk.
    const before = `${'ab\n'.repeat(21_000)}${'z'.repeat(65_536 - 63_000 - 5)}`
    await writeFile(path.join(ctx.workspaceDir, 'memory', 'MEMORY.md'), `${before}NEEDLE-in-two\n\nother\n`)
    const big = await toolContext({ workspaceDir: ctx.workspaceDir, maxResultBytes: 1_000_000 })
    const found = await memoryReadTool.execute({ query: 'needle-IN' }, big) as { count: number, matches: string[] }
    expect(found.count).toBe(1)
    expect(found.matches[0]?.endsWith('NEEDLE-in-two')).toBe(true)
    const app = await buildTestApp()
    const long = await exec(app, 'memory_read', { query: 'q'.repeat(257) })
    expect(long.status).toBe(400)
    expect(long.body).toMatchObject({ code: 'InvalidArgs', detail: expect.stringMatching(/query.*256/) })
    expect((await exec(app, 'memory_read', { query: 'q'.repeat(256) })).status).toBe(200)
  })

  it('searches a memory of one 600 MB line in bounded memory, stops at its search limit or a cancellation, and says it was cut', async () => {
    const truncated: boolean[] = []
    const ctx = await toolContext({ markTruncated: () => { truncated.push(true) } })
    await mkdir(path.join(ctx.workspaceDir, 'memory'))
    // A sparse file: 600 MB of NUL bytes and no newline (a whole-line reader ends the process with a RangeError).
    execFileSync('truncate', ['-s', '600M', path.join(ctx.workspaceDir, 'memory', 'MEMORY.md')])
    expect(await memoryReadTool.execute({ query: 'anything' }, ctx)).toEqual({ query: 'anything', matches: [], count: 0 })
    expect(truncated).toEqual([true])
    // A paragraph that matches but goes on past the search limit is answered as far as it was read.
    const cut = await memoryReadTool.execute({ query: '\u0000' }, ctx) as { count: number, matches: string[] }
    expect(cut.count).toBe(1)
    expect(cut.matches[0]?.length).toBe(65_537)
    const cancelled = new AbortController()
    cancelled.abort()
    expect(await codeOf(memoryReadTool.execute({ query: 'anything' }, { ...ctx, signal: cancelled.signal }))).toBe('ExecutionFailed')
  })

  it('never loses a concurrent append', async () => {
    const ctx = await toolContext()
    await Promise.all(Array.from({ length: 50 }, (_, i) => memoryWriteTool.execute({ content: `fact ${i}` }, ctx)))
    const { content } = await memoryReadTool.execute({}, ctx) as { content: string }
    const facts = content.split('\n\n')
    expect(facts).toHaveLength(50)
    expect(new Set(facts).size).toBe(50)
  })

  it('refuses a memory directory that is a symlink leading outside', async () => {
    const ctx = await toolContext()
    const outside = await tempDir()
    await symlink(outside, path.join(ctx.workspaceDir, 'memory'))
    expect(await codeOf(memoryWriteTool.execute({ content: 'x' }, ctx))).toBe('InvalidPath')
    expect(await codeOf(memoryReadTool.execute({}, ctx))).toBe('InvalidPath')
    await mkdir(path.join(outside, 'x'))
  })

  it('follows links that stay inside the workspace when appending, as overwrite and read do', async () => {
    const ctx = await toolContext()
    await mkdir(path.join(ctx.workspaceDir, 'memory'))
    await writeFile(path.join(ctx.workspaceDir, 'notes.md'), 'kept')
    await symlink('../notes.md', path.join(ctx.workspaceDir, 'memory', 'MEMORY.md'))
    await memoryWriteTool.execute({ content: 'appended' }, ctx)
    expect(await readFile(path.join(ctx.workspaceDir, 'notes.md'), 'utf8')).toBe('kept\n\nappended')
    const other = await toolContext()
    await mkdir(path.join(other.workspaceDir, 'docs'))
    await symlink('docs', path.join(other.workspaceDir, 'memory'))
    await memoryWriteTool.execute({ content: 'in docs' }, other)
    expect(await readFile(path.join(other.workspaceDir, 'docs', 'MEMORY.md'), 'utf8')).toBe('in docs')
  })

  it('through the app: 50 parallel appends to a new workspace, none lost, each its own paragraph', async () => {
    const app = await buildTestApp()
    // No POST /v1/workspaces first: the first calls to a new id arrive together and create it once.
    const answers = await Promise.all(Array.from({ length: 50 }, (_, i) => exec(app, 'memory_write', { content: `note ${i}\nline two of ${i}` }, { workspace: 'mem' })))
    expect(answers.map((answer) => answer.status)).toEqual(Array(50).fill(200))
    expect(answers[7]?.body.result).toEqual({ message: `Successfully wrote ${'note 7\nline two of 7'.length} bytes to memory (mode: append)`, path: 'memory/MEMORY.md' })
    const { content } = (await exec(app, 'memory_read', {}, { workspace: 'mem' })).body.result as { content: string }
    const paragraphs = content.split('\n\n')
    expect(paragraphs).toHaveLength(50)
    expect(new Set(paragraphs)).toEqual(new Set(Array.from({ length: 50 }, (_, i) => `note ${i}\nline two of ${i}`)))
    const search = (await exec(app, 'memory_read', { query: 'LINE TWO OF 42' }, { workspace: 'mem' })).body.result
    expect(search).toEqual({ query: 'LINE TWO OF 42', matches: ['note 42\nline two of 42'], count: 1 })
  })

  it('through the app: overwrite replaces everything; the file lives at memory/MEMORY.md', async () => {
    const app = await buildTestApp()
    await exec(app, 'memory_write', { content: 'old' }, { workspace: 'mem2' })
    const answer = await exec(app, 'memory_write', { content: 'new\n', mode: 'overwrite' }, { workspace: 'mem2' })
    expect(answer.body.result).toEqual({ message: 'Successfully wrote 4 bytes to memory (mode: overwrite)', path: 'memory/MEMORY.md' })
    expect((await exec(app, 'read_file', { path: 'memory/MEMORY.md' }, { workspace: 'mem2' })).body.result).toEqual({ content: 'new\n' })
    await exec(app, 'memory_write', { content: 'appended' }, { workspace: 'mem2' })
    expect((await exec(app, 'memory_read', {}, { workspace: 'mem2' })).body.result).toEqual({ content: 'new\n\nappended' })
    expect((await exec(app, 'memory_write', { content: 'x', mode: 'replace' })).status).toBe(400)
  })

  it('refuses a MEMORY.md that is a FIFO or has other hard links, at once, in either direction', async () => {
    const app = await buildTestApp()
    await exec(app, 'memory_write', { content: 'first' }, { workspace: 'odd' })
    const dir = app.runtime.workspaces.get('default', 'odd').dir
    const memory = path.join(dir, 'memory', 'MEMORY.md')
    await rm(memory)
    execFileSync('mkfifo', [memory])
    // Without O_NONBLOCK these would hold a thread-pool thread until a writer or reader came.
    const appended = await exec(app, 'memory_write', { content: 'x'.repeat(100_000) }, { workspace: 'odd' })
    expect([appended.status, appended.body.code]).toEqual([400, 'InvalidArgs'])
    expect((await exec(app, 'memory_read', {}, { workspace: 'odd' })).status).toBe(400)
    await rm(memory)
    const outside = path.join(await tempDir(), 'elsewhere.md')
    await writeFile(outside, 'outside')
    await link(outside, memory)
    expect((await exec(app, 'memory_write', { content: 'y' }, { workspace: 'odd' })).body.code).toBe('InvalidPath')
    expect(await readFile(outside, 'utf8')).toBe('outside')
  })
})
