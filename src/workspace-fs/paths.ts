/**
 * Path containment: the one function every file tool uses to turn a
 * caller's relative path into an absolute path inside the workspace.
 *
 * The reference designs' rule: join to the workspace, canonicalise (resolving `..` and
 * symlinks), and require the result to stay under the canonical workspace.
 * For paths that do not exist yet, the deepest existing ancestor is
 * canonicalised and checked instead.
 */
import { lstat, readlink, realpath } from 'node:fs/promises'
import path from 'node:path'
import { ToolError } from '../errors.ts'

export interface ResolvedPath {
  /** Absolute path inside the workspace, with every existing symlink resolved. */
  absolute: string
  /** Whether the path exists (a symlink counts by its target). */
  exists: boolean
}

const MAX_PATH_BYTES = 4096

/** Is `candidate` the directory `root` itself or inside it? Both canonical. */
export function isInside (root: string, candidate: string): boolean {
  const relative = path.relative(root, candidate)
  // `..` as a whole first component, not any name that starts with two dots (`..notes` is a file like any other).
  return relative === '' || (relative !== '..' && !relative.startsWith(`..${path.sep}`) && !path.isAbsolute(relative))
}

function refuse (userPath: string, why: string): never {
  throw new ToolError('InvalidPath', `${JSON.stringify(userPath)} ${why}`)
}

/** Checks that a caller's path is a plain relative path, before any filesystem access. */
export function checkPathSyntax (userPath: string): void {
  if (userPath.includes('\0')) refuse(userPath.replace(/\0/g, '\\0'), 'contains a NUL byte')
  if (Buffer.byteLength(userPath) > MAX_PATH_BYTES) refuse(userPath.slice(0, 64) + '…', `is longer than ${MAX_PATH_BYTES} bytes`)
  if (path.isAbsolute(userPath) || /^[A-Za-z]:[\\/]/.test(userPath) || userPath.startsWith('\\')) {
    refuse(userPath, 'is absolute; paths are relative to the workspace')
  }
}

/**
 * Resolves `userPath` inside `workspaceDir` (which must itself be canonical).
 * Throws InvalidPath for anything that is absolute, holds a NUL byte, or
 * resolves — lexically or through symlinks — outside the workspace.
 */
export async function resolveInWorkspace (workspaceDir: string, userPath: string): Promise<ResolvedPath> {
  checkPathSyntax(userPath)
  const joined = path.resolve(workspaceDir, userPath)
  if (!isInside(workspaceDir, joined)) refuse(userPath, 'leaves the workspace')

  // Walk up to the deepest ancestor that exists, then canonicalise it.
  const missing: string[] = []
  let existing = joined
  for (;;) {
    try {
      const real = await realpath(existing)
      if (!isInside(workspaceDir, real)) refuse(userPath, 'resolves outside the workspace through a symbolic link')
      const absolute = path.join(real, ...missing.reverse())
      return { absolute, exists: missing.length === 0 }
    } catch (error) {
      if (error instanceof ToolError) throw error
      const code = (error as NodeJS.ErrnoException).code
      if (code === 'ENAMETOOLONG') refuse(userPath.slice(0, 64) + '…', 'has a name longer than the filesystem allows')
      if (code === 'ELOOP') refuse(userPath, 'has too many levels of symbolic links')
      if (code === 'EACCES' || code === 'EPERM') throw new ToolError('PermissionDenied', `${JSON.stringify(userPath)}: permission denied`)
      if (code !== 'ENOENT' && code !== 'ENOTDIR') throw error
      await refuseDanglingLink(existing, userPath)
      missing.push(path.basename(existing))
      const parent = path.dirname(existing)
      if (parent === existing || !isInside(workspaceDir, parent)) refuse(userPath, 'leaves the workspace')
      existing = parent
    }
  }
}

/**
 * A symlink whose target does not exist would be followed by a later write
 * and create a file wherever it points; such a path is refused outright.
 */
async function refuseDanglingLink (candidate: string, userPath: string): Promise<void> {
  try {
    const stat = await lstat(candidate)
    if (stat.isSymbolicLink()) {
      const target = await readlink(candidate)
      refuse(userPath, `passes through a dangling symbolic link (to ${JSON.stringify(target)})`)
    }
  } catch (error) {
    if (error instanceof ToolError) throw error
    // ENOENT: nothing there at all, the ordinary case of a new path.
  }
}

/** Whether a path ends with a separator (`dir/`): it names a directory, never a file to write. */
export function namesDirectory (userPath: string): boolean {
  return /[/\\]$/.test(userPath)
}
