import { mkdir, readFile, symlink } from 'node:fs/promises'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { memoryReadTool } from '../../src/tools/memory-read.ts'
import { memoryWriteTool } from '../../src/tools/memory-write.ts'
import { codeOf, toolContext } from '../support/context.ts'
import { tempDir } from '../support/temp.ts'

const P1 = '## Auth\nWe decided to use JWT tokens for authentication.'
const P2 = '## Storage\nPostgreSQL is the primary datastore.'
const P3 = 'Sessions expire after an hour; AUTHENTICATION is refreshed silently.'

describe('memory tools', () => {
  it('answers the seed object when there is no memory file', async () => {
    const ctx = await toolContext()
    expect(await memoryReadTool.execute({}, ctx)).toEqual({ content: '', message: 'No memory file found' })
  })

  it('appends with a blank-line separator and overwrites', async () => {
    const ctx = await toolContext()
    expect(await memoryWriteTool.execute({ content: 'alpha' }, ctx)).toEqual({ message: 'Successfully wrote 5 bytes to memory (mode: append)', path: 'memory/MEMORY.md' })
    await memoryWriteTool.execute({ content: 'beta\n' }, ctx)
    await memoryWriteTool.execute({ content: 'gamma' }, ctx)
    expect(await memoryReadTool.execute({}, ctx)).toEqual({ content: 'alpha\n\nbeta\n\ngamma' })
    await memoryWriteTool.execute({ content: 'fresh', mode: 'overwrite' }, ctx)
    expect(await readFile(path.join(ctx.workspaceDir, 'memory', 'MEMORY.md'), 'utf8')).toBe('fresh')
  })

  it('filters paragraphs case-insensitively', async () => {
    const ctx = await toolContext()
    await memoryWriteTool.execute({ content: `${P1}\n\n${P2}\n\n\n${P3}`, mode: 'overwrite' }, ctx)
    expect(await memoryReadTool.execute({ query: 'authentication' }, ctx)).toEqual({ query: 'authentication', matches: [P1, P3], count: 2 })
    expect(await memoryReadTool.execute({ query: 'kubernetes' }, ctx)).toEqual({ query: 'kubernetes', matches: [], count: 0 })
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
})
