/**
 * A process-count bound that holds when the service runs as root.
 *
 * RLIMIT_NPROC (`prlimit --nproc`) is not enforced for uid 0, and bubblewrap's
 * user namespace maps the sandbox user to the service's own uid, so a fork
 * bomb of a root service is not bounded by it. Where the pids cgroup
 * controller is writable (cgroup v1 `pids`, or v2 with `pids` enabled for
 * children of our cgroup), each run gets its own cgroup with `pids.max`; the
 * launcher (launcher.ts) joins it before anything else runs, so no fork
 * escapes it.
 * Afterwards every process still in it is killed, even one that left the
 * process group with setsid, and the cgroup is kept, empty, for the next
 * run (up to a few; the rest are removed).
 */
import { mkdirSync, readdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs'
import { setTimeout as sleep } from 'node:timers/promises'
import path from 'node:path'
import { shellQuote } from './launcher.ts'

const V1_MOUNT = '/sys/fs/cgroup/pids'
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

/** The directory under which per-run pids cgroups can be made, or undefined. */
function candidateBases (): Array<{ base: string, v1: boolean }> {
  const bases: Array<{ base: string, v1: boolean }> = []
  try {
    const v1 = ownCgroup((c) => c.split(',').includes('pids'))
    if (v1 !== undefined) bases.push({ base: path.join(V1_MOUNT, v1), v1: true })
    const v2 = ownCgroup((c) => c === '')
    if (v2 !== undefined) {
      const base = path.join(V2_MOUNT, v2)
      if (readFileSync(path.join(base, 'cgroup.subtree_control'), 'utf8').split(/\s+/).includes('pids')) bases.push({ base, v1: false })
    }
  } catch {
    // No /proc/self/cgroup or no v2 hierarchy here: no cgroups.
  }
  return bases
}

function pidsIn (dir: string): number[] {
  try {
    // A process of another PID namespace reads as 0, which process.kill would take for this process's own group.
    return readFileSync(path.join(dir, 'cgroup.procs'), 'utf8').split('\n').map(Number).filter((pid) => Number.isInteger(pid) && pid > 0)
  } catch {
    return []
  }
}

/** Empty cgroups kept for reuse, by base and pids.max: a run then costs no mkdir, write or rmdir. */
const free = new Map<string, string[]>()
const MAX_FREE = 16
/** Names are unique in the process, whichever runner makes them. */
let counter = 0

/** The processes the cgroup's pids.max counts now, zombies not yet reaped included. */
function charged (dir: string): number {
  try {
    return Number(readFileSync(path.join(dir, 'pids.current'), 'utf8'))
  } catch {
    return 0
  }
}

/** Kept cgroups are removed when the service exits (they are empty: nothing to kill). */
function removeKept (): void {
  for (const dirs of free.values()) for (const dir of dirs) try { rmdirSync(dir) } catch {}
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

export class PidsCgroups {
  readonly #base: string
  /** cgroup v1, where a task can move itself through `tasks`. */
  readonly #v1: boolean

  private constructor (base: string, v1: boolean) {
    this.#base = base
    this.#v1 = v1
    if (!process.listeners('exit').includes(removeKept)) process.once('exit', removeKept)
  }

  /** Pids cgroups when this process may create them (probed by making and removing one), else undefined. */
  static detect (): PidsCgroups | undefined {
    for (const { base, v1 } of candidateBases()) {
      const probe = path.join(base, `toolport-probe-${process.pid}`)
      try {
        mkdirSync(probe)
        writeFileSync(path.join(probe, 'pids.max'), '1')
        rmdirSync(probe)
        removeStale(base)
        return new PidsCgroups(base, v1)
      } catch {
        try { rmdirSync(probe) } catch {}
      }
    }
    return undefined
  }

  /** An empty cgroup that admits at most `maxProcesses` processes: a kept one, or a fresh one. */
  create (maxProcesses: number): RunCgroup {
    const dir = free.get(this.#key(maxProcesses))?.pop() ?? this.#make(maxProcesses)
    const killAll = (): number => killEveryProcessIn(dir)
    const release = async (): Promise<void> => {
      // Killed processes leave the cgroup once reaped, usually within a millisecond or two:
      // look again soon, then less often, for about a second in all.
      for (let attempt = 0; attempt < 60; attempt++) {
        if (killAll() === 0) {
          // A killed process leaves cgroup.procs when it exits, but counts against pids.max until reaped: a cgroup
          // that still counts one is not kept (the next run in it could not fork), and rmdir takes it all the same.
          if (charged(dir) > 0 || !this.#keep(maxProcesses, dir)) try { rmdirSync(dir) } catch {}
          return
        }
        await sleep(Math.min(20, 2 ** attempt))
      }
      // Still not empty after a second (a process stuck in the kernel): not reused; removed if it can be.
      try { rmdirSync(dir) } catch {}
    }
    const procsFile = path.join(dir, 'cgroup.procs')
    return { procsFile, join: this.#joinCommand(dir), pids: () => pidsIn(dir), killAll: () => { killAll() }, release }
  }

  /**
   * How the launcher (a single-threaded shell) moves itself in. Moving a
   * process through `cgroup.procs` takes a global lock whose write side waits
   * for an RCU grace period: about 0.9 ms a run here. cgroup v1 lets a task
   * move just itself through `tasks` (writing 0) without that lock; for a
   * process of one thread that is the same move.
   */
  #joinCommand (dir: string): string {
    return this.#v1
      ? `echo 0 > ${shellQuote(path.join(dir, 'tasks'))}`
      : `echo $$ > ${shellQuote(path.join(dir, 'cgroup.procs'))}`
  }

  #make (maxProcesses: number): string {
    const dir = path.join(this.#base, `toolport-${process.pid}-${++counter}`)
    mkdirSync(dir)
    writeFileSync(path.join(dir, 'pids.max'), String(maxProcesses))
    return dir
  }

  /** Keeps an empty cgroup for the next run; false when enough are kept already. */
  #keep (maxProcesses: number, dir: string): boolean {
    const kept = free.get(this.#key(maxProcesses)) ?? []
    if (kept.length >= MAX_FREE) return false
    kept.push(dir)
    free.set(this.#key(maxProcesses), kept)
    return true
  }

  #key (maxProcesses: number): string {
    return `${this.#base}\u0000${maxProcesses}`
  }
}
