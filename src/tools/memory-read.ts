/**
 * memory_read: the memory file, whole or filtered to the paragraphs (blocks
 * separated by blank lines) that contain `query`, case-insensitively. The
 * file is streamed: a large memory is never loaded whole.
 */
import { createInterface } from 'node:readline'
import { Type } from '@sinclair/typebox'
import { defineBuiltin } from '../execution/define.ts'
import { openContained, readPrefix } from '../workspace-fs/read.ts'
import { resolveMemoryFile } from './memory-file.ts'

export const memoryReadTool = defineBuiltin({
  name: 'memory_read',
  description: 'Read long-term memory (memory/MEMORY.md in the workspace), optionally only the paragraphs that contain a query.',
  parameters: Type.Object({
    query: Type.Optional(Type.String({ description: 'Search query to filter paragraphs (case-insensitive)' })),
  }),
  outputSchema: Type.Union([
    Type.Object({ content: Type.String(), message: Type.String({ description: 'Why there is no content' }) }, { additionalProperties: false }),
    Type.Object({ content: Type.String({ description: 'The whole memory file' }) }, { additionalProperties: false }),
    Type.Object({
      query: Type.String(),
      matches: Type.Array(Type.String(), { description: 'The paragraphs that contain the query' }),
      count: Type.Integer({ minimum: 0 }),
    }, { additionalProperties: false }),
  ]),
  annotations: { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
  async execute (args, ctx) {
    const file = await resolveMemoryFile(ctx.workspaceDir)
    // clawft's answer, with or without a query.
    if (!file.exists) return { content: '', message: 'No memory file found' }
    const { handle } = await openContained(ctx.workspaceDir, file.absolute, 'memory/MEMORY.md')
    try {
      if (args.query === undefined) return { content: (await readPrefix(handle, ctx.maxResultBytes + 1)).toString('utf8') }
      const matches = await matchingParagraphs(handle, args.query, ctx.maxResultBytes)
      return { query: args.query, matches, count: matches.length }
    } finally {
      await handle.close()
    }
  },
})

async function matchingParagraphs (handle: import('node:fs/promises').FileHandle, query: string, budget: number): Promise<string[]> {
  const needle = query.toLowerCase()
  const matches: string[] = []
  let used = 0
  let paragraph: string[] = []
  const flush = (): void => {
    const text = paragraph.join('\n')
    paragraph = []
    if (text.trim() === '' || !text.toLowerCase().includes(needle) || used > budget) return
    matches.push(text)
    used += text.length
  }
  const reader = createInterface({ input: handle.createReadStream({ autoClose: false, start: 0 }), crlfDelay: Infinity })
  for await (const line of reader) {
    if (line.trim() === '') flush()
    else paragraph.push(line)
  }
  flush()
  return matches
}
