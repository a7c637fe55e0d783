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
  readonly #ulimits: string | undefined

  /** `ulimits`: the limits as shell commands, applied by the cgroup launcher instead of prlimit (see limits.ts). */
  constructor (limits: ResourceLimits, prlimit: string | undefined, pids?: PidsCgroups, ulimits?: string) {
    this.#prefix = limitPrefix(prlimit, limits)
    this.#limits = limits
    this.#pids = pids
    this.#ulimits = ulimits
  }

  async run (options: RunOptions): Promise<RunResult> {
    const cgroup = this.#pids?.create(this.#limits.maxProcesses, this.#ulimits)
    // With the limits set by the launcher, prlimit would only be one more program to start.
    const limiter = cgroup && this.#ulimits ? [] : this.#prefix
    const argv = [...(cgroup?.prefix ?? []), ...limiter, options.command, ...options.args]
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
