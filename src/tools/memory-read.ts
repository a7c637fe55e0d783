/**
 * memory_read: the memory file, whole or filtered to the paragraphs (blocks
 * separated by blank lines) that contain `query`, case-insensitively. The
 * file is read in chunks, and only as far as an answer needs: a large
 * memory (or one long line) is never loaded whole.
 */
import type { FileHandle } from 'node:fs/promises'
import { Type } from '@sinclair/typebox'
import { ToolError } from '../errors.ts'
import { defineBuiltin } from '../execution/define.ts'
import type { ToolContext } from '../execution/tool.ts'
import { openContained, readPrefix, utf8Pieces, utf8Text } from '../workspace-fs/read.ts'
import { resolveMemoryFile } from './memory-file.ts'

const MAX_QUERY_CHARS = 256

export const memoryReadTool = defineBuiltin({
  name: 'memory_read',
  description: 'Read long-term memory (memory/MEMORY.md in the workspace), optionally only the paragraphs that contain a query.',
  parameters: Type.Object({
    // A few words: a longer query only makes each line's search cost more (a search reads up to 64 MiB).
    query: Type.Optional(Type.String({ maxLength: MAX_QUERY_CHARS, description: 'Search query to filter paragraphs (case-insensitive)' })),
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
    const { handle } = await openContained(ctx.workspaceDir, file.absolute, MEMORY_PATH)
    try {
      if (args.query === undefined) {
        const read = await readPrefix(handle, ctx.maxResultBytes + 2)
        // A file larger than the limit and a byte was read in part (one byte more lets truncation see that there was more).
        const cut = read.length > ctx.maxResultBytes + 1
        if (cut) ctx.markTruncated?.()
        // UTF-8 only, as every file tool reads: U+FFFD in place of other bytes would be written back so.
        return { content: utf8Text(read.subarray(0, ctx.maxResultBytes + 1), MEMORY_PATH, cut) }
      }
      const matches = await matchingParagraphs(handle, args.query, ctx.maxResultBytes, ctx)
      return { query: args.query, matches, count: matches.length }
    } finally {
      await handle.close()
    }
  },
})

const MEMORY_PATH = 'memory/MEMORY.md'

/** How much of the memory file a search reads at most: a memory is notes, and a search must end. */
const MAX_SEARCHED_BYTES = 64 * 1024 * 1024
const CHUNK_BYTES = 64 * 1024

/**
 * The paragraphs of the file that contain `needle`, as long as they fit
 * `budget` characters together. Read in chunks, never a whole line or
 * paragraph at once: a paragraph keeps at most `budget` characters of its
 * text (the answer could hold no more), and its search for the needle
 * goes on past them. Reading stops once the answer is full, at
 * MAX_SEARCHED_BYTES, or when the call is cancelled; a search cut short
 * marks the answer truncated.
 */
async function matchingParagraphs (handle: FileHandle, query: string, budget: number, ctx: ToolContext): Promise<string[]> {
  const needle = query.toLowerCase()
  const matches: string[] = []
  let used = 0
  // The paragraph being read: its text kept so far, whether it has a line that is not blank, whether it holds the needle.
  let kept = ''
  let cut = false
  let hasText = false
  let found = false
  /** The paragraph's last characters, lowercased: the needle may straddle two pieces. */
  let tail = ''
  // The line being read: whether it has shown something but whitespace, and the whitespace it began with.
  let lineHasText = false
  let leading = ''
  const add = (piece: string): void => {
    if (piece === '') return
    if (!found && needle !== '') {
      const lowered = tail + piece.toLowerCase()
      found = lowered.includes(needle)
      tail = lowered.slice(-(needle.length - 1) || lowered.length)
    }
    if (piece.length > budget + 1 - kept.length) cut = true
    if (kept.length <= budget) kept += piece.slice(0, budget + 1 - kept.length)
  }
  const endParagraph = (): void => {
    if (hasText && (found || needle === '') && used <= budget) {
      matches.push(kept)
      used += kept.length
      if (cut) ctx.markTruncated?.()
    }
    kept = ''
    cut = false
    hasText = false
    found = false
    tail = ''
  }
  const decode = utf8Pieces(MEMORY_PATH)
  const buffer = Buffer.alloc(CHUNK_BYTES)
  let position = 0
  let afterCarriageReturn = false
  for (;;) {
    if (ctx.signal.aborted) throw new ToolError('ExecutionFailed', 'the call was cancelled')
    if (used > budget || position >= MAX_SEARCHED_BYTES) {
      // The paragraph under way, as far as it was read, if it matched.
      endParagraph()
      ctx.markTruncated?.()
      return matches
    }
    const { bytesRead } = await handle.read(buffer, 0, CHUNK_BYTES, position)
    if (bytesRead === 0) break
    position += bytesRead
    // Lines end as readline ends them: at \n, \r\n or a lone \r, one \r\n across two chunks included.
    let text = decode(buffer.subarray(0, bytesRead), true)
    if (afterCarriageReturn && text.startsWith('\n')) text = text.slice(1)
    if (text !== '') afterCarriageReturn = text.endsWith('\r')
    const lines = text.split(/\r\n|\r|\n/)
    lines.forEach((line, index) => {
      const endsLine = index < lines.length - 1
      if (lineHasText) {
        add(line)
      } else {
        const first = line.search(/\S/)
        if (first === -1) {
          if (leading.length <= budget) leading += line
        } else {
          add(`${hasText ? '\n' : ''}${leading}${line}`)
          lineHasText = true
          hasText = true
          leading = ''
        }
      }
      if (endsLine) {
        // A blank line ends the paragraph.
        if (!lineHasText) endParagraph()
        lineHasText = false
        leading = ''
      }
    })
  }
  add(decode(new Uint8Array(), false))
  endParagraph()
  return matches
}
