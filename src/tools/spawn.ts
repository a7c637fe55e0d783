/**
 * spawn: a command with its arguments, without a shell, in the workspace and
 * the sandbox. At most `max_concurrent` (5) run at once; one more is refused
 * at once with ExecutionFailed naming the limit.
 */
import { Type } from '@sinclair/typebox'
import type { Config } from '../config.ts'
import { Limiter } from '../execution/limiter.ts'
import { ToolError } from '../errors.ts'
import type { ProcessRunner } from '../sandbox/types.ts'
import { defineBuiltin } from '../execution/define.ts'
import { checkArgv, effectiveTimeout } from '../sandbox/command-rules.ts'
import { failedRun, markIfCut, processOutput, processResult } from './process-result.ts'

/** A spawn may ask for up to this many seconds. */
export const SPAWN_TIMEOUT_MAX = 3600

export function createSpawnTool (options: { config: Config['tools']['spawn'], runner: ProcessRunner }) {
  return defineBuiltin({
    name: 'spawn',
    changesTreeFreely: true,
    description: `Spawn a subprocess (a command and its arguments, no shell) in the workspace; at most ${options.config.max_concurrent} run at once.`,
    parameters: Type.Object({
      command: Type.String({ minLength: 1, description: 'Command to execute' }),
      args: Type.Optional(Type.Array(Type.String(), { description: 'Command arguments' })),
      description: Type.Optional(Type.String({ description: 'Human-readable description of the task' })),
      timeout: Type.Optional(Type.Number({ exclusiveMinimum: 0, description: `Timeout in seconds (default: ${options.config.timeout_default})` })),
    }),
    outputSchema: processOutput({ command: Type.String(), description: Type.String() }),
    annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: false },
    limiter: new Limiter({ name: 'spawn', maxConcurrent: options.config.max_concurrent, maxQueue: 0, queueTimeoutMs: 1, rejectCode: 'ExecutionFailed' }),
    async execute (args, ctx) {
      checkArgv([args.command, ...(args.args ?? [])], 'command and args')
      const timeout = effectiveTimeout(args.timeout, { timeout_default: options.config.timeout_default, timeout_max: SPAWN_TIMEOUT_MAX })
      const run = await options.runner.run({
        command: args.command,
        args: args.args ?? [],
        cwd: ctx.workspaceDir,
        timeoutMs: timeout * 1000,
        signal: ctx.signal,
        maxOutputBytes: ctx.maxResultBytes,
      })
      if (run.notFound) throw new ToolError('ExecutionFailed', `cannot start ${args.command}: not found`)
      const failure = failedRun(run, timeout)
      if (failure) throw failure
      return markIfCut(processResult(run, ctx.maxResultBytes, { command: args.command, description: args.description ?? '(no description)' }), ctx)
    },
  })
}
