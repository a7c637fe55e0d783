/**
 * Sandbox mode `bwrap`: each process runs under bubblewrap.
 *
 * Mount layout: the host root read-only; fresh /dev, /proc (new PID
 * namespace) and /tmp; tmpfs over the places that may hold secrets (/root,
 * /home, /run, the workspaces root with every other workspace in it, the
 * service's config); /etc/shadow masked; then the call's workspace bound
 * read-write at its own path, and any read-only extras (an executable tool's
 * directory). All namespaces are unshared (network too, unless configured),
 * the process runs as `nobody` without capabilities inside its own user
 * namespace, in a new session, and dies with the service.
 */
import { existsSync, lstatSync } from 'node:fs'
import { SAFE_PATH, scrubbedEnvironment } from './environment.ts'
import { launcherArgv } from './launcher.ts'
import { limitPrefix, type ResourceLimits } from './limits.ts'
import type { PidsCgroups } from './pids-cgroup.ts'
import { reportsMissingProgram, runToCompletion } from './process.ts'
import type { ProcessRunner, RunOptions, RunResult } from './types.ts'

export const BWRAP = '/usr/bin/bwrap'

const MASKED_DIRS = ['/root', '/home', '/run', '/var/run']
const MASKED_FILES = ['/etc/shadow', '/etc/gshadow']

export interface BwrapOptions {
  network: boolean
  limits: ResourceLimits
  prlimit: string | undefined
  /** Directories and files to hide from every process (the workspaces root, the config file). */
  hidePaths: string[]
  /** Per-run pids cgroups, where they can be made (the process bound that holds for a root service). */
  pids?: PidsCgroups | undefined
  /** The limits as shell commands for the launcher, which then sets them instead of prlimit (see limits.ts). */
  ulimits?: string | undefined
}

/** bwrap's own processes inside a run's cgroup: the outer monitor and the namespace's init. */
const BWRAP_PROCESSES = 2

/**
 * Mount arguments that hide a path: tmpfs over a directory, /dev/null over a
 * file. A symlink (such as /var/run → /run) is left alone: bwrap cannot mount
 * over one, and its target is hidden in its own right.
 */
function hide (path: string): string[] {
  if (!existsSync(path)) return []
  const info = lstatSync(path)
  if (info.isSymbolicLink()) return []
  return info.isDirectory() ? ['--tmpfs', path] : ['--ro-bind', '/dev/null', path]
}

/** How long the mount arguments that hide paths are reused before the paths are looked at again. */
const HIDE_RECHECK_MS = 1000

export class BwrapRunner implements ProcessRunner {
  readonly mode = 'bwrap' as const
  readonly #options: BwrapOptions
  readonly #prefix: string[]
  #hidden: { args: string[], at: number } | undefined

  constructor (options: BwrapOptions) {
    this.#options = options
    this.#prefix = limitPrefix(options.prlimit, options.limits)
  }

  /**
   * The full bwrap argument list for one run (exported for tests and
   * benchmarks); `withPrlimit` false when the launcher outside bwrap has set
   * the limits already (rlimits are inherited through bwrap).
   */
  argv (options: RunOptions, withPrlimit = true): string[] {
    const env = scrubbedEnvironment(options.cwd, options.env)
    return [
      '--ro-bind', '/', '/',
      '--dev', '/dev',
      '--proc', '/proc',
      '--tmpfs', '/tmp',
      ...this.#hideArgs(),
      '--bind', options.cwd, options.cwd,
      ...(options.readOnlyPaths ?? []).flatMap((p) => ['--ro-bind', p, p]),
      '--chdir', options.cwd,
      '--unshare-all',
      '--unshare-user',
      ...(this.#options.network ? ['--share-net'] : []),
      '--uid', '65534',
      '--gid', '65534',
      '--hostname', 'toolport-sandbox',
      '--die-with-parent',
      '--new-session',
      '--clearenv',
      ...Object.entries(env).flatMap(([key, value]) => ['--setenv', key, value]),
      '--',
      ...(withPrlimit ? this.#prefix : []),
      options.command,
      ...options.args,
    ]
  }

  /**
   * The mounts that hide secrets, looked up at most once a second rather
   * than with a dozen synchronous stats per run; a path that appears or
   * goes away is picked up within that second.
   */
  #hideArgs (): string[] {
    const now = performance.now()
    if (this.#hidden === undefined || now - this.#hidden.at > HIDE_RECHECK_MS) {
      const args = [...MASKED_DIRS, ...MASKED_FILES, ...this.#options.hidePaths].flatMap(hide)
      this.#hidden = { args, at: now }
    }
    return this.#hidden.args
  }

  async run (options: RunOptions): Promise<RunResult> {
    const { ulimits } = this.#options
    const cgroup = this.#options.pids?.create(this.#options.limits.maxProcesses + BWRAP_PROCESSES)
    // The limits are set inside the sandbox by a launcher that becomes the command (or runs its
    // sh -c script); joining the cgroup has to happen outside, where the cgroup files can be written.
    const inner = ulimits ? launcherArgv(ulimits, options.command, options.args) : undefined
    const bwrapArgs = inner ? this.argv({ ...options, command: inner[0] as string, args: inner.slice(1) }, false) : this.argv(options)
    const argv = cgroup ? launcherArgv(cgroup.join, BWRAP, bwrapArgs) : [BWRAP, ...bwrapArgs]
    try {
      const result = await runToCompletion({ file: argv[0] as string, args: argv.slice(1), env: { PATH: SAFE_PATH }, cwd: options.cwd, killTree: cgroup?.killAll }, options)
      return reportsMissingProgram(result) ? { ...result, exitCode: 127, notFound: true } : result
    } finally {
      // Whatever the run left is killed now; the wait for it to be gone need not hold the answer.
      void cgroup?.release()
    }
  }
}
