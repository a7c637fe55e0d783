/**
 * Running one process to completion with node:child_process: its own
 * process group (detached), stdin closed, bounded capture of its output, and
 * the whole group killed on timeout or cancellation, so no grandchild
 * outlives it. (Not execa: its options handling, streams and promises cost
 * about 0.8 ms of CPU per process, as much again as the spawn itself.)
 */
import { type ChildProcess, spawn } from 'node:child_process'
import type { Readable, Writable } from 'node:stream'
import { BoundedCapture } from './capture.ts'
import type { LaunchOptions, PreparedLaunch, RunOptions, RunResult } from './types.ts'

export interface Spawn {
  file: string
  args: string[]
  env: Record<string, string>
  cwd: string
  /** Kills every process of the run, wherever it went (its cgroup); the process group is always killed. */
  killTree?: () => void
  passes?: PreparedLaunch['passes']
}

/** The stdio entries after the first three that hand the program `passes`: a descriptor as it is, bytes as a pipe. */
export function passedStdio (passes: PreparedLaunch['passes']): Array<number | 'pipe'> {
  return (passes ?? []).map((each) => typeof each === 'number' ? each : 'pipe')
}

/**
 * Writes each of `passes` given as bytes into its pipe and closes it, so the program reads them to
 * their end. A spawn that failed (EMFILE) has no pipes: its 'error' tells the caller so.
 */
export function fillPasses (stdio: ReadonlyArray<Readable | Writable | null | undefined> | undefined, passes: PreparedLaunch['passes']): void {
  passes?.forEach((each, index) => {
    if (typeof each === 'number') return
    const pipe = stdio?.[3 + index] as Writable | null | undefined
    // A program that ends before it reads them leaves a broken pipe, which is no failure of the run.
    pipe?.on('error', () => {})
    pipe?.end(each)
  })
}

/** How long pipes may stay open after a kill before they are closed on our side. */
const PIPE_GRACE_MS = 1000

function killGroup (pid: number | undefined, killTree: (() => void) | undefined): void {
  killTree?.()
  if (pid === undefined) return
  try {
    process.kill(-pid, 'SIGKILL')
  } catch {
    // Already gone.
  }
}

/** Runs in progress: should the service itself exit, their groups are killed with it. */
const running = new Map<ChildProcess, (() => void) | undefined>()
let exitHookInstalled = false

function track (child: ChildProcess, killTree: (() => void) | undefined): void {
  if (!exitHookInstalled) {
    exitHookInstalled = true
    process.once('exit', () => { for (const [each, tree] of running) killGroup(each.pid, tree) })
  }
  running.set(child, killTree)
}

type Ending = { code: number | null, signal: NodeJS.Signals | null } | { error: NodeJS.ErrnoException }

/** Settles when the process exits, or when it could not be started at all. */
function ended (child: ChildProcess): Promise<Ending> {
  return new Promise((resolve) => {
    child.once('exit', (code, signal) => resolve({ code, signal }))
    child.once('error', (error) => resolve({ error }))
  })
}

/** The result of a process that never ran (no such program, E2BIG, EACCES…). */
function notStarted (error: NodeJS.ErrnoException, started: number): RunResult {
  return {
    exitCode: -1,
    signal: null,
    stdout: '',
    stderr: error.message,
    stdoutBytes: 0,
    stderrBytes: 0,
    stdoutTruncated: false,
    stderrTruncated: false,
    durationMs: Math.round(performance.now() - started),
    timedOut: false,
    cancelled: false,
    notFound: error.code === 'ENOENT',
    ...(error.code !== undefined ? { startFailure: error.code } : {}),
  }
}

export async function runToCompletion (spec: Spawn, options: RunOptions): Promise<RunResult> {
  const started = performance.now()
  let child: ChildProcess
  try {
    child = spawn(spec.file, spec.args, { cwd: spec.cwd, env: spec.env, stdio: ['ignore', 'pipe', 'pipe', ...passedStdio(spec.passes)], detached: true })
  } catch (error) {
    return notStarted(error as NodeJS.ErrnoException, started)
  }
  fillPasses(child.stdio, spec.passes)
  const stdout = new BoundedCapture(options.maxOutputBytes)
  // Combined output (omega's bash): both streams into one capture, in the order they arrive.
  const stderr = new BoundedCapture(options.maxOutputBytes)
  const draining = [stdout.drain(child.stdout), stderr.drain(child.stderr)]
  const closePipes = (): void => { child.stdout?.destroy(); child.stderr?.destroy() }

  let timedOut = false
  let cancelled = false
  // A process that left the group (setsid) and is not in a cgroup survives the kill and may hold
  // the output pipes open: after a grace period they are closed, so the call still ends.
  let release: NodeJS.Timeout | undefined
  const stop = (): void => {
    killGroup(child.pid, spec.killTree)
    release ??= setTimeout(closePipes, PIPE_GRACE_MS).unref()
  }
  const timer = setTimeout(() => { timedOut = true; stop() }, options.timeoutMs)
  const onAbort = (): void => { cancelled = true; stop() }
  if (options.signal.aborted) onAbort()
  else options.signal.addEventListener('abort', onAbort, { once: true })

  track(child, spec.killTree)
  const ending = await ended(child)
  running.delete(child)
  clearTimeout(timer)
  options.signal.removeEventListener('abort', onAbort)
  if ('error' in ending) {
    closePipes()
    clearTimeout(release)
    return notStarted(ending.error, started)
  }
  // When the direct child exits, what it left in the background (`sleep 60 &`) is killed at
  // once: it would otherwise hold the output pipes open and the call until its timeout.
  killGroup(child.pid, spec.killTree)
  // A process that left the group (setsid) where no cgroup catches it may still hold the pipes:
  // after the grace period they are closed on our side, so the call ends all the same.
  release ??= setTimeout(closePipes, PIPE_GRACE_MS).unref()
  await Promise.all(draining)
  clearTimeout(release)

  return {
    exitCode: ending.code ?? -1,
    signal: ending.signal ?? null,
    stdout: stdout.text(),
    stderr: stderr.text(),
    stdoutBytes: stdout.bytes,
    stderrBytes: stderr.bytes,
    stdoutTruncated: stdout.truncated,
    stderrTruncated: stderr.truncated,
    durationMs: Math.round(performance.now() - started),
    timedOut,
    cancelled,
    notFound: false,
  }
}

/**
 * Whether a run failed because its program does not exist, as the wrappers
 * in front of it report that: bwrap (exit 1), prlimit and the cgroup
 * launcher's `exec` (exit 127).
 */
export function reportsMissingProgram (result: RunResult): boolean {
  if (result.exitCode === 1) return /^bwrap: execvp .*No such file or directory/m.test(result.stderr)
  if (result.exitCode !== 127) return false
  return /^prlimit: failed to execute .*No such file or directory/m.test(result.stderr) || /^\S+: \d+: exec: .*: not found$/m.test(result.stderr)
}

/**
 * A run to completion of what a runner's `prepare` launches, the same for
 * every runner: whatever the run left is killed at its end, and the wait
 * for it to be gone need not hold the answer.
 */
export async function runPrepared (prepare: (options: LaunchOptions) => Promise<PreparedLaunch>, options: RunOptions): Promise<RunResult> {
  const launch = await prepare(options)
  try {
    const result = await runToCompletion(launch, options)
    return reportsMissingProgram(result) ? { ...result, exitCode: 127, notFound: true } : result
  } finally {
    launch.release()
  }
}
