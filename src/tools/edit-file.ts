/**
 * edit_file: replaces `old_text` with `new_text`. Exactly one occurrence is
 * required; zero or several are InvalidArgs (with the count), and the file
 * stays as it was.
 */
import { Type } from '@sinclair/typebox'
import { ToolError } from '../errors.ts'
import { defineBuiltin } from '../execution/define.ts'
import { editFile, occurrencesOf, replaceAt } from '../workspace-fs/edit.ts'

export const editFileTool = defineBuiltin({
  name: 'edit_file',
  description: 'Edit a file by replacing old_text with new_text. old_text must occur exactly once; add surrounding context to make it unique.',
  parameters: Type.Object({
    path: Type.String({ description: 'File path to edit (relative to the workspace)' }),
    old_text: Type.String({ description: 'Exact text to find and replace' }),
    new_text: Type.String({ description: 'Replacement text' }),
  }),
  outputSchema: Type.Object({ message: Type.String() }, { additionalProperties: false }),
  // A repeat finds the text already replaced (or, if new_text contains old_text, edits again).
  annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: false },
  async execute (args, ctx) {
    if (args.old_text === '') throw new ToolError('InvalidArgs', 'old_text must not be empty')
    return editFile(ctx.workspaceDir, args.path, ctx.quota, (text) => {
      const { first, count } = occurrencesOf(text, args.old_text)
      if (count === 0) throw new ToolError('InvalidArgs', `old_text not found in ${args.path}`)
      if (count > 1) throw new ToolError('InvalidArgs', `old_text appears ${count} times in ${args.path}; it must appear exactly once (add surrounding context)`)
      return { text: replaceAt(text, first, args.old_text, args.new_text), result: { message: `Successfully edited ${args.path}` } }
    })
  },
})
