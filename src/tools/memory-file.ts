/** Where the memory tools keep their notes: `memory/MEMORY.md` inside the workspace. */
import { resolveInWorkspace, type ResolvedPath } from '../workspace-fs/paths.ts'

export const MEMORY_PATH = 'memory/MEMORY.md'

/** The memory file, contained like any other path (a symlinked `memory/` cannot lead out). */
export function resolveMemoryFile (workspaceDir: string): Promise<ResolvedPath> {
  return resolveInWorkspace(workspaceDir, MEMORY_PATH)
}
