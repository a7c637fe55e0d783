/** write_file: creates or overwrites a file (and its parent directories), atomically. */
import { mkdir, stat } from 'node:fs/promises'
import path from 'node:path'
import { Type } from '@sinclair/typebox'
import { ToolError } from '../errors.ts'
import { resolveInWorkspace } from '../core/paths.ts'
import { defineBuiltin } from './define.ts'
import { fsError, writeAtomically } from './fs-helpers.ts'

export const writeFileTool = defineBuiltin({
  name: 'write_file',
  description: 'Write content to a file in the workspace, creating it and any missing parent directories; overwrites an existing file.',
  parameters: Type.Object({
    path: Type.String({ description: 'File path to write (relative to the workspace)' }),
    content: Type.String({ description: 'Content to write to the file' }),
  }),
  async execute (args, ctx) {
    const { absolute, exists } = await resolveInWorkspace(ctx.workspaceDir, args.path)
    if (absolute === ctx.workspaceDir) throw new ToolError('InvalidArgs', 'path names the workspace itself, not a file')
    try {
      if (exists && (await stat(absolute)).isDirectory()) throw new ToolError('InvalidArgs', `${args.path} is a directory`)
      await mkdir(path.dirname(absolute), { recursive: true })
      // Parents were created after the check: make sure no link slipped in meanwhile.
      await resolveInWorkspace(ctx.workspaceDir, args.path)
      await writeAtomically(absolute, args.content)
    } catch (error) {
      throw fsError(error, args.path)
    }
    return { message: `Successfully wrote ${Buffer.byteLength(args.content)} bytes to ${args.path}` }
  },
})
