/**
 * Bounds on a whole run, which hold when the service runs as root: a cgroup
 * per run, with a process count and, where it can be set, a memory size.
 *
 * RLIMIT_NPROC (`prlimit --nproc`) is not enforced for uid 0, and bubblewrap's
 * user namespace maps the sandbox user to the service's own uid, so a fork
 * bomb of a root service is not bounded by it. RLIMIT_DATA bounds one
 * process's private memory: not what a run's many processes hold together,
 * nor pages mapped shared (`mmap(MAP_SHARED|MAP_ANONYMOUS)`, tmpfs files).
 * Where the pids cgroup controller is writable (cgroup v1 `pids`, or v2 with
 * `pids` enabled for children of our cgroup), each run gets its own cgroup
 * with `pids.max`; where the memory controller is writable too (v1 `memory`,
 * or v2 with `memory` enabled), the run's memory is bounded the same way
 * (`memory.limit_in_bytes`, `memory.max`): everything the run's processes
 * hold, shared pages and tmpfs files included, and past it the kernel's OOM
 * killer ends one of the run's own processes, not the service. The launcher
 * (launcher.ts) joins the cgroups before anything else runs, so no fork
 * escapes them.
 * Afterwards every process still in them is killed, even one that left the
 * process group with setsid, and the cgroups are kept, empty, for the next
 * run (up to a few; the rest are removed).
 */
