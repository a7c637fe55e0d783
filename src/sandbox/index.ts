/**
 * Choosing the process runner at start-up: `bwrap` requires bubblewrap to
 * work, `none` runs plain processes, and `auto` probes bubblewrap once and
 * falls back to `none` with one warning.
 */
import { mkdtemp, realpath, rm } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import type { Logger } from 'pino'
import type { Config } from '../config.ts'
import { BwrapRunner } from './bwrap-runner.ts'
import { findPrlimit, probeUlimitUnits, type ResourceLimits, ulimitCommands } from './limits.ts'
import { PidsCgroups } from './pids-cgroup.ts'
import { PlainRunner } from './plain-runner.ts'
import type { ProcessRunner } from './types.ts'

export type { ProcessRunner } from './types.ts'

export interface RunnerOptions {
  log: Logger
  /** Paths no sandboxed process may see (the workspaces root, the config file). */
  hidePaths?: string[]
}

function limitsOf (sandbox: Config['sandbox']): ResourceLimits {
  return {
    cpuSeconds: sandbox.cpu_seconds,
    maxFileBytes: sandbox.max_file_bytes,
    maxProcesses: sandbox.max_processes,
    maxMemoryBytes: sandbox.max_memory_bytes,
  }
}

/** Runs `true` under the runner in a scratch directory: does bubblewrap work here? */
async function probe (runner: BwrapRunner): Promise<string | null> {
  const dir = await realpath(await mkdtemp(path.join(os.tmpdir(), 'toolport-probe-')))
  try {
    const result = await runner.run({ command: 'true', args: [], cwd: dir, timeoutMs: 10_000, signal: new AbortController().signal, maxOutputBytes: 4096 })
    return result.exitCode === 0 ? null : (result.stderr.trim() || `exit code ${result.exitCode}`)
  } catch (error) {
    return (error as Error).message
  } finally {
    await rm(dir, { recursive: true, force: true })
  }
}

export async function createRunner (sandbox: Config['sandbox'], options: RunnerOptions): Promise<ProcessRunner> {
  const limits = limitsOf(sandbox)
  const prlimit = findPrlimit()
  if (!prlimit) options.log.warn('prlimit not found: tool processes run without resource limits')
  const pids = PidsCgroups.detect()
  // RLIMIT_NPROC does not bind uid 0; only a pids cgroup bounds a root service's tools.
  if (!pids && process.getuid?.() === 0) options.log.warn('running as root without a writable pids cgroup: sandbox.max_processes is not enforced')
  // Where /bin/sh's ulimit can set every limit, the launcher does, and prlimit is skipped (one program start fewer).
  const units = probeUlimitUnits()
  // With a pids cgroup per run, the cgroup bounds the process count (as prlimit's --nproc would not for root).
  const ulimits = units ? ulimitCommands(limits, units, !pids) : undefined
  if (sandbox.mode === 'none') return new PlainRunner(limits, prlimit, pids, ulimits)
  const bwrap = new BwrapRunner({ network: sandbox.network, limits, prlimit, hidePaths: options.hidePaths ?? [], pids, ulimits })
  const problem = await probe(bwrap)
  if (problem === null) return bwrap
  if (sandbox.mode === 'bwrap') throw new Error(`sandbox.mode is bwrap but bubblewrap does not work here: ${problem}`)
  options.log.warn({ reason: problem }, 'bubblewrap does not work here; tool processes run WITHOUT a sandbox (sandbox.mode auto → none)')
  return new PlainRunner(limits, prlimit, pids, ulimits)
}
