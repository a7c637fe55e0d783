/** Checks on a caller's path that need no filesystem. */

/** Whether a path ends with a separator (`dir/`): it names a directory, never a file to write. */
export function namesDirectory (userPath: string): boolean {
  return /[/\\]$/.test(userPath)
}
