/**
 * exec_shell: `sh -c` in the workspace, through the sandbox. Commands are
 * first checked against the denylist (a speed bump, not a boundary: the
 * sandbox is the boundary). A non-zero exit is a success that reports its
 * code; a timeout is a 504 carrying what the command printed so far.
 */
import { Type } from '@sinclair/typebox'
import type { Config } from '../config.ts'
import type { ProcessRunner } from '../sandbox/types.ts'
import { defineBuiltin } from '../execution/define.ts'
import { checkShellCommand, DEFAULT_DENYLIST, effectiveTimeout } from '../sandbox/command-rules.ts'
import { failedRun, markIfCut, processOutput, processResult } from './process-result.ts'

export function createExecShellTool (options: { config: Config['tools']['exec_shell'], runner: ProcessRunner }) {
  const denylist = options.config.denylist ?? DEFAULT_DENYLIST
  return defineBuiltin({
    name: 'exec_shell',
    changesTreeFreely: true,
    description: 'Execute a shell command (sh -c) in the workspace directory and capture its exit code, stdout and stderr.',
    parameters: Type.Object({
      command: Type.String({ description: 'Shell command to execute' }),
      timeout: Type.Optional(Type.Number({ exclusiveMinimum: 0, description: `Timeout in seconds (default: ${options.config.timeout_default}, max: ${options.config.timeout_max})` })),
    }),
    outputSchema: processOutput({ duration_ms: Type.Number({ minimum: 0 }) }),
    annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: false },
    async execute (args, ctx) {
      checkShellCommand(args.command, denylist)
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
