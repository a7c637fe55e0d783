/**
 * omega's `bash`: `bash -c` in the workspace, stdout and stderr combined,
 * 30,000 characters at most with omega's notice, a 120 s timeout, and
 * `is_error` on a non-zero exit. Unlike omega, it runs in the sandbox.
 */
import { Type } from '@sinclair/typebox'
import { ToolError } from '../../errors.ts'
import type { ProcessRunner } from '../../sandbox/types.ts'
import { defineBuiltin } from '../define.ts'
import { truncateOutput } from './truncate-output.ts'

export const MAX_BASH_OUTPUT = 30_000
export const BASH_TIMEOUT_SECS = 120

export function bashTool (runner: ProcessRunner) {
  return defineBuiltin({
    name: 'bash',
    description: 'Run a bash command in the workspace; answers stdout and stderr combined (30,000 characters at most).',
    parameters: Type.Object({
      command: Type.String({ description: 'The bash command to run' }),
    }),
    async execute (args, ctx) {
      if (args.command.trim() === '') throw new ToolError('InvalidArgs', 'command must not be empty')
      const run = await runner.run({
        command: 'bash',
        args: ['-c', args.command],
        cwd: ctx.workspaceDir,
        timeoutMs: BASH_TIMEOUT_SECS * 1000,
        signal: ctx.signal,
        // Up to 4 bytes a character: enough bytes for 30,000 characters of any script.
        maxOutputBytes: MAX_BASH_OUTPUT * 4,
        combineOutput: true,
      })
      if (run.timedOut) {
        throw new ToolError('Timeout', `command timed out after ${BASH_TIMEOUT_SECS}s`, { extra: { partial_output: truncateOutput(run.stdout, 16_384) } })
      }
      if (run.cancelled) throw new ToolError('ExecutionFailed', 'cancelled')
      const output = run.stdout === '' ? `exit code: ${run.exitCode}` : run.stdout
      const total = run.stdoutTruncated ? run.stdoutBytes : output.length
      return { content: truncateOutput(output, MAX_BASH_OUTPUT, total), is_error: run.exitCode !== 0, exit_code: run.exitCode }
    },
  })
}