import { mkdirSync, readdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs'
import { setTimeout as sleep } from 'node:timers/promises'
import path from 'node:path'
import { shellQuote } from './launcher.ts'

const V1_MOUNT = '/sys/fs/cgroup'
const V2_MOUNT = '/sys/fs/cgroup'

export interface RunCgroup {
  /** The cgroup's process list. */
  procsFile: string
  /** The shell command by which a launcher moves itself into the cgroup (launcher.ts). */
  join: string
  /** The processes in the cgroup now. */
  pids: () => number[]
  /** SIGKILLs every process in the cgroup (safe to call more than once). */
  killAll: () => void
  /**
   * Kills what is left at once, then waits (up to a second) for it to be
   * gone before the cgroup is kept for another run or removed.
   */
  release: () => Promise<void>
}

/** Our own cgroup path in a hierarchy, from /proc/self/cgroup (`8:pids:/a/b`, `0::/a/b`). */
function ownCgroup (matches: (controllers: string) => boolean): string | undefined {
  const lines = readFileSync('/proc/self/cgroup', 'utf8').split('\n')
  for (const line of lines) {
    const [, controllers, where] = line.split(':')
    if (controllers !== undefined && where !== undefined && matches(controllers)) return where
  }
  return undefined
}

/** The directories under which per-run cgroups of `controller` might be made: v1's hierarchy of it, v2's where it is enabled. */
function candidateBases (controller: 'pids' | 'memory'): Array<{ base: string, v1: boolean }> {
  const bases: Array<{ base: string, v1: boolean }> = []
  try {
    const v1 = ownCgroup((c) => c.split(',').includes(controller))
    if (v1 !== undefined) bases.push({ base: path.join(V1_MOUNT, controller, v1), v1: true })
    const v2 = ownCgroup((c) => c === '')
    if (v2 !== undefined) {
      const base = path.join(V2_MOUNT, v2)
      if (readFileSync(path.join(base, 'cgroup.subtree_control'), 'utf8').split(/\s+/).includes(controller)) bases.push({ base, v1: false })
    }
  } catch {
    // No /proc/self/cgroup or no v2 hierarchy here: no cgroups.
  }
  return bases
}

/** A bound the memory probe writes: any size will do, as nothing joins the probe. */
const MEMORY_PROBE_BYTES = 64 * 1024 * 1024

/** The file that sets a memory cgroup's bound. */
const memoryLimitFile = (v1: boolean): string => v1 ? 'memory.limit_in_bytes' : 'memory.max'

/**
 * Swap goes with the memory bound where the kernel accounts it (v1: memory
 * and swap together; v2: no swap at all), so that a run cannot page out
 * past it; where it does not, there is no file to write.
 */
function boundSwap (dir: string, v1: boolean, maxMemoryBytes: number): void {
  try {
    if (v1) writeFileSync(path.join(dir, 'memory.memsw.limit_in_bytes'), String(maxMemoryBytes))
    else writeFileSync(path.join(dir, 'memory.swap.max'), '0')
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error
  }
}

/** Can a cgroup be made under `base` and given `limit`? (Made, written and removed.) */
function canMake (base: string, limit: { file: string, value: string }): boolean {
  const probe = path.join(base, `toolport-probe-${process.pid}`)
  try {
    mkdirSync(probe)
    writeFileSync(path.join(probe, limit.file), limit.value)
    rmdirSync(probe)
    removeStale(base)
    return true
  } catch {
    try { rmdirSync(probe) } catch {}
    return false
  }
}

function pidsIn (dir: string): number[] {
  try {
    // A process of another PID namespace reads as 0, which process.kill would take for this process's own group.
    return readFileSync(path.join(dir, 'cgroup.procs'), 'utf8').split('\n').map(Number).filter((pid) => Number.isInteger(pid) && pid > 0)
  } catch {
    return []
  }
}

/** A run's cgroups: the pids one, and the memory one where that is another directory (cgroup v1, or v2 beside v1 pids). */
interface RunDirs {
  pids: string
  memory?: string | undefined
}

/** What a run's cgroups bound. */
export interface RunLimits {
  maxProcesses: number
  maxMemoryBytes: number
}

/** Empty cgroups kept for reuse, by base and bounds: a run then costs no mkdir, write or rmdir. */
const free = new Map<string, RunDirs[]>()
const MAX_FREE = 16
/** Names are unique in the process, whichever runner makes them. */
let counter = 0

/** A count a cgroup file holds (0 when it cannot be read). */
function countIn (dir: string, file: string): number {
  try {
    return Number(readFileSync(path.join(dir, file), 'utf8'))
  } catch {
    return 0
  }
}

/**
 * Whether a run left anything counting against the bounds of its cgroups:
 * processes not yet reaped (pids.max), or memory still charged (a file it
 * left in a tmpfs such as the host's /dev/shm, without bubblewrap), which
 * the next run in them could not use.
 */
function charged (dirs: RunDirs, memory: Base | undefined): boolean {
  if (countIn(dirs.pids, 'pids.current') > 0) return true
  return memory !== undefined && countIn(dirs.memory ?? dirs.pids, memory.v1 ? 'memory.usage_in_bytes' : 'memory.current') > 0
}

function removeDirs (dirs: RunDirs): void {
  for (const dir of [dirs.pids, dirs.memory]) if (dir !== undefined) try { rmdirSync(dir) } catch {}
}

/** Kept cgroups are removed when the service exits (they are empty: nothing to kill). */
function removeKept (): void {
  for (const kept of free.values()) for (const dirs of kept) removeDirs(dirs)
}

/** Sends SIGKILL to every process in the cgroup at `dir`; answers how many there were. */
function killEveryProcessIn (dir: string): number {
  const pids = pidsIn(dir)
  for (const pid of pids) {
    try { process.kill(pid, 'SIGKILL') } catch {}
  }
  return pids.length
}

function alive (pid: number): boolean {
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM'
  }
}

/**
 * The cgroups of a service that is gone (killed before it could remove
 * them): what still runs in them is its commands, which outlived it
 * (without bubblewrap nothing ends them with it), so they are killed; the
 * cgroup is then removed, or, while the kernel still reaps them, at the next start.
 */
function removeStale (base: string): void {
  for (const name of readdirSync(base)) {
    const owner = /^toolport-(\d+)-\d+$/.exec(name)?.[1]
    if (owner === undefined || Number(owner) === process.pid || alive(Number(owner))) continue
    killEveryProcessIn(path.join(base, name))
    try { rmdirSync(path.join(base, name)) } catch {}
  }
}

/** Where a hierarchy's cgroups are made; in v1 a task can move itself through `tasks`. */
interface Base {
  base: string
  v1: boolean
}

export class RunCgroups {
  readonly #pids: Base
  /** Where memory is bounded: in the pids cgroup itself when it is the same base (v2), else in a cgroup of its own. */
  readonly #memory: Base | undefined

  private constructor (pids: Base, memory: Base | undefined) {
    this.#pids = pids
    this.#memory = memory
    if (!process.listeners('exit').includes(removeKept)) process.once('exit', removeKept)
  }

