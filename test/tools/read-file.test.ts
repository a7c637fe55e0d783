import { open, truncate, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { readFileTool } from '../../src/tools/read-file.ts'
import { buildTestApp, exec } from '../helper.ts'
import { codeOf, toolContext } from '../support/context.ts'
import { expectProblem } from '../support/problem.ts'

type Page = { content: string, offset: number, lines: number, next_offset?: number, line_truncated?: true }

const jsonBytes = (value: unknown) => Buffer.byteLength(JSON.stringify(value))
const TWO_GB = 2 * 1024 ** 3

/** Follows next_offset from line 1 to the end; answers the pages. */
async function allPages (read: (offset: number) => Promise<Page>): Promise<Page[]> {
  const pages: Page[] = []
  let offset: number | undefined = 1
  while (offset !== undefined) {
    const page = await read(offset)
    pages.push(page)
    offset = page.next_offset
    if (pages.length > 10_000) throw new Error('paging does not end')
  }
  return pages
}

describe('read_file paging (offset and limit, in lines)', () => {
  it('answers the lines asked for, byte for byte, and where the next page starts', async () => {
    const ctx = await toolContext()
    const text = 'één\r\ntwo\n\nfour ✓\nfive'
    await writeFile(path.join(ctx.workspaceDir, 'f.txt'), text)
    const read = (args: Record<string, unknown>) => readFileTool.execute({ path: 'f.txt', ...args }, ctx)
    expect(await read({ limit: 2 })).toEqual({ content: 'één\r\ntwo\n', offset: 1, lines: 2, next_offset: 3 })
    expect(await read({ offset: 3, limit: 1 })).toEqual({ content: '\n', offset: 3, lines: 1, next_offset: 4 })
    expect(await read({ offset: 4 })).toEqual({ content: 'four ✓\nfive', offset: 4, lines: 2 })
    // A limit that ends exactly at the end of the file: no next page.
    expect(await read({ offset: 4, limit: 2 })).toEqual({ content: 'four ✓\nfive', offset: 4, lines: 2 })
    expect(await read({ offset: 99 })).toEqual({ content: '', offset: 99, lines: 0 })
    const pages = await allPages((offset) => read({ offset, limit: 2 }) as Promise<Page>)
    expect(pages.map((page) => page.content).join('')).toBe(text)
  })

  it('cuts a page at a line boundary to fit the result limit, so paging still reaches the end', async () => {
    const ctx = await toolContext({ maxResultBytes: 2048 })
    const lines = Array.from({ length: 500 }, (_, i) => `${String(i + 1).padStart(3, '0')} "quoted"\ttab ${'x'.repeat(60)}\n`)
    await writeFile(path.join(ctx.workspaceDir, 'long.txt'), lines.join(''))
    const first = await readFileTool.execute({ path: 'long.txt', limit: 1000 }, ctx) as Page
    expect(jsonBytes(first)).toBeLessThanOrEqual(2048)
    expect(first.lines).toBeGreaterThan(10)
    expect(first.content).toBe(lines.slice(0, first.lines).join(''))
    expect(first.next_offset).toBe(first.lines + 1)
    const pages = await allPages((offset) => readFileTool.execute({ path: 'long.txt', offset, limit: 1000 }, ctx) as Promise<Page>)
    for (const page of pages) expect(jsonBytes(page)).toBeLessThanOrEqual(2048)
    expect(pages.map((page) => page.content).join('')).toBe(lines.join(''))
  })

  it('fits lines whose JSON escapes are many times their bytes', async () => {
    const ctx = await toolContext({ maxResultBytes: 1024 })
    const line = '\u0001'.repeat(100) + '\n'
    await writeFile(path.join(ctx.workspaceDir, 'ctl.txt'), line.repeat(20))
    const page = await readFileTool.execute({ path: 'ctl.txt', limit: 20 }, ctx) as Page
    expect(jsonBytes(page)).toBeLessThanOrEqual(1024)
    expect(page.lines).toBe(1)
    expect(page).toMatchObject({ content: line, next_offset: 2 })
  })

  it('cuts a first line longer than the limit (at a character boundary) and moves past it', async () => {
    const ctx = await toolContext({ maxResultBytes: 1000 })
    await writeFile(path.join(ctx.workspaceDir, 'wide.txt'), '✓'.repeat(5000) + '\nafter\n')
    const page = await readFileTool.execute({ path: 'wide.txt', limit: 5 }, ctx) as Page
    expect(page).toMatchObject({ offset: 1, lines: 1, next_offset: 2, line_truncated: true })
    expect(page.content).toMatch(/^✓+$/)
    expect(jsonBytes(page)).toBeLessThanOrEqual(1000)
    expect(await readFileTool.execute({ path: 'wide.txt', offset: 2 }, ctx)).toEqual({ content: 'after\n', offset: 2, lines: 1 })
  })

  it('cuts a first line whose character at the cut began in the chunk read before (64 KiB reads)', async () => {
    const ctx = await toolContext()
    // 'é' straddles the first 64 KiB read, and a cut at the default limit falls in the second: the line is valid UTF-8 throughout.
    for (const [name, bytes] of [
      ['two.txt', Buffer.concat([Buffer.alloc(65535, 'a'), Buffer.from('é'), Buffer.alloc(1000, 'b')])],
      ['three.txt', Buffer.concat([Buffer.alloc(65534, 'a'), Buffer.from('€'), Buffer.alloc(1000, 'b')])],
    ] as const) {
      await writeFile(path.join(ctx.workspaceDir, name), bytes)
      for (const maxBytes of [65536, 65600]) {
        const page = await readFileTool.execute({ path: name, offset: 1 }, { ...ctx, maxResultBytes: maxBytes }) as Page
        expect(page).toMatchObject({ offset: 1, lines: 1, line_truncated: true })
        expect(page.content).toMatch(/^a+(é|€)?b*$/)
        expect(jsonBytes(page)).toBeLessThanOrEqual(maxBytes)
      }
    }
  })

  it('refuses offset and limit below 1 as InvalidArgs', async () => {
    const app = await buildTestApp()
    expectProblem(await exec(app, 'read_file', { path: 'x', offset: 0 }), 400, 'InvalidArgs', 'read_file')
    expectProblem(await exec(app, 'read_file', { path: 'x', limit: 0 }), 400, 'InvalidArgs', 'read_file')
    expectProblem(await exec(app, 'read_file', { path: 'x', limit: 1.5 }), 400, 'InvalidArgs', 'read_file')
  })
})

describe('read_file on a 2 GB file', () => {
  it('reads only what the result needs: memory stays bounded, the answer capped', async () => {
    const ctx = await toolContext()
    const file = path.join(ctx.workspaceDir, 'huge.bin')
    await writeFile(file, 'first line\nsecond line\n')
    // Sparse: 2 GB of file, no 2 GB of disk. After the two lines, one 2 GB line of NUL bytes.
    await truncate(file, TWO_GB)
    const before = process.memoryUsage().rss
    let peak = before
    const sample = (): void => { peak = Math.max(peak, process.memoryUsage().rss) }

    const whole = await readFileTool.execute({ path: 'huge.bin' }, ctx) as { content: string }
    sample()
    expect(whole.content.length).toBe(65_537)
    expect(await readFileTool.execute({ path: 'huge.bin', limit: 2 }, ctx)).toEqual({ content: 'first line\nsecond line\n', offset: 1, lines: 2, next_offset: 3 })
    sample()
    const long = await readFileTool.execute({ path: 'huge.bin', offset: 3, limit: 1 }, ctx) as Page
    sample()
    expect(long).toMatchObject({ offset: 3, lines: 1, next_offset: 4, line_truncated: true })
    expect(jsonBytes(long)).toBeLessThanOrEqual(65_536)

    expect(peak - before).toBeLessThan(64 * 1024 * 1024)
  })

  it('stops reading toward a far offset once the call is cancelled (its client gone)', async () => {
    const cancel = new AbortController()
    const ctx = await toolContext({ signal: cancel.signal })
    const file = path.join(ctx.workspaceDir, 'lines.txt')
    // Half a GiB of empty lines: reaching an offset past them reads them all, line by line.
    await writeFile(file, '\n'.repeat(1024 * 1024))
    await truncate(file, 512 * 1024 ** 2)
    const reading = codeOf(readFileTool.execute({ path: 'lines.txt', offset: 2_000_000_000 }, ctx))
    setTimeout(() => { cancel.abort() }, 50)
    expect(await reading).toBe('ExecutionFailed')
  })

  it('through the app: a capped answer marked truncated', async () => {
    const app = await buildTestApp()
    await exec(app, 'write_file', { path: 'huge.bin', content: 'start' }, { workspace: 'big' })
    const info = await app.inject({ method: 'GET', url: '/v1/workspaces/big' })
    expect(info.statusCode).toBe(200)
    // Find the workspace directory through a process tool, then make the file sparse-huge.
    const pwd = (await exec(app, 'exec_shell', { command: 'pwd' }, { workspace: 'big' })).body.result.stdout.trim()
    const handle = await open(path.join(pwd, 'huge.bin'), 'r+')
    await handle.truncate(TWO_GB)
    await handle.close()
    const answer = await exec(app, 'read_file', { path: 'huge.bin' }, { workspace: 'big' })
    expect(answer.status).toBe(200)
    expect(answer.body.truncated).toBe(true)
    expect(jsonBytes(answer.body.result)).toBeLessThanOrEqual(65_536)
    const paged = await exec(app, 'read_file', { path: 'huge.bin', limit: 3 }, { workspace: 'big' })
    expect(paged.body).toMatchObject({ truncated: true, result: { offset: 1, lines: 1, next_offset: 2, line_truncated: true } })
    expect(paged.body.result.content.startsWith('start\u0000')).toBe(true)
  })

  it('answers FileNotFound and InvalidPath as usual when paging', async () => {
    const ctx = await toolContext()
    expect(await codeOf(readFileTool.execute({ path: 'missing.txt', limit: 3 }, ctx))).toBe('FileNotFound')
    expect(await codeOf(readFileTool.execute({ path: '../escape.txt', offset: 2 }, ctx))).toBe('InvalidPath')
  })
})
