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

/** The start of a path too long to quote whole; a character cut in two shows as U+FFFD, never as half of one. */
const startOf = (userPath: string): string => `${userPath.slice(0, 64).toWellFormed()}…`

/** Checks that a caller's path is a plain relative path, before any filesystem access. */
export function checkPathSyntax (userPath: string): void {
  if (userPath.includes('\0')) refuse(userPath.replace(/\0/g, '\\0'), 'contains a NUL byte')
  // A lone surrogate is no text: as a file name it becomes U+FFFD, the same name as others.
  if (!userPath.isWellFormed()) refuse(userPath.toWellFormed(), 'is not well-formed Unicode (an unpaired surrogate)')
  if (Buffer.byteLength(userPath) > MAX_PATH_BYTES) refuse(startOf(userPath), `is longer than ${MAX_PATH_BYTES} bytes`)
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
  let danglingLinks = 0
  for (;;) {
    try {
      const real = await realpath(existing)
      if (!isInside(workspaceDir, real)) refuse(userPath, 'resolves outside the workspace through a symbolic link')
      const absolute = path.join(real, ...missing.reverse())
      return { absolute, exists: missing.length === 0 }
    } catch (error) {
      if (error instanceof ToolError) throw error
      const code = (error as NodeJS.ErrnoException).code
      if (code === 'ENAMETOOLONG') refuse(startOf(userPath), 'has a name longer than the filesystem allows')
      if (code === 'ELOOP') refuse(userPath, 'has too many levels of symbolic links')
      if (code === 'EACCES' || code === 'EPERM') throw new ToolError('PermissionDenied', `${JSON.stringify(userPath)}: permission denied`)
      if (code !== 'ENOENT' && code !== 'ENOTDIR') throw error
      const target = await danglingTarget(workspaceDir, existing, userPath)
      if (target !== null) {
        // Resolution goes on from where the link points, as the kernel would follow it: a missing file
        // inside (404 on read; a write makes the target), an escape outside. The link itself is never written through.
        if (++danglingLinks > MAX_LINK_HOPS) refuse(userPath, 'has too many levels of symbolic links')
        if (!isInside(workspaceDir, target)) refuse(userPath, 'resolves outside the workspace through a symbolic link')
        existing = target
        continue
      }
      missing.push(path.basename(existing))
      const parent = path.dirname(existing)
      if (parent === existing || !isInside(workspaceDir, parent)) refuse(userPath, 'leaves the workspace')
      existing = parent
    }
  }
}

/** As Linux follows at most 40 links in one path. */
const MAX_LINK_HOPS = 40

/**
 * Where the symbolic link at `candidate` points (its target does not exist,
 * or resolution would not have failed there), as an absolute path from the
 * link's real directory, which must be inside; null when `candidate` is no link.
 */
async function danglingTarget (workspaceDir: string, candidate: string, userPath: string): Promise<string | null> {
  let link: { directory: string, text: string }
  try {
    if (!(await lstat(candidate)).isSymbolicLink()) return null
    link = { directory: await realpath(path.dirname(candidate)), text: await readlink(candidate) }
  } catch {
    // ENOENT: nothing there at all, the ordinary case of a new path.
    return null
  }
  if (!isInside(workspaceDir, link.directory)) refuse(userPath, 'resolves outside the workspace through a symbolic link')
  return path.resolve(link.directory, link.text)
}

/** Whether a path ends with a separator, `.` or `..` (`dir/`, `dir/.`): it names a directory, never a file to write. */
function namesDirectory (userPath: string): boolean {
  return /(?:^|[/\\])\.{0,2}$/.test(userPath)
}

/** Refuses a path that names a directory (`namesDirectory`) where a file is wanted, read or written. */
export function refuseDirectoryName (userPath: string): void {
  if (namesDirectory(userPath)) throw new ToolError('InvalidArgs', `${JSON.stringify(userPath)} ends with a slash, . or ..: it names a directory, not a file`)
}
