/**
 * Resource limits of tool processes, applied by the launcher's `ulimit`s
 * where /bin/sh can set them all (launcher.ts), else with util-linux's
 * `prlimit` wrapping the command: CPU seconds, the largest file it may write, the
 * number of processes, and its data (heap) size. RLIMIT_DATA is used rather
 * than the address space: runtimes such as V8 reserve far more address space
 * than they ever use. A run's processes together, and memory they map
 * shared, are bounded by its cgroups where those can be made (run-cgroups.ts).
 */
import { execFile } from 'node:child_process'
import { accessSync, constants } from 'node:fs'
import { promisify } from 'node:util'

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

/** The units in which /bin/sh's `ulimit` takes a file size and a data size (dash: 512 and 1024 bytes), and its flag for the process count. */
export interface UlimitUnits {
  fileBytes: number
  dataBytes: number
  /** `-p` in dash, `-u` in bash. */
  processFlag: '-p' | '-u'
}

/**
 * How /bin/sh's `ulimit` counts, found by asking it: set known values, then
 * read the limits back from the kernel. Undefined when the shell cannot set
 * all three (the caller keeps using prlimit). Asynchronous: it runs while the
 * service already answers.
 */
export async function probeUlimitUnits (): Promise<UlimitUnits | undefined> {
  try {
    const probe = async (processFlag: string): Promise<string> => (await promisify(execFile)('/bin/sh', ['-c', `ulimit -t 7000 && ulimit -f 8000000 && ulimit -d 9000000 && ulimit ${processFlag} 97 && exec cat /proc/self/limits`], { encoding: 'utf8', timeout: 5000 })).stdout
    for (const processFlag of ['-p', '-u'] as const) {
      let limits: string
      try {
        limits = await probe(processFlag)
      } catch {
        continue
      }
      const soft = (name: string): number => Number(new RegExp(`^${name}\\s+(\\d+)`, 'm').exec(limits)?.[1])
      const hard = (name: string): number => Number(new RegExp(`^${name}\\s+\\d+\\s+(\\d+)`, 'm').exec(limits)?.[1])
      // Hard limits too: a soft limit alone the command could raise again.
      if (soft('Max cpu time') !== 7000 || hard('Max cpu time') !== 7000 || soft('Max processes') !== 97 || hard('Max processes') !== 97) continue
      const fileBytes = soft('Max file size') / 8_000_000
      const dataBytes = soft('Max data size') / 9_000_000
      return Number.isInteger(fileBytes) && fileBytes > 0 && Number.isInteger(dataBytes) && dataBytes > 0 ? { fileBytes, dataBytes, processFlag } : undefined
    }
    return undefined
  } catch {
    return undefined
  }
}

/**
 * The same limits as `limitPrefix`, as shell commands for the launcher
 * (launcher.ts), which then needs no prlimit: one program start fewer per run.
 * Without `processes`, the count is left to the run's pids cgroup:
 * RLIMIT_NPROC counts every process and thread of the service's user, the
 * service's own and other runs' included.
 */
export function ulimitCommands (limits: ResourceLimits, units: UlimitUnits, processes = true): string {
  const file = Math.max(1, Math.floor(limits.maxFileBytes / units.fileBytes))
  const data = Math.max(1, Math.floor(limits.maxMemoryBytes / units.dataBytes))
  return `ulimit -t ${limits.cpuSeconds} && ulimit -f ${file} && ulimit -d ${data}${processes ? ` && ulimit ${units.processFlag} ${limits.maxProcesses}` : ''}`
}
