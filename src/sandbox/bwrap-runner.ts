/**
 * Sandbox mode `bwrap`: each process runs under bubblewrap.
 *
 * Mount layout: the host root read-only; fresh /dev and /proc (new PID
 * namespace); /tmp and /dev/shm each a tmpfs of `tmpBytes`; empty read-only
 * tmpfs over the places that may hold secrets (/root, /home, /run, the
 * workspaces roots with every other workspace in them, the host's cgroups, and the real
 * directories behind the service's config and tokens file, see
 * hidden-paths.ts); /dev/null over /etc/shadow and over a secret file whose
 * directory tools need; then the call's workspace bound read-write at its
 * own path, and any read-only extras (an executable tool's directory). All
 * namespaces are unshared but the network, which is the host's when
 * `network` is on, else the workspace's own (workspace-network.ts: shared
 * by the commands of a persistent workspace, and of an MCP session's once
 * a process started there) or, for any other command, one of its own. The process runs
 * as `nobody` without capabilities inside its own user namespace (and may make
 * no other), without the kernel's keyrings and file leases (seccomp.ts), in a
 * new session, and dies with the service.
 *
 * Inside the sandbox `nobody` owns every tmpfs bwrap makes, so each is either
 * sized (/tmp, /dev/shm) or remounted read-only (/dev itself and the hiding
 * ones): a command cannot fill the host's memory through them.
 */
import { spawnSync } from 'node:child_process'
import { defaultConfig } from '../config.ts'
import { SAFE_PATH, scrubbedEnvironment } from './environment.ts'
import { findHiddenPaths, type HiddenPaths } from './hidden-paths.ts'
import { launcherArgv } from './launcher.ts'
import { limitPrefix, type ResourceLimits } from './limits.ts'
import type { RunCgroup, RunCgroups } from './run-cgroups.ts'
import { runPrepared } from './process.ts'
import { commandNameOf, signalRunTree } from './process-tree.ts'
import { SECCOMP_FILTER } from './seccomp.ts'
import { type LaunchOptions, type PreparedLaunch, type ProcessRunner, type RunOptions, type RunResult, SECCOMP_FD, WORKSPACE_FD } from './types.ts'
import { BWRAP } from './programs.ts'
import type { NetworkLease, WorkspaceNetworks } from './workspace-network.ts'

/** Where secrets may be, and the host's cgroups (every run's usage figures, a channel between tenants). */
const MASKS = ['/root', '/home', '/run', '/var/run', '/etc/shadow', '/etc/gshadow', '/sys/fs/cgroup']

export interface BwrapOptions {
  network: boolean
  limits: ResourceLimits
  prlimit: string | undefined
  /** Directories and files hidden themselves from every process (the workspaces roots). */
  hidePaths: string[]
  /** Files the service reads (config, tokens file): hidden with every link of their symlink chains and the directories holding them. */
  secretFiles?: string[] | undefined
  /** Size of the sandbox's /tmp and of its /dev/shm, each (default: the config's). */
  tmpBytes?: number | undefined
  /** Per-run cgroups, where they can be made (the process and memory bounds of a whole run, which hold for a root service). */
  cgroups?: RunCgroups | undefined
  /** The limits as shell commands for the launcher, which then sets them instead of prlimit (see limits.ts). */
  ulimits?: string | undefined
  /** The workspaces' networks (with `network` false): a command that joins one shares it instead of having its own. */
  networks?: WorkspaceNetworks | undefined
}

/** What of /proc can change the whole host, not the sandbox (Docker's and runc's read-only list). */
const KERNEL_SETTINGS = ['/proc/sys', '/proc/sysrq-trigger', '/proc/bus', '/proc/fs', '/proc/irq']
/** bwrap's own processes inside a run's cgroup: the outer monitor and the namespace's init. */
const BWRAP_PROCESSES = 2
/** The most `pids.max` takes (Linux's PID_MAX_LIMIT): a limit at it, plus bwrap's own processes, is no limit all the same. */
const PID_MAX_LIMIT = 4 * 1024 * 1024

