/**
 * Sandbox mode `none`: a plain child process in the workspace, with the
 * scrubbed environment, resource limits and process-group kill, but no
 * filesystem or network isolation.
 */
import { scrubbedEnvironment } from './environment.ts'
import { launcherArgv } from './launcher.ts'
import { limitPrefix, type ResourceLimits } from './limits.ts'
import { runPrepared } from './process.ts'
import type { RunCgroups } from './run-cgroups.ts'
import { signalRunTree } from './process-tree.ts'
import type { LaunchOptions, PreparedLaunch, ProcessRunner, RunOptions, RunResult } from './types.ts'

export class PlainRunner implements ProcessRunner {
  readonly mode = 'none' as const
  readonly #prefix: string[]
  readonly #limits: ResourceLimits
  readonly #cgroups: RunCgroups | undefined
  readonly #ulimits: string | undefined

  /** `ulimits`: the limits as shell commands, applied by the launcher instead of prlimit (see limits.ts). */
  constructor (limits: ResourceLimits, prlimit: string | undefined, cgroups?: RunCgroups, ulimits?: string) {
    this.#prefix = limitPrefix(prlimit, limits)
    this.#limits = limits
    this.#cgroups = cgroups
    this.#ulimits = ulimits
  }

  run (options: RunOptions): Promise<RunResult> {
    return runPrepared((launch) => this.prepare(launch), options)
  }

  async prepare (options: LaunchOptions): Promise<PreparedLaunch> {
    const cgroup = this.#cgroups?.create(this.#limits)
    // With the limits set by the launcher, prlimit would only be one more program to start.
    const command = this.#ulimits ? [options.command, ...options.args] : [...this.#prefix, options.command, ...options.args]
    const prelude = [cgroup?.join, this.#ulimits].filter(Boolean).join(' && ')
    const argv = prelude ? launcherArgv(prelude, command[0] as string, command.slice(1)) : command
    return {
      file: argv[0] as string,
      args: argv.slice(1),
      env: scrubbedEnvironment(options.cwd, options.env),
      cwd: options.cwd,
      killTree: cgroup?.killAll,
      signalTree: (pid, signal) => signalRunTree({ pid, cgroupPids: cgroup?.pids }, signal),
      release: () => { void cgroup?.release() },
    }
  }
}
