/**
 * The rules a command goes through before it starts: the argv check (every
 * command, executables' arguments included), the denylist (clawft's, for
 * exec_shell and long-running processes; not omega's bash, nor spawn, which
 * runs no shell) and the timeout. The denylist is a speed bump
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

/**
 * The longest argument a command may be: Linux passes at most 128 KiB in one
 * (MAX_ARG_STRLEN, its final NUL included), and the launcher puts a prelude
 * of its own before a shell command, in the same argument (launcher.ts).
 */
const MAX_ARGUMENT_BYTES = 128 * 1024 - 4096

/** Refuses what no process can take as an argument: a NUL byte ends a C string, and one argument has a size limit. */
export function checkArgv (values: readonly string[], what: string, remedy = 'write a long script to a file and run that'): void {
  if (values.some((value) => value.includes('\0'))) throw new ToolError('InvalidArgs', `${what} must not contain NUL bytes`)
  const longest = Math.max(0, ...values.map((value) => Buffer.byteLength(value)))
  if (longest >= MAX_ARGUMENT_BYTES) {
    throw new ToolError('InvalidArgs', `${what}: one argument is ${longest} bytes, and at most ${MAX_ARGUMENT_BYTES - 1} may be; ${remedy}`)
  }
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