/** How long the hidden paths are reused before they are looked at again. */
const HIDE_RECHECK_MS = 1000

interface Mount {
  at: string
  args: string[]
  hides: boolean
}

const depthOf = (at: string): number => at.split('/').filter(Boolean).length

/**
 * Mounts ordered so that none covers a later one it should not: a parent
 * before what lies inside it (the workspace into the hidden workspaces
 * root, a tool's directory into a hidden config directory), and at the same
 * path the hiding mount last, so that a bind never uncovers a secret.
 */
function ordered (mounts: Mount[]): string[] {
  return mounts
    .toSorted((a, b) => depthOf(a.at) - depthOf(b.at) || Number(a.hides) - Number(b.hides))
    .flatMap((mount) => mount.args)
}

let help: string | undefined

/** Whether this bubblewrap takes `flag` (0.8, as Debian ships it, takes them all; an older one goes without). Asked once. */
function supports (flag: string): boolean {
  help ??= spawnSync(BWRAP, ['--help'], { encoding: 'utf8', timeout: 5000 }).stdout ?? ''
  return help.includes(flag)
}

/**
 * Whether this run binds its workspace by the descriptor it was handed:
 * one was, and this bubblewrap has --bind-fd (an older one binds the path, as before).
 */
function bindsDescriptor (options: LaunchOptions): boolean {
  return options.directory !== undefined && supports('--bind-fd')
}

export class BwrapRunner implements ProcessRunner {
  readonly mode = 'bwrap' as const
  readonly #options: BwrapOptions
  readonly #prefix: string[]
  readonly #scratch: string[]
  #hidden: { paths: HiddenPaths, at: number } | undefined

  constructor (options: BwrapOptions) {
    this.#options = options
    this.#prefix = limitPrefix(options.prlimit, options.limits)
    const size = String(options.tmpBytes ?? defaultConfig().sandbox.tmp_bytes)
    this.#scratch = ['--size', size, '--tmpfs', '/tmp', '--size', size, '--tmpfs', '/dev/shm']
  }

