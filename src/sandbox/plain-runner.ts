/**
 * Sandbox mode `none`: a plain child process in the workspace, with the
 * scrubbed environment, resource limits and process-group kill, but no
 * filesystem or network isolation.
 */
import { scrubbedEnvironment } from './environment.ts'
import { limitPrefix, type ResourceLimits } from './limits.ts'
import type { PidsCgroups } from './pids-cgroup.ts'
import { reportsMissingProgram, runToCompletion } from './process.ts'
import type { ProcessRunner, RunOptions, RunResult } from './types.ts'

export class PlainRunner implements ProcessRunner {
  readonly mode = 'none' as const
  readonly #prefix: string[]
  readonly #limits: ResourceLimits
  readonly #pids: PidsCgroups | undefined

  constructor (limits: ResourceLimits, prlimit: string | undefined, pids?: PidsCgroups) {
    this.#prefix = limitPrefix(prlimit, limits)
    this.#limits = limits
    this.#pids = pids
  }

  async run (options: RunOptions): Promise<RunResult> {
    const cgroup = this.#pids?.create(this.#limits.maxProcesses)
    const argv = [...(cgroup?.prefix ?? []), ...this.#prefix, options.command, ...options.args]
    try {
      const result = await runToCompletion({
        file: argv[0] as string,
        args: argv.slice(1),
        env: scrubbedEnvironment(options.cwd, options.env),
        cwd: options.cwd,
        killTree: cgroup?.killAll,
      }, options)
      return reportsMissingProgram(result) ? { ...result, exitCode: 127, notFound: true } : result
    } finally {
      await cgroup?.release()
    }
  }
}