  /** Run cgroups when this process may create pids cgroups (probed by making and removing one), else undefined; memory is bounded where it may create memory cgroups too. */
  static detect (): RunCgroups | undefined {
    const pids = candidateBases('pids').find(({ base }) => canMake(base, { file: 'pids.max', value: '1' }))
    if (pids === undefined) return undefined
    const memory = candidateBases('memory').find(({ base, v1 }) => canMake(base, { file: memoryLimitFile(v1), value: String(MEMORY_PROBE_BYTES) }))
    return new RunCgroups(pids, memory)
  }

  /** Whether a run's memory is bounded as a whole (a memory cgroup per run). */
  get boundsMemory (): boolean {
    return this.#memory !== undefined
  }

  /** Empty cgroups that admit at most `limits.maxProcesses` processes and `limits.maxMemoryBytes` of memory: kept ones, or fresh ones. */
  create (limits: RunLimits): RunCgroup {
    const key = this.#key(limits)
    const dirs = free.get(key)?.pop() ?? this.#make(limits)
    const killAll = (): number => killEveryProcessIn(dirs.pids) + (dirs.memory === undefined ? 0 : killEveryProcessIn(dirs.memory))
    const release = async (): Promise<void> => {
      // Killed processes leave the cgroup once reaped, usually within a millisecond or two:
      // look again soon, then less often, for about a second in all.
      for (let attempt = 0; attempt < 60; attempt++) {
        if (killAll() === 0) {
          // A killed process leaves cgroup.procs when it exits, but counts against pids.max until reaped, and memory a
          // run left charged stays so: cgroups still charged are not kept (the next run in them could not fork or
          // allocate), and rmdir takes them all the same.
          if (charged(dirs, this.#memory) || !this.#keep(key, dirs)) removeDirs(dirs)
          return
        }
        await sleep(Math.min(20, 2 ** attempt))
      }
      // Still not empty after a second (a process stuck in the kernel): not reused; removed if it can be.
      removeDirs(dirs)
    }
    const join = [joinCommand(dirs.pids, this.#pids.v1), dirs.memory === undefined ? undefined : joinCommand(dirs.memory, this.#memory?.v1 === true)]
    return { procsFile: path.join(dirs.pids, 'cgroup.procs'), join: join.filter(Boolean).join(' && '), pids: () => pidsIn(dirs.pids), killAll: () => { killAll() }, release }
  }

  #make (limits: RunLimits): RunDirs {
    const name = `toolport-${process.pid}-${++counter}`
    const pids = path.join(this.#pids.base, name)
    // v2 with both controllers: one cgroup bounds both.
    const memory = this.#memory === undefined || this.#memory.base === this.#pids.base ? undefined : path.join(this.#memory.base, name)
    mkdirSync(pids)
    try {
      writeFileSync(path.join(pids, 'pids.max'), String(limits.maxProcesses))
      if (this.#memory !== undefined) {
        if (memory !== undefined) mkdirSync(memory)
        const dir = memory ?? pids
        writeFileSync(path.join(dir, memoryLimitFile(this.#memory.v1)), String(limits.maxMemoryBytes))
        boundSwap(dir, this.#memory.v1, limits.maxMemoryBytes)
      }
    } catch (error) {
      // Nothing of a run that cannot start is left behind.
      removeDirs({ pids, memory })
      throw error
    }
    return { pids, memory }
  }

  /** Keeps empty cgroups for the next run; false when enough are kept already. */
  #keep (key: string, dirs: RunDirs): boolean {
    const kept = free.get(key) ?? []
    if (kept.length >= MAX_FREE) return false
    kept.push(dirs)
    free.set(key, kept)
    return true
  }

  #key (limits: RunLimits): string {
    return `${this.#pids.base}\u0000${limits.maxProcesses}\u0000${this.#memory === undefined ? '' : limits.maxMemoryBytes}`
  }
}

/**
 * How the launcher (a single-threaded shell) moves itself into the cgroup at
 * `dir`. Moving a process through `cgroup.procs` takes a global lock whose
 * write side waits for an RCU grace period: about 0.9 ms a run here. cgroup
 * v1 lets a task move just itself through `tasks` (writing 0) without that
 * lock; for a process of one thread that is the same move.
 */
function joinCommand (dir: string, v1: boolean): string {
  return v1
    ? `echo 0 > ${shellQuote(path.join(dir, 'tasks'))}`
    : `echo $$ > ${shellQuote(path.join(dir, 'cgroup.procs'))}`
}
