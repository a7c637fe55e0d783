/**
 * Choosing the process runner at start-up: `bwrap` requires bubblewrap to
 * work, `none` runs plain processes, and `auto` probes bubblewrap once and
 * falls back to `none` with one warning.
 */
import { mkdtemp, realpath, rm } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import type { Logger } from 'pino'
import type { Config } from '../config.ts'
import { type BwrapOptions, BwrapRunner } from './bwrap-runner.ts'
import { FILTERED_ARCHITECTURES } from './seccomp.ts'
import { findPrlimit, probeUlimitUnits, type ResourceLimits, ulimitCommands } from './limits.ts'
import { PlainRunner } from './plain-runner.ts'
import { runPrepared } from './process.ts'
import { RunCgroups } from './run-cgroups.ts'
import type { ProcessRunner, RunOptions, RunResult } from './types.ts'
import { NSENTER } from './programs.ts'
import { nsenterAvailable, type WorkspaceNetworks } from './workspace-network.ts'

export type { ProcessRunner } from './types.ts'

export interface RunnerOptions {
  log: Logger
  /** Directories no sandboxed process may see (the workspaces roots). */
  hidePaths?: string[]
  /** Files the service reads (config, tokens file), hidden with their symlink chains and the directories holding them. */
  secretFiles?: string[]
  /** The workspaces' networks, which bwrap's commands join when `sandbox.network` is off. */
  networks?: WorkspaceNetworks
}

/** Said once at start-up: what a root service's sandbox cannot keep from its tools. */
const ROOT_SANDBOX_WARNING = 'running as root with the sandbox on: tools can read every root-owned file that is not hidden ' +
  '(such as 0600 files under /var and /etc), because the sandbox\'s uid maps to the host\'s root; ' +
  'the container image runs as uid 10001 for this reason'

function limitsOf (sandbox: Config['sandbox']): ResourceLimits {
  return {
    cpuSeconds: sandbox.cpu_seconds,
    maxFileBytes: sandbox.max_file_bytes,
    maxProcesses: sandbox.max_processes,
    maxMemoryBytes: sandbox.max_memory_bytes,
  }
}

/** Failures to start a program for want of a descriptor, a process or memory: they pass, and say nothing of the sandbox. */
const SHORTAGES = new Set(['EMFILE', 'ENFILE', 'EAGAIN', 'ENOMEM'])
/** The same, as bubblewrap or a shell inside it reports them. */
const SHORTAGE_TEXT = /Too many open files|Resource temporarily unavailable|Cannot allocate memory/
/** How often, and how far apart, a probe that met a shortage is tried again. */
const PROBE_TRIES = 10
const PROBE_RETRY_MS = 500

/** Runs `true` with `run` in a scratch directory: null when it ran, else why not, and whether for a shortage (nothing could start). */
async function probeOnce (run: (options: RunOptions) => Promise<RunResult>): Promise<{ problem: string, shortage: boolean } | null> {
  let dir: string | undefined
  try {
    dir = await realpath(await mkdtemp(path.join(os.tmpdir(), 'toolport-probe-')))
    const result = await run({ command: 'true', args: [], cwd: dir, timeoutMs: 10_000, signal: new AbortController().signal, maxOutputBytes: 4096 })
    if (result.exitCode === 0) return null
    const problem = result.stderr.trim() || `exit code ${result.exitCode}`
    return { problem, shortage: SHORTAGES.has(result.startFailure ?? '') || SHORTAGE_TEXT.test(result.stderr) }
  } catch (error) {
    return { problem: (error as Error).message, shortage: SHORTAGES.has((error as NodeJS.ErrnoException).code ?? '') }
  } finally {
    if (dir !== undefined) await rm(dir, { recursive: true, force: true }).catch(() => {})
  }
}

/**
 * Does bubblewrap work here? null when it does, else why not. A probe that
 * could not start anything (no descriptor free for a moment) is tried again;
 * one that never can stops the start: it says nothing of bubblewrap, and
 * taking it for "does not work" would run every command without a sandbox.
 */
