/**
 * exec_shell: `sh -c` in the workspace, through the sandbox. Commands are
 * first checked against the denylist (a speed bump, not a boundary: the
 * sandbox is the boundary). A non-zero exit is a success that reports its
 * code; a timeout is a 504 carrying what the command printed so far.
 */
import { Type } from '@sinclair/typebox'
import type { Config } from '../config.ts'
import { ToolError } from '../errors.ts'
import type { ProcessRunner } from '../sandbox/types.ts'
import { defineBuiltin } from '../execution/define.ts'
import { checkArgv, effectiveTimeout, failedRun, markIfCut, processOutput, processResult } from './process-result.ts'

/** clawft's default patterns, matched case-insensitively as substrings. */
export const DEFAULT_DENYLIST = [
  'rm -rf /', 'sudo ', 'mkfs', 'dd if=', ':(){ :|:& };:', 'chmod 777 /', '> /dev/sd', 'shutdown', 'reboot', 'poweroff', 'format c:',
]

export function deniedPattern (command: string, denylist: readonly string[]): string | undefined {
  const lower = command.toLowerCase()
  return denylist.find((pattern) => pattern !== '' && lower.includes(pattern.toLowerCase()))
}

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
