/** write_file: creates or overwrites a file (and its parent directories), atomically and race-free. */
import { Type } from '@sinclair/typebox'
import { defineBuiltin } from '../execution/define.ts'
import { writeWorkspaceFile } from '../workspace-fs/write.ts'

export const writeFileTool = defineBuiltin({
  name: 'write_file',
  description: 'Write content to a file in the workspace, creating it and any missing parent directories; overwrites an existing file.',
  parameters: Type.Object({
    path: Type.String({ description: 'File path to write (relative to the workspace)' }),
    content: Type.String({ description: 'Content to write to the file' }),
  }),
  outputSchema: Type.Object({ message: Type.String() }, { additionalProperties: false }),
  // Overwrites what was there; writing the same content again changes nothing more.
  annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: true, openWorldHint: false },
  async execute (args, ctx) {
    await writeWorkspaceFile(ctx.workspaceDir, args.path, args.content, ctx.quota)
    return { message: `Successfully wrote ${Buffer.byteLength(args.content)} bytes to ${args.path}` }
  },
})
