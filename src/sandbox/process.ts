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
}

function killGroup (pid: number | undefined): void {
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
  const timer = setTimeout(() => { timedOut = true; killGroup(child.pid) }, options.timeoutMs)
  const onAbort = (): void => { cancelled = true; killGroup(child.pid) }
  if (options.signal.aborted) onAbort()
  else options.signal.addEventListener('abort', onAbort, { once: true })

  const result = await child
  clearTimeout(timer)
  options.signal.removeEventListener('abort', onAbort)
  // The direct child is gone; anything it left behind in its group goes too.
  killGroup(child.pid)
  await Promise.all(draining)

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
