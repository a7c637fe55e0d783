/**
 * The rules every shell command a tool or a process runs goes through before
 * it starts (exec_shell, omega's bash, spawn, long-running processes): the
 * argv check, the denylist and the timeout. The denylist is a speed bump
 * against accidents, not a boundary; the sandbox is the boundary.
 */
import { ToolError } from '../errors.ts'

/** clawft's default patterns, matched case-insensitively as substrings. */
export const DEFAULT_DENYLIST = [
  'rm -rf /', 'sudo ', 'mkfs', 'dd if=', ':(){ :|:& };:', 'chmod 777 /', '> /dev/sd', 'shutdown', 'reboot', 'poweroff', 'format c:',
]

/** The first denylist pattern `command` contains, if any. */
export function deniedPattern (command: string, denylist: readonly string[]): string | undefined {
  const lower = command.toLowerCase()
  return denylist.find((pattern) => pattern !== '' && lower.includes(pattern.toLowerCase()))
}

/** Refuses what no process can take as an argument: a NUL byte ends a C string. */
export function checkArgv (values: readonly string[], what: string): void {
  if (values.some((value) => value.includes('\0'))) throw new ToolError('InvalidArgs', `${what} must not contain NUL bytes`)
}

/** Refuses a shell command that cannot run (a NUL byte) or that the denylist names (PermissionDenied). */
export function checkShellCommand (command: string, denylist: readonly string[]): void {
  checkArgv([command], 'command')
  const pattern = deniedPattern(command, denylist)
  if (pattern !== undefined) throw new ToolError('PermissionDenied', `command matches the denylist pattern ${JSON.stringify(pattern)}`)
}

/** The timeout in seconds: the default when absent, clamped (not refused) to the maximum. */
export function effectiveTimeout (requested: number | undefined, config: { timeout_default: number, timeout_max: number }): number {
  return Math.min(requested ?? config.timeout_default, config.timeout_max)
}
