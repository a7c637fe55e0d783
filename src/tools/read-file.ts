/**
 * read_file: a file's contents, `{content}`. Reads no more of the file than
 * the result can carry. Beyond clawft's read_file, `offset` and `limit` (in lines) page
 * through a large file: such an answer is cut to fit the result limit at a
 * line boundary and says where the next page starts.
 */
import type { FileHandle } from 'node:fs/promises'
import { type Static, Type } from '@sinclair/typebox'
import { ToolError } from '../errors.ts'
import { defineBuiltin } from '../execution/define.ts'
import { fitString } from '../execution/truncate.ts'
import { checkedStat, openForReading, readPrefix, utf8Text } from '../workspace-fs/read.ts'

/** Bytes read at a time while looking for line ends. */
const CHUNK_BYTES = 64 * 1024

const Parameters = Type.Object({
  path: Type.String({ description: 'File path to read (relative to the workspace)' }),
  offset: Type.Optional(Type.Integer({ minimum: 1, description: 'First line to return, counting from 1 (pages through large files)' })),
  limit: Type.Optional(Type.Integer({ minimum: 1, description: 'Maximum number of lines to return' })),
})

/** The whole file's text; with offset or limit, a page of lines and where the next one starts. */
const Output = Type.Object({
  content: Type.String({ description: 'The text read' }),
  offset: Type.Optional(Type.Integer({ minimum: 1, description: 'The page\'s first line (paging only)' })),
  lines: Type.Optional(Type.Integer({ minimum: 0, description: 'Lines in the page (paging only)' })),
  next_offset: Type.Optional(Type.Integer({ minimum: 1, description: 'Where the next page starts, when there is more' })),
  line_truncated: Type.Optional(Type.Literal(true, { description: 'The page\'s one line was longer than the result limit and was cut' })),
}, { additionalProperties: false })

export const readFileTool = defineBuiltin({
  name: 'read_file',
  description: 'Read the contents of a file in the workspace. Use offset and limit (lines) to page through large files.',
  parameters: Parameters,
  outputSchema: Output,
  annotations: { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
  async execute (args, ctx) {
    const handle = await openForReading(ctx.workspaceDir, args.path)
    const stat = await checkedStat(handle, args.path)
    try {
      if (args.offset === undefined && args.limit === undefined) {
        // One byte more than the limit lets truncation see that there was more; a file larger still was read in part.
        if (stat.size > ctx.maxResultBytes + 1) ctx.markTruncated?.()
        return { content: utf8Text(await readPrefix(handle, ctx.maxResultBytes + 1, stat.size), args.path, stat.size > ctx.maxResultBytes + 1) }
      }
      const offset = args.offset ?? 1
      const page = await collectPage(handle, offset, args.limit ?? Number.MAX_SAFE_INTEGER, ctx.maxResultBytes, ctx.signal)
      const result = fitPage(page, offset, ctx.maxResultBytes, args.path)
      if (result.line_truncated === true) ctx.markTruncated?.()
      return result
    } finally {
      await handle.close()
    }
  },
})

/** Lines of one page, each with its line end; `cutLine`: the only line was longer than the budget. */
interface Page { lines: Buffer[], more: boolean, cutLine: boolean }

/**
 * Lines offset..offset+limit-1 (with their line ends), read in chunks and
 * keeping at most `maxBytes` of them: earlier lines are counted, never kept,
 * and a first line longer than the budget is cut. A file of one 2 GB line
 * costs a chunk and the budget, not 2 GB. Reaching a far offset reads
 * every line before it, so a call that is cancelled (its client gone)
 * stops between chunks.
 */
async function collectPage (handle: FileHandle, offset: number, limit: number, maxBytes: number, signal: AbortSignal): Promise<Page> {
  const chunk = Buffer.alloc(CHUNK_BYTES)
  const lines: Buffer[] = []
  let current: Buffer[] = []
  let currentBytes = 0
  let kept = 0
  let lineNumber = 1
  let position = 0
  for (;;) {
    if (signal.aborted) throw new ToolError('ExecutionFailed', 'the call was cancelled')
    const { bytesRead } = await handle.read(chunk, 0, CHUNK_BYTES, position)
    if (bytesRead === 0) break
    position += bytesRead
    const data = chunk.subarray(0, bytesRead)
    let start = 0
    while (start < data.length) {
      const newline = data.indexOf(10, start)
      const end = newline === -1 ? data.length : newline + 1
      if (lineNumber >= offset) {
        const piece = data.subarray(start, end)
        if (kept + currentBytes + piece.length > maxBytes) {
          if (lines.length > 0) return { lines, more: true, cutLine: false }
          // Cut in the whole line: a character may have begun in the chunk before.
          const line = Buffer.concat([...current, piece])
          return { lines: [line.subarray(0, utf8Boundary(line, maxBytes))], more: true, cutLine: true }
        }
        current.push(Buffer.from(piece))
        currentBytes += piece.length
      }
      start = end
      if (newline === -1) break
      if (lineNumber >= offset) {
        lines.push(Buffer.concat(current))
        kept += currentBytes
        current = []
        currentBytes = 0
        if (lines.length >= limit) return { lines, more: end < data.length || await hasByteAt(handle, position), cutLine: false }
      }
      lineNumber++
    }
  }
  if (currentBytes > 0) lines.push(Buffer.concat(current))
  return { lines, more: false, cutLine: false }
}

/** The largest cut ≤ `at` that does not split a UTF-8 character. */
function utf8Boundary (bytes: Buffer, at: number): number {
  let cut = Math.max(0, Math.min(at, bytes.length))
  while (cut > 0 && cut < bytes.length && ((bytes[cut] as number) & 0xc0) === 0x80) cut--
  return cut
}

async function hasByteAt (handle: FileHandle, position: number): Promise<boolean> {
  const { bytesRead } = await handle.read(Buffer.alloc(1), 0, 1, position)
  return bytesRead > 0
}

/**
 * The page as a result whose JSON fits in `maxBytes` (escapes can make JSON
 * larger than the raw bytes): the longest run of whole lines that fits,
 * or, when not even the first line does, that line cut.
 */
function fitPage (page: Page, offset: number, maxBytes: number, userPath: string): Static<typeof Output> {
  const texts = page.lines.map((line) => utf8Text(line, userPath))
  const result = (count: number, more: boolean, content = texts.slice(0, count).join('')): Static<typeof Output> => ({
    content, offset, lines: count, ...(more ? { next_offset: offset + count } : {}),
  })
  const fits = (count: number): boolean => Buffer.byteLength(JSON.stringify(result(count, true))) <= maxBytes
  if (!page.cutLine && (texts.length === 0 || fits(texts.length))) return result(texts.length, page.more)
  let low = 0
  let high = page.cutLine ? 0 : texts.length - 1
  while (low < high) {
    const mid = Math.ceil((low + high) / 2)
    if (fits(mid)) low = mid
    else high = mid - 1
  }
  if (low > 0) return result(low, true)
  // Not even the first line fits whole: its start, and the next page begins after it.
  const room = maxBytes - Buffer.byteLength(JSON.stringify({ ...result(1, true, ''), line_truncated: true }))
  return { ...result(1, true, fitString(texts[0] ?? '', room + 2)), line_truncated: true as const }
}
