/**
 * omega's `bash`: `bash -c` in the workspace, stdout and stderr combined in
 * the order written, 30,000 characters at most with omega's notice, a 120 s
 * timeout, and `is_error` on a non-zero exit. Unlike omega, it runs in the
 * sandbox.
 */
import { Type } from '@sinclair/typebox'
import { ToolError } from '../../errors.ts'
import { truncateText } from '../../execution/truncate.ts'
import type { ProcessRunner } from '../../sandbox/types.ts'
import { defineBuiltin } from '../../execution/define.ts'
import { checkArgv } from '../../sandbox/command-rules.ts'
import { failedRun } from '../process-result.ts'

export const MAX_BASH_OUTPUT = 30_000
export const BASH_TIMEOUT_SECS = 120

/** `timeoutSeconds` is omega's 120 unless a test needs a shorter one. */
export function bashTool (runner: ProcessRunner, timeoutSeconds = BASH_TIMEOUT_SECS) {
  return defineBuiltin({
    name: 'bash',
    changesTreeFreely: true,
    description: 'Run a bash command in the workspace; answers stdout and stderr combined (30,000 characters at most).',
    parameters: Type.Object({
      command: Type.String({ description: 'The bash command to run' }),
    }),
    outputSchema: Type.Object({
      content: Type.String({ description: 'stdout and stderr combined, with a notice when cut' }),
      is_error: Type.Boolean({ description: 'The command exited with a non-zero code' }),
      exit_code: Type.Integer(),
    }, { additionalProperties: false }),
    annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: false },
    async execute (args, ctx) {
      if (args.command.trim() === '') throw new ToolError('InvalidArgs', 'command must not be empty')
      checkArgv([args.command], 'command')
      const run = await runner.run({
        command: 'sh',
        // bash with its stderr on its stdout: one pipe keeps the two in the order they were written.
        // The command goes in verbatim as bash's own -c script.
        args: ['-c', 'exec bash -c "$1" 2>&1', 'sh', args.command],
        cwd: ctx.workspaceDir,
        timeoutMs: timeoutSeconds * 1000,
        signal: ctx.signal,
        // Up to 4 bytes a character: enough bytes for 30,000 characters of any script.
        maxOutputBytes: MAX_BASH_OUTPUT * 4,
      })
      // A timeout's partial_stdout is bash's output, both streams in the order written.
      const failure = failedRun(run, timeoutSeconds)
      if (failure) throw failure
      // stderr holds only what the wrapper or the sandbox said (bash's own went to stdout).
      const printed = run.stdout + run.stderr
      const output = printed === '' ? `exit code: ${run.exitCode}` : printed
      const total = run.stdoutTruncated || run.stderrTruncated ? run.stdoutBytes + run.stderrBytes : output.length
      if (total > MAX_BASH_OUTPUT) ctx.markTruncated?.()
      return { content: truncateText(output, MAX_BASH_OUTPUT, total), is_error: run.exitCode !== 0, exit_code: run.exitCode }
    },
  })
}
