/**
 * omega's `read`, `write` and `edit`. omega confined only writes; here all
 * three are confined to the workspace by the same containment function as
 * the clawft file tools.
 */
import { Type } from '@sinclair/typebox'
import { ToolError } from '../../errors.ts'
import { truncateText } from '../../execution/truncate.ts'
import { defineBuiltin } from '../../execution/define.ts'
import { existingPath, openContained, readPrefix, utf8Text } from '../../workspace-fs/read.ts'
import { writeWorkspaceFile } from '../../workspace-fs/write.ts'
import { editFile, occurrencesOf, replaceAt } from '../../workspace-fs/edit.ts'

export const MAX_READ_OUTPUT = 50_000

const FilePath = Type.String({ description: 'File path, relative to the workspace' })

export const readTool = defineBuiltin({
  name: 'read',
  description: 'Read a file in the workspace as text (50,000 characters at most).',
  parameters: Type.Object({ file_path: FilePath }),
  outputSchema: Type.Object({ content: Type.String({ description: 'The text, with a notice when cut' }) }, { additionalProperties: false }),
  annotations: { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
  async execute (args, ctx) {
    const absolute = await existingPath(ctx.workspaceDir, args.file_path)
    const { handle, stat } = await openContained(ctx.workspaceDir, absolute, args.file_path)
    try {
      // 4 bytes a character at most: this prefix always holds the first 50,000 characters.
      const text = utf8Text(await readPrefix(handle, MAX_READ_OUTPUT * 4), args.file_path, stat.size > MAX_READ_OUTPUT * 4)
      const total = stat.size > MAX_READ_OUTPUT * 4 ? stat.size : text.length
      if (total > MAX_READ_OUTPUT) ctx.markTruncated?.()
      return { content: truncateText(text, MAX_READ_OUTPUT, total) }
    } finally {
      await handle.close()
    }
  },
})

export const writeTool = defineBuiltin({
  name: 'write',
  description: 'Write (create or overwrite) a file in the workspace, creating parent directories; answers the byte count.',
  parameters: Type.Object({ file_path: FilePath, content: Type.String({ description: 'The content to write' }) }),
  outputSchema: Type.Object({ content: Type.String(), bytes: Type.Integer({ minimum: 0 }) }, { additionalProperties: false }),
  annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: true, openWorldHint: false },
  async execute (args, ctx) {
    const bytes = Buffer.byteLength(args.content)
    await writeWorkspaceFile(ctx.workspaceDir, args.file_path, args.content, ctx.quota)
    return { content: `Wrote ${bytes} bytes to ${args.file_path}`, bytes }
  },
})

export const editTool = defineBuiltin({
  name: 'edit',
  description: 'Replace the first occurrence of old_string with new_string in a workspace file; reports how many occurrences there were.',
  parameters: Type.Object({
    file_path: FilePath,
    old_string: Type.String({ description: 'Text to find' }),
    new_string: Type.String({ description: 'Replacement for its first occurrence' }),
  }),
  outputSchema: Type.Object({ content: Type.String(), occurrences: Type.Integer({ minimum: 1 }) }, { additionalProperties: false }),
  annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: false },
  async execute (args, ctx) {
    if (args.old_string === '') throw new ToolError('InvalidArgs', 'old_string must not be empty')
    return editFile(ctx.workspaceDir, args.file_path, ctx.quota, (text) => {
      const { first, count: occurrences } = occurrencesOf(text, args.old_string)
      if (occurrences === 0) throw new ToolError('InvalidArgs', `old_string not found in ${args.file_path}`)
      return {
        text: replaceAt(text, first, args.old_string, args.new_string),
        result: { content: `Edited ${args.file_path}: replaced the first of ${occurrences} occurrence(s)`, occurrences },
      }
    })
  },
})
