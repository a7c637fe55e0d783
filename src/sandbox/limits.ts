/**
 * Resource limits of tool processes, applied with util-linux's `prlimit`
 * wrapping the command: CPU seconds, the largest file it may write, the
 * number of processes, and its data (heap) size. RLIMIT_DATA is used rather
 * than the address space: runtimes such as V8 reserve far more address space
 * than they ever use.
 */
import { accessSync, constants } from 'node:fs'

export interface ResourceLimits {
  cpuSeconds: number
  maxFileBytes: number
  maxProcesses: number
  maxMemoryBytes: number
}

const PRLIMIT_CANDIDATES = ['/usr/bin/prlimit', '/bin/prlimit']

/** The prlimit binary, when the machine has one. */
export function findPrlimit (): string | undefined {
  for (const candidate of PRLIMIT_CANDIDATES) {
    try {
      accessSync(candidate, constants.X_OK)
      return candidate
    } catch {}
  }
  return undefined
}

/** `prlimit ... --` in front of a command (or nothing without prlimit). */
export function limitPrefix (prlimit: string | undefined, limits: ResourceLimits): string[] {
  if (!prlimit) return []
  return [
    prlimit,
    `--cpu=${limits.cpuSeconds}`,
    `--fsize=${limits.maxFileBytes}`,
    `--nproc=${limits.maxProcesses}`,
    `--data=${limits.maxMemoryBytes}`,
    '--',
  ]
}
