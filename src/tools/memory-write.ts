/**
 * memory_write: appends to (with a blank-line separator) or overwrites the
 * memory file. Writes to one file are serialised, so concurrent appends are
 * never lost.
 */
import { constants } from 'node:fs'
import { lstat, open, unlink } from 'node:fs/promises'
import { Type } from '@sinclair/typebox'
import { openContainedDirectory, splitInWorkspace } from '../workspace-fs/open.ts'
import { ToolError } from '../errors.ts'
import { defineBuiltin } from '../execution/define.ts'
import { fsError } from '../workspace-fs/errors.ts'
import { ensureWritableText, withFileLock, withQuotaLock, writeContained } from '../workspace-fs/write.ts'
import { MEMORY_PATH, resolveMemoryFile } from './memory-file.ts'

export const memoryWriteTool = defineBuiltin({
  name: 'memory_write',
  description: 'Write to long-term memory (memory/MEMORY.md in the workspace): append (default) or overwrite.',
  parameters: Type.Object({
    content: Type.String({ description: 'Content to write to memory' }),
    mode: Type.Optional(Type.Union([Type.Literal('append'), Type.Literal('overwrite')], { description: 'Write mode: "append" (default) or "overwrite"' })),
  }),
  outputSchema: Type.Object({ message: Type.String(), path: Type.String({ description: 'The memory file, relative to the workspace' }) }, { additionalProperties: false }),
  // The hints hold for either mode: overwrite replaces the memory, and a repeated append adds the paragraph again.
  annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: false },
  async execute (args, ctx) {
    const mode = args.mode ?? 'append'
    ensureWritableText(args.content, MEMORY_PATH)
    const file = await resolveMemoryFile(ctx.workspaceDir)
    await withFileLock(file.absolute, async () => {
      if (mode === 'overwrite') return writeContained(ctx.workspaceDir, file.absolute, MEMORY_PATH, args.content, { createParents: true, quota: ctx.quota })
      // Nothing to add: no blank paragraph, no separator.
      if (args.content === '') return
      const append = async () => {
        // Checked before anything is made; the separator, known once the file is open, is checked there.
        await ctx.quota?.ensureRoom(Buffer.byteLength(args.content))
        // Where the path leads (a link to a file inside the workspace is followed, as the other modes and memory_read follow it).
        const { relativeDir, name } = splitInWorkspace(ctx.workspaceDir, file.absolute)
        const dir = await openContainedDirectory(ctx.workspaceDir, relativeDir, MEMORY_PATH, { create: true }).catch((error: unknown) => { throw fsError(error, MEMORY_PATH) })
        try {
          const { created, bytes } = await appendParagraph(dir.at(name), args.content, async (bytes) => { await ctx.quota?.ensureRoom(bytes) })
          ctx.quota?.landed(created ? 1 : 0, bytes, relativeDir)
        } catch (error) {
          throw fsError(error, MEMORY_PATH)
        } finally {
          await dir.close()
        }
      }
      return ctx.quota ? withQuotaLock(ctx.workspaceDir, append) : append()
    })
    return {
      message: `Successfully wrote ${Buffer.byteLength(args.content)} bytes to memory (mode: ${mode})`,
      path: MEMORY_PATH,
    }
  },
})

/**
 * Appends `content`, separated from what is there by exactly one blank
 * line, once `admit` has let in the bytes a separator adds with it;
 * answers the bytes added and whether the file is new.
 */
async function appendParagraph (file: string, content: string, admit: (bytes: number) => Promise<void>): Promise<{ created: boolean, bytes: number }> {
  // Whether the file is new, for the workspace's file count (only a process could race this; it makes the figure stale anyway).
  const created = await lstat(file).then(() => false, () => true)
  // O_NOFOLLOW: a link swapped in since the path was resolved is refused, never followed. O_NONBLOCK: one that is a
  // FIFO opens at once instead of holding a thread-pool thread, and is refused below.
  const handle = await open(file, constants.O_RDWR | constants.O_APPEND | constants.O_CREAT | constants.O_NOFOLLOW | constants.O_NONBLOCK, 0o644)
  try {
    const stat = await handle.stat()
    const { size } = stat
    if (!stat.isFile()) throw new ToolError('InvalidArgs', `${MEMORY_PATH} is not a regular file`)
    if (stat.nlink > 1) throw new ToolError('InvalidPath', `${MEMORY_PATH} has other hard links, which may lie outside the workspace`)
    let separator = ''
    if (size > 0) {
      const tail = Buffer.alloc(Math.min(2, size))
      await handle.read(tail, 0, tail.length, size - tail.length)
      const text = tail.toString('latin1')
      separator = text.endsWith('\n\n') || (size === 1 && text === '\n') ? '' : text.endsWith('\n') ? '\n' : '\n\n'
    }
    const added = separator + content
    // A separator means the file was there (nothing was made): refusing here changes nothing.
    if (separator) await admit(Buffer.byteLength(added))
    try {
      await handle.appendFile(added)
    } catch (error) {
      // A disk that filled up part-way: what was appended goes again (a retry would add a second copy of the
      // part), and a file this call made goes too, so that a failed append changes nothing.
      await handle.truncate(size).catch(() => {})
      if (created) await unlink(file).catch(() => {})
      throw error
    }
    return { created, bytes: Buffer.byteLength(added) }
  } finally {
    await handle.close()
  }
}
