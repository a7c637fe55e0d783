/**
 * exec_shell: `sh -c` in the workspace, through the sandbox. Commands are
 * first checked against the denylist (a speed bump, not a boundary: the
 * sandbox is the boundary). A non-zero exit is a success that reports its
 * code; a timeout is a 504 carrying what the command printed so far.
 *
 * Also home of what the process tools (exec_shell, spawn) share: the
 * timeout rule, the failure of a timed-out or cancelled run, and a result
 * whose output is cut to fit the result limit and says what was cut.
 */
import { Type } from '@sinclair/typebox'
import type { Config } from '../config.ts'
import type { ToolContext } from '../core/tool.ts'
import { fitString, shareRoom } from '../core/truncate.ts'
import { ToolError } from '../errors.ts'
import type { ProcessRunner, RunResult } from '../sandbox/types.ts'
import { defineBuiltin } from './define.ts'

/** The seed's patterns, matched case-insensitively as substrings. */
export const DEFAULT_DENYLIST = [
  'rm -rf /', 'sudo ', 'mkfs', 'dd if=', ':(){ :|:& };:', 'chmod 777 /', '> /dev/sd', 'shutdown', 'reboot', 'poweroff', 'format c:',
]

/** Partial output carried by a 504, per stream (bytes of its JSON string). */
export const PARTIAL_OUTPUT_BYTES = 16 * 1024

export function deniedPattern (command: string, denylist: readonly string[]): string | undefined {
  const lower = command.toLowerCase()
  return denylist.find((pattern) => pattern !== '' && lower.includes(pattern.toLowerCase()))
}

/** The timeout in seconds: the default when absent, clamped (not refused) to the maximum. */
export function effectiveTimeout (requested: number | undefined, config: { timeout_default: number, timeout_max: number }): number {
  return Math.min(requested ?? config.timeout_default, config.timeout_max)
}

const jsonBytes = (value: unknown): number => Buffer.byteLength(JSON.stringify(value))

/** Refuses what no process can take as an argument: a NUL byte ends a C string. */
export function checkArgv (values: readonly string[], what: string): void {
  if (values.some((value) => value.includes('\0'))) throw new ToolError('InvalidArgs', `${what} must not contain NUL bytes`)
}

/** What a timed-out, cancelled or never started run becomes. */
export function failedRun (run: RunResult, timeoutSeconds: number): ToolError | undefined {
  if (run.timedOut) {
    return new ToolError('Timeout', `command timed out after ${timeoutSeconds}s`, {
      extra: {
        timeout_seconds: timeoutSeconds,
        partial_stdout: fitString(run.stdout, PARTIAL_OUTPUT_BYTES),
        partial_stderr: fitString(run.stderr, PARTIAL_OUTPUT_BYTES),
        stdout_bytes: run.stdoutBytes,
        stderr_bytes: run.stderrBytes,
      },
    })
  }
  if (run.cancelled) return new ToolError('ExecutionFailed', 'cancelled')
  // No exit code and no signal: the process never ran (E2BIG, EACCES…).
  if (run.exitCode === -1 && run.signal === null) return new ToolError('ExecutionFailed', `the command could not start: ${run.stderr.slice(0, 200)}`)
  return undefined
}

interface Stream { text: string, bytes: number, truncated: boolean }

/** A cut stream says so: `<name>_truncated: true` and `<name>_bytes`, the total it printed. */
function cutFields (name: string, stream: Stream): Record<string, unknown> {
  return stream.truncated ? { [`${name}_truncated`]: true, [`${name}_bytes`]: stream.bytes } : {}
}

function cut (stream: Stream, budget: number): Stream {
  // +2: the budget is for the text, its JSON string also has quotes.
  const text = fitString(stream.text, Math.max(0, budget) + 2)
  return text.length === stream.text.length ? stream : { text, bytes: stream.bytes, truncated: true }
}

/**
 * The result of a process tool, `{exit_code, stdout, stderr, ...tail}`, with
 * stdout and stderr cut so that its JSON fits in `maxBytes`: a long output
 * stays a well-formed result that says what was cut, rather than becoming a
 * truncation envelope.
 */
export function processResult (run: RunResult, maxBytes: number, tail: Record<string, unknown>): Record<string, unknown> {
  const shape = (out: Stream, err: Stream): Record<string, unknown> => ({
    exit_code: run.exitCode, stdout: out.text, stderr: err.text, ...cutFields('stdout', out), ...cutFields('stderr', err), ...tail,
  })
  const stdout = { text: run.stdout, bytes: run.stdoutBytes, truncated: run.stdoutTruncated }
  const stderr = { text: run.stderr, bytes: run.stderrBytes, truncated: run.stderrTruncated }
  const whole = shape(stdout, stderr)
  if (jsonBytes(whole) <= maxBytes) return whole
  // The room left for the two texts once every other member is at its largest.
  const room = maxBytes - jsonBytes(shape({ ...stdout, text: '', truncated: true }, { ...stderr, text: '', truncated: true }))
  const [outBudget = 0, errBudget = 0] = shareRoom(room, [jsonBytes(stdout.text) - 2, jsonBytes(stderr.text) - 2])
  return shape(cut(stdout, outBudget), cut(stderr, errBudget))
}

/** Tells the execution path when a process result had its output cut. */
export function markIfCut (result: Record<string, unknown>, ctx: ToolContext): Record<string, unknown> {
  if (result['stdout_truncated'] === true || result['stderr_truncated'] === true) ctx.markTruncated?.()
  return result
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
      checkArgv([args.command], 'command')
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
      return markIfCut(processResult(run, ctx.maxResultBytes, { duration_ms: run.durationMs }), ctx)
    },
  })
}
