/**
 * Sandbox mode `none`: a plain child process in the workspace, with the
 * scrubbed environment, resource limits and process-group kill, but no
 * filesystem or network isolation.
 */
import { scrubbedEnvironment } from './environment.ts'
import { limitPrefix, type ResourceLimits } from './limits.ts'
import { runToCompletion } from './process.ts'
import type { ProcessRunner, RunOptions, RunResult } from './types.ts'

export class PlainRunner implements ProcessRunner {
  readonly mode = 'none' as const
  readonly #prefix: string[]

  constructor (limits: ResourceLimits, prlimit: string | undefined) {
    this.#prefix = limitPrefix(prlimit, limits)
  }

  run (options: RunOptions): Promise<RunResult> {
    const argv = [...this.#prefix, options.command, ...options.args]
    return runToCompletion({
      file: argv[0] as string,
      args: argv.slice(1),
      env: scrubbedEnvironment(options.cwd, options.env),
      cwd: options.cwd,
    }, options)
  }
}
