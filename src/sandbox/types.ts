/**
 * How a tool runs a process. Every process tool (exec_shell, spawn, bash,
 * executable tools) goes through a ProcessRunner, which decides whether the
 * process runs under bubblewrap or as a plain child.
 */

export type SandboxMode = 'bwrap' | 'none'

export interface RunOptions {
  /** Program to run (looked up on PATH) and its arguments: never through a shell unless the program is one. */
  command: string
  args: string[]
  /** The workspace directory: the working directory and the only writable place. */
  cwd: string
  /** Extra environment variables on top of the scrubbed base environment. */
  env?: Record<string, string>
  /** Wall-clock limit; on expiry the whole process group is killed. */
  timeoutMs: number
  /** Cancels the run (client gone, shutdown): the whole process group is killed. */
  signal: AbortSignal
  /** Bytes kept of stdout and of stderr each; the rest is counted and dropped. */
  maxOutputBytes: number
  /** Paths outside the workspace the process may read (an executable tool's own directory). */
  readOnlyPaths?: string[]
}

export interface RunResult {
  /** The exit code; -1 when the process was killed by a signal or did not start. */
  exitCode: number
  signal: string | null
  stdout: string
  stderr: string
  /** Total bytes the process wrote, including what was dropped. */
  stdoutBytes: number
  stderrBytes: number
  stdoutTruncated: boolean
  stderrTruncated: boolean
  durationMs: number
  timedOut: boolean
  cancelled: boolean
  /** The program could not be started because it does not exist. */
  notFound?: boolean
  /** Why the program could not be started at all (an errno code: EMFILE, E2BIG…). */
  startFailure?: string
}

/** What a process needs to be started in the sandbox; the caller runs it (a long-running process: processes/). */
export type LaunchOptions = Pick<RunOptions, 'command' | 'args' | 'cwd' | 'env' | 'readOnlyPaths'> & {
  /**
   * An open descriptor of `cwd`, which the caller hands the started program
   * as its descriptor WORKSPACE_FD (`PreparedLaunch.passes`): the sandbox
   * binds that very directory, not whatever the path names by the time it
   * starts (another instance may have removed the workspace and made the id
   * again meanwhile).
   */
  directory?: number
}

/** Descriptors a started program gets after stdio (`PreparedLaunch.passes`): bwrap's seccomp filter, then the workspace directory. */
export const SECCOMP_FD = 3
export const WORKSPACE_FD = 4

/**
 * A process ready to start: the program and arguments that start it in the
 * sandbox, with its limits, and the means to signal everything it starts.
 */
export interface PreparedLaunch {
  file: string
  args: string[]
  env: Record<string, string>
  cwd: string
  /**
   * What the program gets after stdio, from descriptor 3 on: a number is an
   * open descriptor handed on (the launch's `directory`, when bound by it),
   * bytes come through a pipe that holds just them (bwrap's seccomp filter).
   */
  passes?: Array<number | Uint8Array>
  /** SIGKILLs every process of the run, wherever it went (its cgroup); undefined without one. */
  killTree?: (() => void) | undefined
  /**
   * Sends `signal` to every process of the run started as `pid`: its
   * process group, its descendants and its cgroup. A signal other than
   * SIGKILL spares the sandbox's own processes, whose end would SIGKILL
   * the command before it could act on the signal. Returns how many
   * processes it reached (none: the command has not started inside the
   * sandbox yet).
   */
  signalTree: (pid: number, signal: NodeJS.Signals) => number
  /** Call once the run has ended: what is left of it is killed and its cgroup freed. */
  release: () => void
}

export interface ProcessRunner {
  readonly mode: SandboxMode
  run: (options: RunOptions) => Promise<RunResult>
  /** The same sandbox, limits and cleanup as `run`, for a process the caller starts and follows itself. */
  prepare: (options: LaunchOptions) => Promise<PreparedLaunch>
}