async function probe (run: (options: RunOptions) => Promise<RunResult>, log: Logger): Promise<string | null> {
  for (let tries = 1; ; tries++) {
    const outcome = await probeOnce(run)
    if (outcome === null || !outcome.shortage) return outcome?.problem ?? null
    if (tries === PROBE_TRIES) throw new Error(`the sandbox could not be probed, for want of a file descriptor, a process or memory: ${outcome.problem}`)
    log.warn({ reason: outcome.problem }, 'the sandbox probe could not start a program (no file descriptor, process or memory free just now): trying again')
    await sleep(PROBE_RETRY_MS)
  }
}

export async function createRunner (sandbox: Config['sandbox'], options: RunnerOptions): Promise<ProcessRunner> {
  const limits = limitsOf(sandbox)
  const prlimit = findPrlimit()
  if (!prlimit) options.log.warn('prlimit not found: tool processes run without resource limits')
  const cgroups = RunCgroups.detect()
  // RLIMIT_NPROC does not bind uid 0; only a pids cgroup bounds a root service's tools.
  if (!cgroups && process.getuid?.() === 0) options.log.warn('running as root without a writable pids cgroup: sandbox.max_processes is not enforced')
  // Where /bin/sh's ulimit can set every limit, the launcher does, and prlimit is skipped (one program start fewer).
  const units = await probeUlimitUnits()
  // With a pids cgroup per run, the cgroup bounds the process count (as prlimit's --nproc would not for root).
  const ulimits = units ? ulimitCommands(limits, units, !cgroups) : undefined
  if (sandbox.mode === 'none') return new PlainRunner(limits, prlimit, cgroups, ulimits)
  const bwrapOptions: BwrapOptions = {
    network: sandbox.network,
    limits,
    prlimit,
    hidePaths: options.hidePaths ?? [],
    secretFiles: options.secretFiles,
    tmpBytes: sandbox.tmp_bytes,
    cgroups,
    ulimits,
  }
  const bwrap = new BwrapRunner(bwrapOptions)
  const problem = await probe((run) => bwrap.run(run), options.log)
  if (problem === null) {
    if (process.getuid?.() === 0) options.log.warn(ROOT_SANDBOX_WARNING)
    if (!FILTERED_ARCHITECTURES.includes(process.arch)) options.log.warn({ arch: process.arch }, 'the sandbox\'s seccomp filter knows x86-64 and arm64 only: here commands may use the kernel\'s keyrings and file leases')
    const networks = sandbox.network ? undefined : options.networks
    return networks ? await joiningNetworks(bwrap, bwrapOptions, networks, options.log) : bwrap
  }
  if (sandbox.mode === 'bwrap') throw new Error(`sandbox.mode is bwrap but bubblewrap does not work here: ${problem}`)
  options.log.warn({ reason: problem }, 'bubblewrap does not work here; tool processes run WITHOUT a sandbox (sandbox.mode auto → none)')
  return new PlainRunner(limits, prlimit, cgroups, ulimits)
}

/**
 * A runner whose commands join their workspace's network, when one can be
 * entered here (nsenter present, setns allowed by the seccomp profile);
 * else `bwrap`, whose every command has a network of its own, with a
 * warning: isolated all the same, only not shared.
 */
async function joiningNetworks (bwrap: BwrapRunner, bwrapOptions: BwrapOptions, networks: WorkspaceNetworks, log: Logger): Promise<BwrapRunner> {
  const joining = new BwrapRunner({ ...bwrapOptions, networks })
  // prepare() is a long-running process's: it makes the scratch directory a network of its own, ended after.
  const problem = nsenterAvailable()
    ? await probe((run) => runPrepared((launch) => joining.prepare(launch), run).finally(() => networks.end(run.cwd)), log)
    : `${NSENTER} not found`
  if (problem === null) return joining
  log.warn({ reason: problem }, 'workspace networks do not work here: every sandboxed command has a network of its own, so a server a process starts is not reachable from its workspace\'s other commands')
  return bwrap
}
