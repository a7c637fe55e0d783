/**
 * Running one process to completion with execa: its own process group
 * (detached), stdin closed, bounded capture of its output, and the whole
 * group killed on timeout or cancellation, so no grandchild outlives it.
 */
import { execa } from 'execa'
import { BoundedCapture } from './capture.ts'
import type { RunOptions, RunResult } from './types.ts'

export interface Spawn {
  file: string
  args: string[]
  env: Record<string, string>
  cwd: string
  /** Kills every process of the run, wherever it went (its cgroup); the process group is always killed. */
  killTree?: () => void
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

export async function runToCompletion (spawn: Spawn, options: RunOptions): Promise<RunResult> {
  const started = performance.now()
  const child = execa(spawn.file, spawn.args, {
    cwd: spawn.cwd,
    env: spawn.env,
    extendEnv: false,
    stdin: 'ignore',
    buffer: false,
    all: options.combineOutput === true,
    detached: true,
    reject: false,
    cleanup: true,
    stripFinalNewline: false,
  })
  const stdout = new BoundedCapture(options.maxOutputBytes)
  const stderr = new BoundedCapture(options.maxOutputBytes)
  const draining = options.combineOutput
    ? [stdout.drain(child.all), Promise.resolve()]
    : [stdout.drain(child.stdout), stderr.drain(child.stderr)]

  let timedOut = false
  let cancelled = false
  // A process that left the group (setsid) and is not in a cgroup survives the kill and may hold
  // the output pipes open: after a grace period they are closed, so the call still ends.
  let release: NodeJS.Timeout | undefined
  const stop = (): void => {
    killGroup(child.pid, spawn.killTree)
    release ??= setTimeout(() => { for (const stream of [child.stdout, child.stderr, child.all]) stream?.destroy() }, PIPE_GRACE_MS).unref()
  }
  const timer = setTimeout(() => { timedOut = true; stop() }, options.timeoutMs)
  const onAbort = (): void => { cancelled = true; stop() }
  if (options.signal.aborted) onAbort()
  else options.signal.addEventListener('abort', onAbort, { once: true })

  // When the direct child exits, what it left in the background (`sleep 60 &`) is killed at
  // once: it would otherwise hold the output pipes open and the call until its timeout.
  child.once('exit', () => killGroup(child.pid, spawn.killTree))
  const result = await child
  clearTimeout(timer)
  options.signal.removeEventListener('abort', onAbort)
  // The direct child is gone; anything it left behind in its group goes too.
  killGroup(child.pid, spawn.killTree)
  await Promise.all(draining)
  clearTimeout(release)

  const failedToStart = result.exitCode === undefined && result.signal === undefined
  return {
    exitCode: typeof result.exitCode === 'number' ? result.exitCode : -1,
    signal: result.signal ?? null,
    stdout: stdout.text(),
    stderr: failedToStart && result.originalMessage ? result.originalMessage : stderr.text(),
    stdoutBytes: stdout.bytes,
    stderrBytes: stderr.bytes,
    stdoutTruncated: stdout.truncated,
    stderrTruncated: stderr.truncated,
    durationMs: Math.round(performance.now() - started),
    timedOut,
    cancelled,
    notFound: failedToStart && (result as { code?: string }).code === 'ENOENT',
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
