/**
 * read_file: a file's contents, `{content}`. Reads no more of the file than
 * the result can carry. Beyond the seed, `offset` and `limit` (in lines) page
 * through a large file; such answers also say where the next page starts.
 */
import { createInterface } from 'node:readline'
import { Type } from '@sinclair/typebox'
import { defineBuiltin } from './define.ts'
import { existingPath, openContained, readPrefix } from './fs-helpers.ts'

const Parameters = Type.Object({
  path: Type.String({ description: 'File path to read (relative to the workspace)' }),
  offset: Type.Optional(Type.Integer({ minimum: 1, description: 'First line to return, counting from 1 (pages through large files)' })),
  limit: Type.Optional(Type.Integer({ minimum: 1, description: 'Maximum number of lines to return' })),
})

export const readFileTool = defineBuiltin({
  name: 'read_file',
  description: 'Read the contents of a file in the workspace. Use offset and limit (lines) to page through large files.',
  parameters: Parameters,
  async execute (args, ctx) {
    const absolute = await existingPath(ctx.workspaceDir, args.path)
    const { handle } = await openContained(ctx.workspaceDir, absolute, args.path)
    try {
      if (args.offset === undefined && args.limit === undefined) {
        // One byte more than the limit lets truncation see that there was more.
        const prefix = await readPrefix(handle, ctx.maxResultBytes + 1)
        return { content: prefix.toString('utf8') }
      }
      return await readLines(handle, args.offset ?? 1, args.limit ?? Number.MAX_SAFE_INTEGER, ctx.maxResultBytes)
    } finally {
      await handle.close()
    }
  },
})

async function readLines (handle: import('node:fs/promises').FileHandle, offset: number, limit: number, maxBytes: number): Promise<Record<string, unknown>> {
  const lines: string[] = []
  let lineNumber = 0
  let bytes = 0
  let more = false
  const reader = createInterface({ input: handle.createReadStream({ autoClose: false, start: 0 }), crlfDelay: Infinity })
  try {
    for await (const line of reader) {
      lineNumber++
      if (lineNumber < offset) continue
      if (lines.length >= limit || bytes + line.length + 1 > maxBytes) {
        more = true
        break
      }
      lines.push(line)
      bytes += Buffer.byteLength(line) + 1
    }
  } finally {
    reader.close()
  }
  const result: Record<string, unknown> = { content: lines.join('\n') + (lines.length > 0 && more ? '\n' : ''), offset, lines: lines.length }
  if (more) result['next_offset'] = offset + lines.length
  return result
}
