/**
 * What the process tools (exec_shell, spawn, bash) share: the timeout rule,
 * the argv check, the failure of a timed-out, cancelled or never started run,
 * and a result whose output is cut to fit the result limit and says what was
 * cut, and that result's schema.
 */
import { type Static, type TProperties, Type } from '@sinclair/typebox'
import type { ToolContext } from '../execution/tool.ts'
import { fitString, safePrefix, shareRoom } from '../execution/truncate.ts'
import { descriptorShortage, ToolError } from '../errors.ts'
import type { RunResult } from '../sandbox/types.ts'

/** Partial output carried by a 504, per stream (bytes of its JSON string); the result limit may cut it further. */
export const PARTIAL_OUTPUT_BYTES = 16 * 1024

const jsonBytes = (value: unknown): number => Buffer.byteLength(JSON.stringify(value))

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
  if (run.exitCode === -1 && run.signal === null) {
    // For want of a descriptor it is no fault of the call, and may start once others close: 503.
    return descriptorShortage({ code: run.startFailure }) ?? new ToolError('ExecutionFailed', `the command could not start: ${safePrefix(run.stderr, 200)}`)
  }
  return undefined
}

/** What every process result holds. A cut stream says so: `<name>_truncated: true` and `<name>_bytes`, the total it printed. */
const PROCESS_FIELDS = {
  exit_code: Type.Integer({ description: 'The exit code; -1 when the process was killed by a signal' }),
  stdout: Type.String(),
  stderr: Type.String(),
  stdout_truncated: Type.Optional(Type.Literal(true, { description: 'stdout was cut to fit the result limit' })),
  stdout_bytes: Type.Optional(Type.Integer({ minimum: 0, description: 'Bytes the process wrote to stdout, when it was cut' })),
  stderr_truncated: Type.Optional(Type.Literal(true, { description: 'stderr was cut to fit the result limit' })),
  stderr_bytes: Type.Optional(Type.Integer({ minimum: 0, description: 'Bytes the process wrote to stderr, when it was cut' })),
}

type ProcessFields = Static<ReturnType<typeof processOutput<Record<never, never>>>>

/** The schema of a process tool's result: the process fields and the tool's own `tail`. */
export function processOutput<T extends TProperties> (tail: T) {
  return Type.Object({ ...PROCESS_FIELDS, ...tail }, { additionalProperties: false })
}

interface Stream { text: string, bytes: number, truncated: boolean }

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
export function processResult<T extends Record<string, unknown>> (run: RunResult, maxBytes: number, tail: T): ProcessFields & T {
  const shape = (out: Stream, err: Stream): ProcessFields & T => ({
    exit_code: run.exitCode,
    stdout: out.text,
    stderr: err.text,
    ...(out.truncated ? { stdout_truncated: true as const, stdout_bytes: out.bytes } : {}),
    ...(err.truncated ? { stderr_truncated: true as const, stderr_bytes: err.bytes } : {}),
    ...tail,
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
export function markIfCut<R extends ProcessFields> (result: R, ctx: ToolContext): R {
  if (result.stdout_truncated === true || result.stderr_truncated === true) ctx.markTruncated?.()
  return result
}
