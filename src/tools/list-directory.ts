/** list_directory: the immediate children of a directory, sorted by name, with is_dir and size. */
import { lstat, readdir } from 'node:fs/promises'
import path from 'node:path'
import { Type } from '@sinclair/typebox'
import { openContainedDirectory } from '../workspace-fs/open.ts'
import { ToolError } from '../errors.ts'
import { defineBuiltin } from '../execution/define.ts'
import { fsError } from '../workspace-fs/errors.ts'
import { existingPath } from '../workspace-fs/read.ts'

/** Beyond this many entries the listing is cut (and says so). */
export const MAX_ENTRIES = 10_000

export const listDirectoryTool = defineBuiltin({
  name: 'list_directory',
  description: 'List the immediate children of a directory in the workspace, sorted by name, with is_dir and size.',
  parameters: Type.Object({
    path: Type.String({ description: 'Directory path to list (relative to the workspace; "." for the workspace itself)' }),
  }),
  async execute (args, ctx) {
    const absolute = await existingPath(ctx.workspaceDir, args.path)
    let dir
    try {
      dir = await openContainedDirectory(ctx.workspaceDir, path.relative(ctx.workspaceDir, absolute), args.path)
    } catch (error) {
      throw (error as NodeJS.ErrnoException).code === 'ENOTDIR' ? new ToolError('InvalidArgs', `${args.path} is not a directory`) : fsError(error, args.path)
    }
    try {
      const names = (await readdir(dir.at(''))).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))
      const shown = names.slice(0, MAX_ENTRIES)
      // lstat: a symlink is listed as itself, never as what it points to (which may be outside).
      const entries = await Promise.all(shown.map(async (name) => {
        const info = await lstat(dir.at(name)).catch(() => null)
        return { name, is_dir: info?.isDirectory() ?? false, size: info?.size ?? 0 }
      }))
      return names.length > MAX_ENTRIES ? { entries, truncated: true, total_entries: names.length } : { entries }
    } catch (error) {
      throw fsError(error, args.path)
    } finally {
      await dir.close()
    }
  },
})
