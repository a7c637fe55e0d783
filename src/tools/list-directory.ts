/**
 * list_directory: the immediate children of a directory, sorted by name, with
 * is_dir and size.
 *
 * A directory may hold more entries than any answer can: the names are read
 * one directory block at a time (opendir), keeping only the first few by
 * name that can fit the result limit, and only those are measured. A cut
 * listing keeps its leading entries and says so (`truncated`,
 * `total_entries`), and the answer's `truncated` turns true, as for any
 * result cut to its limit (execution/truncate.ts).
 */
import { isUtf8 } from 'node:buffer'
import { lstat, opendir } from 'node:fs/promises'
import path from 'node:path'
import { Type } from '@sinclair/typebox'
import { openContainedDirectory } from '../workspace-fs/open.ts'
import { ToolError } from '../errors.ts'
import { defineBuiltin } from '../execution/define.ts'
import { fsError } from '../workspace-fs/errors.ts'
import { existingPath } from '../workspace-fs/read.ts'

interface Entry {
  name: string
  is_dir: boolean
  size: number
  name_not_utf8?: true
}

/** The JSON of the smallest entry, `{"name":"x","is_dir":false,"size":0}`, and its comma. */
const SMALLEST_ENTRY_BYTES = 38
/** Entries measured at once. */
const LSTATS_AT_ONCE = 64

export const listDirectoryTool = defineBuiltin({
  name: 'list_directory',
  description: 'List the immediate children of a directory in the workspace, sorted by name, with is_dir and size.',
  parameters: Type.Object({
    path: Type.String({ description: 'Directory path to list (relative to the workspace; "." for the workspace itself)' }),
  }),
  outputSchema: Type.Object({
    entries: Type.Array(Type.Object({
      name: Type.String(),
      is_dir: Type.Boolean(),
      size: Type.Integer({ minimum: 0, description: 'Bytes (of the link itself, for a symlink)' }),
      name_not_utf8: Type.Optional(Type.Literal(true, { description: 'The name\'s bytes are not UTF-8: it is shown with U+FFFD for them, which no file tool can name (a command can)' })),
    }, { additionalProperties: false })),
    truncated: Type.Optional(Type.Literal(true, { description: 'Only the leading entries fit the result limit' })),
    total_entries: Type.Optional(Type.Integer({ minimum: 0, description: 'Entries in the directory, when the listing was cut' })),
  }, { additionalProperties: false }),
  annotations: { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
  async execute (args, ctx) {
    const absolute = await existingPath(ctx.workspaceDir, args.path)
    let dir
    try {
      dir = await openContainedDirectory(ctx.workspaceDir, path.relative(ctx.workspaceDir, absolute), args.path)
    } catch (error) {
      throw (error as NodeJS.ErrnoException).code === 'ENOTDIR' ? new ToolError('InvalidArgs', `${args.path} is not a directory`) : fsError(error, args.path)
    }
    try {
      // No more entries than this can ever fit the result limit.
      const room = Math.max(1, Math.floor(ctx.maxResultBytes / SMALLEST_ENTRY_BYTES))
      const { names, total } = await firstNames(dir.at(''), room)
      const entries = fitting(await measured(names, dir.at('')), total, ctx.maxResultBytes)
      if (entries.length === total) return { entries }
      ctx.markTruncated?.()
      return { entries, truncated: true as const, total_entries: total }
    } catch (error) {
      throw fsError(error, args.path)
    } finally {
      await dir.close()
    }
  },
})

/**
 * The first `count` names of the directory in name order (of their bytes), and how many it holds; at most
 * twice `count` names held at once. Read as bytes: a name that is not UTF-8 is reached too (and shown with U+FFFD).
 */
async function firstNames (directory: string, count: number): Promise<{ names: Buffer[], total: number }> {
  let names: Buffer[] = []
  let total = 0
  // Node gives the names as bytes with `encoding: 'buffer'`, which its types do not know of for opendir.
  for await (const entry of await opendir(directory, { encoding: 'buffer' as BufferEncoding })) {
    total++
    names.push(entry.name as unknown as Buffer)
    if (names.length >= count * 2) names = names.sort(Buffer.compare).slice(0, count)
  }
  return { names: names.sort(Buffer.compare).slice(0, count), total }
}

/** lstat: a symlink is listed as itself, never as what it points to (which may be outside). */
async function measured (names: Buffer[], directory: string): Promise<Entry[]> {
  const entries: Entry[] = []
  for (let start = 0; start < names.length; start += LSTATS_AT_ONCE) {
    entries.push(...await Promise.all(names.slice(start, start + LSTATS_AT_ONCE).map(async (name) => {
      const info = await lstat(Buffer.concat([Buffer.from(directory), name])).catch(() => null)
      const entry: Entry = { name: name.toString(), is_dir: info?.isDirectory() ?? false, size: info?.size ?? 0 }
      if (!isUtf8(name)) entry.name_not_utf8 = true
      return entry
    })))
  }
  return entries
}

/** The leading entries whose listing, with the cut's own members, fits in `maxBytes` of JSON. */
function fitting (entries: Entry[], total: number, maxBytes: number): Entry[] {
  if (entries.length === total && Buffer.byteLength(JSON.stringify({ entries })) <= maxBytes) return entries
  let used = Buffer.byteLength(JSON.stringify({ entries: [], truncated: true, total_entries: total }))
  let kept = 0
  for (const entry of entries) {
    const cost = Buffer.byteLength(JSON.stringify(entry)) + (kept > 0 ? 1 : 0)
    if (used + cost > maxBytes) break
    used += cost
    kept++
  }
  return entries.slice(0, kept)
}
