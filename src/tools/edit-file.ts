/**
 * edit_file: replaces `old_text` with `new_text`. Exactly one occurrence is
 * required; zero or several are InvalidArgs (with the count), and the file
 * stays as it was.
 */
import { Type } from '@sinclair/typebox'
import { ToolError } from '../errors.ts'
import { defineBuiltin } from './define.ts'
import { existingPath, openContained, readPrefix, serialised, writeContained } from './fs-helpers.ts'

/** Files larger than this are not loaded for an edit. */
export const MAX_EDIT_BYTES = 16 * 1024 * 1024

function countOccurrences (text: string, needle: string): number {
  let count = 0
  for (let at = text.indexOf(needle); at !== -1; at = text.indexOf(needle, at + needle.length)) count++
  return count
}

export const editFileTool = defineBuiltin({
  name: 'edit_file',
  description: 'Edit a file by replacing old_text with new_text. old_text must occur exactly once; add surrounding context to make it unique.',
  parameters: Type.Object({
    path: Type.String({ description: 'File path to edit (relative to the workspace)' }),
    old_text: Type.String({ description: 'Exact text to find and replace' }),
    new_text: Type.String({ description: 'Replacement text' }),
  }),
  async execute (args, ctx) {
    if (args.old_text === '') throw new ToolError('InvalidArgs', 'old_text must not be empty')
    const absolute = await existingPath(ctx.workspaceDir, args.path)
    return serialised(absolute, async () => {
      const { handle, stat } = await openContained(ctx.workspaceDir, absolute, args.path)
      let text: string
      try {
        if (stat.size > MAX_EDIT_BYTES) throw new ToolError('InvalidArgs', `${args.path} is larger than ${MAX_EDIT_BYTES} bytes; edit it with exec_shell instead`)
        text = (await readPrefix(handle, stat.size)).toString('utf8')
      } finally {
        await handle.close()
      }
      const count = countOccurrences(text, args.old_text)
      if (count === 0) throw new ToolError('InvalidArgs', `old_text not found in ${args.path}`)
      if (count > 1) throw new ToolError('InvalidArgs', `old_text appears ${count} times in ${args.path}; it must appear exactly once (add surrounding context)`)
      const at = text.indexOf(args.old_text)
      const edited = text.slice(0, at) + args.new_text + text.slice(at + args.old_text.length)
      await writeContained(ctx.workspaceDir, absolute, args.path, edited, { quota: ctx.quota })
      return { message: `Successfully edited ${args.path}` }
    })
  },
})
