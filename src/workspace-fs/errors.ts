/**
 * How filesystem failures and a caller's paths read in messages: errno →
 * the contract's codes, and a path shown as the caller wrote it.
 */
import { ToolError, volumeFull } from '../errors.ts'

/**
 * A caller's path as messages show it: as is when it reads unambiguously
 * (so clawft's `file not found: a.txt` holds), quoted when it is empty or
 * has edge spaces, quotes or control characters (`"" is a directory`).
 */
export function shownPath (userPath: string): string {
  return /^[^\s"\p{Cc}](?:[^"\p{Cc}]*[^\s"\p{Cc}])?$/u.test(userPath) ? userPath : JSON.stringify(userPath)
}

/** Maps a Node filesystem error to the contract's codes; other errors pass through. */
export function fsError (error: unknown, userPath: string): unknown {
  const shown = shownPath(userPath)
  const code = (error as NodeJS.ErrnoException)?.code
  switch (code) {
    case 'ENOENT': return new ToolError('FileNotFound', `${shown} does not exist`)
    case 'EISDIR': return new ToolError('InvalidArgs', `${shown} is a directory`)
    // What open() answers for a Unix socket.
    case 'ENXIO': return new ToolError('InvalidArgs', `${shown} is not a regular file`)
    case 'ENOTDIR': return new ToolError('FileNotFound', `${shown}: a parent is not a directory`)
    case 'EACCES': case 'EPERM': return new ToolError('PermissionDenied', `${shown}: permission denied`)
    case 'ELOOP': return new ToolError('InvalidPath', `${shown} is a symbolic link`)
    case 'ENAMETOOLONG': return new ToolError('InvalidPath', `${shown} is too long`)
    // O_NONBLOCK's answer for a file another process holds a lease on (it would otherwise wait out the lease-break time).
    case 'EAGAIN': return new ToolError('Conflict', `${shown} is held by another process (a file lease); try again once it lets go`)
    // A full volume is the operator's to know of: the cause makes it a failure of the service (errors.ts isFailure).
    case 'ENOSPC': case 'EDQUOT': return volumeFull(error, 'for the workspace')
    default: return error
  }
}