  /**
   * The full bwrap argument list for one run (exported for tests and
   * benchmarks); `withPrlimit` false when the launcher outside bwrap has set
   * the limits already (rlimits are inherited through bwrap); `inNetwork`
   * when bwrap starts inside the workspace's network, which it keeps.
   */
  argv (options: LaunchOptions, withPrlimit = true, inNetwork = false): string[] {
    const env = scrubbedEnvironment(options.cwd, options.env)
    const hidden = this.#hiddenPaths()
    return [
      '--ro-bind', '/', '/',
      '--dev', '/dev',
      '--proc', '/proc',
      // The kernel's settings, read-only as container runtimes keep them: a service run as root maps the
      // sandbox's user to the host's root, whom /proc/sys lets change the host (kernel.core_pattern runs a program as root).
      ...KERNEL_SETTINGS.flatMap((entry) => ['--ro-bind-try', entry, entry]),
      ...this.#scratch,
      ...ordered([
        ...hidden.dirs.map((dir) => ({ at: dir, args: ['--tmpfs', dir], hides: true })),
        ...hidden.files.map((file) => ({ at: file, args: ['--ro-bind', '/dev/null', file], hides: true })),
        // Bound by descriptor when the caller holds the directory open: that directory, whatever the path names by now
        // (bwrap closes the descriptor once bound: the command never gets it, nor a way out through its '..').
        { at: options.cwd, args: bindsDescriptor(options) ? ['--bind-fd', String(WORKSPACE_FD), options.cwd] : ['--bind', options.cwd, options.cwd], hides: false },
        ...(options.readOnlyPaths ?? []).map((p) => ({ at: p, args: ['--ro-bind', p, p], hides: false })),
      ]),
      // Last, once the mount points inside them exist; not recursive, so the binds inside stay as they are.
      ...['/dev', ...hidden.dirs].flatMap((dir) => ['--remount-ro', dir]),
      '--chdir', options.cwd,
      '--unshare-all',
      '--unshare-user',
      ...(this.#options.network || inNetwork ? ['--share-net'] : []),
      '--uid', '65534',
      '--gid', '65534',
      '--hostname', 'toolport-sandbox',
      '--die-with-parent',
      '--new-session',
      // The kernel's keyrings and file leases reach beyond the run (seccomp.ts); user namespaces
      // inside the sandbox would only open more of the kernel to a command.
      '--seccomp', String(SECCOMP_FD),
      ...(supports('--disable-userns') ? ['--disable-userns'] : []),
      '--clearenv',
      ...Object.entries(env).flatMap(([key, value]) => ['--setenv', key, value]),
      '--',
      ...(withPrlimit ? this.#prefix : []),
      options.command,
      ...options.args,
    ]
  }

  /**
   * The paths to hide, looked up at most once a second rather than with
   * dozens of synchronous stats per run; a path that appears, goes away or
   * is relinked (a Secret update) is picked up within that second.
   */
  #hiddenPaths (): HiddenPaths {
    const now = performance.now()
    if (this.#hidden === undefined || now - this.#hidden.at > HIDE_RECHECK_MS) {
      this.#hidden = { paths: findHiddenPaths([...MASKS, ...this.#options.hidePaths], this.#options.secretFiles ?? []), at: now }
    }
    return this.#hidden.paths
  }

  run (options: RunOptions): Promise<RunResult> {
    return runPrepared((launch) => this.#prepare(launch, false), options)
  }

  /** A long-running process (processes/): in an MCP session's workspace, the first one makes the workspace's network. */
  prepare (options: LaunchOptions): Promise<PreparedLaunch> {
    return this.#prepare(options, true)
  }

  async #prepare (options: LaunchOptions, longRunning: boolean): Promise<PreparedLaunch> {
    const { ulimits } = this.#options
    const network = await this.#options.networks?.join(options.cwd, longRunning)
    const inNetwork = network !== undefined
    const cgroup = this.#createCgroup(network)
    // The limits are set inside the sandbox by a launcher that becomes the command (or runs its
    // sh -c script); joining the cgroup has to happen outside, where the cgroup files can be written.
    const inner = ulimits ? launcherArgv(ulimits, options.command, options.args) : undefined
    const bwrapArgs = inner ? this.argv({ ...options, command: inner[0] as string, args: inner.slice(1) }, false, inNetwork) : this.argv(options, true, inNetwork)
    const argv = outerArgv(cgroup?.join, network, bwrapArgs)
    return {
      file: argv[0] as string,
      args: argv.slice(1),
      env: { PATH: SAFE_PATH },
      cwd: options.cwd,
      // From descriptor 3 on, as the argument list names them: SECCOMP_FD, then WORKSPACE_FD.
      passes: bindsDescriptor(options) ? [SECCOMP_FILTER, options.directory as number] : [SECCOMP_FILTER],
      killTree: cgroup?.killAll,
      // bwrap's monitor and the namespace's init: a TERM would end them, and with them (by SIGKILL) the command.
      signalTree: (pid, signal) => signalRunTree({ pid, cgroupPids: cgroup?.pids, spare: (each) => commandNameOf(each) === 'bwrap' }, signal),
      release: () => {
        void cgroup?.release()
        network?.release()
      },
    }
  }

  /** The run's cgroups, if any; should making them fail, the run leaves the network it joined. */
  #createCgroup (network: NetworkLease | undefined): RunCgroup | undefined {
    try {
      return this.#options.cgroups?.create({ maxProcesses: Math.min(this.#options.limits.maxProcesses + BWRAP_PROCESSES, PID_MAX_LIMIT), maxMemoryBytes: this.#options.limits.maxMemoryBytes })
    } catch (error) {
      network?.release()
      throw error
    }
  }
}

/** What starts bwrap: the cgroup joined first (on the host), then the workspace's network entered (nsenter execs bwrap). */
function outerArgv (joinCgroup: string | undefined, network: NetworkLease | undefined, bwrapArgs: string[]): string[] {
  const argv = [...network?.prefix ?? [], BWRAP, ...bwrapArgs]
  return joinCgroup ? launcherArgv(joinCgroup, argv[0] as string, argv.slice(1)) : argv
}
