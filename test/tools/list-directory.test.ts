/**
 * list_directory of a directory with more entries than any answer holds:
 * bounded by the result limit, leading entries by name, and saying it was cut.
 */
import { mkdirSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { listDirectoryTool } from '../../src/tools/list-directory.ts'
import { buildTestApp, exec } from '../helper.ts'
import { toolContext } from '../support/context.ts'

const ENTRIES = 50_000

function fill (dir: string): string[] {
  const names: string[] = []
  for (let i = 0; i < ENTRIES; i++) names.push(`f${String((i * 7919) % ENTRIES).padStart(5, '0')}.txt`)
  for (const name of names) writeFileSync(path.join(dir, name), 'x')
  return names.sort()
}

describe('list_directory of 50,000 entries', () => {
  it('answers the first entries by name within the result limit, and says it was cut', async () => {
    let cut = false
    const ctx = await toolContext({ maxResultBytes: 65_536, markTruncated: () => { cut = true } })
    mkdirSync(path.join(ctx.workspaceDir, 'big'))
    const names = fill(path.join(ctx.workspaceDir, 'big'))
    const result = await listDirectoryTool.execute({ path: 'big' }, ctx) as { entries: Array<{ name: string, size: number }>, truncated: boolean, total_entries: number }
    expect(Buffer.byteLength(JSON.stringify(result))).toBeLessThanOrEqual(65_536)
    expect(result.truncated).toBe(true)
    expect(result.total_entries).toBe(ENTRIES)
    expect(cut).toBe(true)
    expect(result.entries.length).toBeGreaterThan(1000)
    expect(result.entries.map((entry) => entry.name)).toEqual(names.slice(0, result.entries.length))
    expect(result.entries[0]).toEqual({ name: 'f00000.txt', is_dir: false, size: 1 })
  })

  it('lists an entry whose name is not UTF-8 as what it is, its name shown with U+FFFD and marked so', async () => {
    const ctx = await toolContext()
    const at = (name: string) => Buffer.concat([Buffer.from(`${ctx.workspaceDir}/`), Buffer.from(name, 'latin1')])
    writeFileSync(at('caf\xe9.txt'), 'abc')
    writeFileSync(`${ctx.workspaceDir}/caf\uFFFD.txt`, 'real')
    mkdirSync(at('dir\xff'))
    expect(await listDirectoryTool.execute({ path: '.' }, ctx)).toEqual({
      entries: [
        { name: 'caf\uFFFD.txt', is_dir: false, size: 3, name_not_utf8: true },
        { name: 'caf\uFFFD.txt', is_dir: false, size: 4 },
        { name: 'dir\uFFFD', is_dir: true, size: expect.any(Number), name_not_utf8: true },
      ],
    })
  })

  it('keeps to a smaller limit asked by the caller, through the app', async () => {
    const app = await buildTestApp()
    await exec(app, 'write_file', { path: 'big/.keep', content: '' }, { workspace: 'wide' })
    fill(path.join(app.runtime.workspaces.get('default', 'wide').dir, 'big'))
    const answer = await exec(app, 'list_directory', { path: 'big' }, { workspace: 'wide', max_result_bytes: 4096 })
    expect(answer.status).toBe(200)
    expect(answer.body.truncated).toBe(true)
    expect(Buffer.byteLength(JSON.stringify(answer.body.result))).toBeLessThanOrEqual(4096)
    expect(answer.body.result).toMatchObject({ truncated: true, total_entries: ENTRIES + 1 })
    expect(answer.body.result.entries[0]).toEqual({ name: '.keep', is_dir: false, size: 0 })
  })
})
