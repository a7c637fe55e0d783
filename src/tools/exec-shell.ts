/**
 * exec_shell: `sh -c` in the workspace, through the sandbox. Commands are
 * first checked against the denylist (a speed bump, not a boundary: the
 * sandbox is the boundary). A non-zero exit is a success that reports its
 * code; a timeout is a 504 carrying what the command printed so far.
 */
import { Type } from '@sinclair/typebox'
import type { Config } from '../config.ts'
import { ToolError } from '../errors.ts'
import type { ProcessRunner, RunResult } from '../sandbox/types.ts'
import { defineBuiltin } from './define.ts'

/** The seed's patterns, matched case-insensitively as substrings. */
export const DEFAULT_DENYLIST = [
  'rm -rf /', 'sudo ', 'mkfs', 'dd if=', ':(){ :|:& };:', 'chmod 777 /', '> /dev/sd', 'shutdown', 'reboot', 'poweroff', 'format c:',
]

/** Partial output carried by a 504, per stream. */
export const PARTIAL_OUTPUT_BYTES = 16 * 1024

export function deniedPattern (command: string, denylist: readonly string[]): string | undefined {
  const lower = command.toLowerCase()
  return denylist.find((pattern) => pattern !== '' && lower.includes(pattern.toLowerCase()))
}

/** The timeout in seconds: the default when absent, clamped (not refused) to the maximum. */
export function effectiveTimeout (requested: number | undefined, config: { timeout_default: number, timeout_max: number }): number {
  return Math.min(requested ?? config.timeout_default, config.timeout_max)
}

/** What a timed-out or cancelled run becomes. */
export function failedRun (run: RunResult, timeoutSeconds: number): ToolError | undefined {
  if (run.timedOut) {
    return new ToolError('Timeout', `command timed out after ${timeoutSeconds}s`, {
      extra: {
        timeout_seconds: timeoutSeconds,
        partial_stdout: run.stdout.slice(0, PARTIAL_OUTPUT_BYTES),
        partial_stderr: run.stderr.slice(0, PARTIAL_OUTPUT_BYTES),
      },
    })
  }
  if (run.cancelled) return new ToolError('ExecutionFailed', 'cancelled')
  return undefined
}

/** `{stdout, stderr}` plus, for a stream that was cut, its flag and total size. */
export function outputFields (run: RunResult): Record<string, unknown> {
  const fields: Record<string, unknown> = { stdout: run.stdout, stderr: run.stderr }
  if (run.stdoutTruncated) Object.assign(fields, { stdout_truncated: true, stdout_bytes: run.stdoutBytes })
  if (run.stderrTruncated) Object.assign(fields, { stderr_truncated: true, stderr_bytes: run.stderrBytes })
  return fields
}

export function createExecShellTool (options: { config: Config['tools']['exec_shell'], runner: ProcessRunner }) {
  const denylist = options.config.denylist ?? DEFAULT_DENYLIST
  return defineBuiltin({
    name: 'exec_shell',
    description: 'Execute a shell command (sh -c) in the workspace directory and capture its exit code, stdout and stderr.',
    parameters: Type.Object({
      command: Type.String({ description: 'Shell command to execute' }),
      timeout: Type.Optional(Type.Number({ exclusiveMinimum: 0, description: `Timeout in seconds (default: ${options.config.timeout_default}, max: ${options.config.timeout_max})` })),
    }),
    async execute (args, ctx) {
      const pattern = deniedPattern(args.command, denylist)
      if (pattern !== undefined) throw new ToolError('PermissionDenied', `command matches the denylist pattern ${JSON.stringify(pattern)}`)
      const timeout = effectiveTimeout(args.timeout, options.config)
      const run = await options.runner.run({
        command: 'sh',
        args: ['-c', args.command],
        cwd: ctx.workspaceDir,
        timeoutMs: timeout * 1000,
        signal: ctx.signal,
        maxOutputBytes: ctx.maxResultBytes,
      })
      const failure = failedRun(run, timeout)
      if (failure) throw failure
      return { exit_code: run.exitCode, ...outputFields(run), duration_ms: run.durationMs }
    },
  })
}
