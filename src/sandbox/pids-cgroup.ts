/**
 * A process-count bound that holds when the service runs as root.
 *
 * RLIMIT_NPROC (`prlimit --nproc`) is not enforced for uid 0, and bubblewrap's
 * user namespace maps the sandbox user to the service's own uid, so a fork
 * bomb of a root service is not bounded by it. Where the pids cgroup
 * controller is writable (cgroup v1 `pids`, or v2 with `pids` enabled for
 * children of our cgroup), each run gets its own cgroup with `pids.max`; a
 * tiny launcher joins it before it execs the sandbox, so no fork escapes it.
 * Afterwards every process still in it is killed, even one that left the
 * process group with setsid, and the cgroup is removed.
 */
import { mkdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs'
import { setTimeout as sleep } from 'node:timers/promises'
import path from 'node:path'

const V1_MOUNT = '/sys/fs/cgroup/pids'
const V2_MOUNT = '/sys/fs/cgroup'

export interface RunCgroup {
  /** `sh -c 'join the cgroup; exec "$@"'` to put in front of the command line. */
  prefix: string[]
  /** SIGKILLs every process in the cgroup (safe to call more than once). */
  killAll: () => void
  /** Kills what is left and removes the cgroup. */
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
function candidateBases (): string[] {
  const bases: string[] = []
  try {
    const v1 = ownCgroup((c) => c.split(',').includes('pids'))
    if (v1 !== undefined) bases.push(path.join(V1_MOUNT, v1))
    const v2 = ownCgroup((c) => c === '')
    if (v2 !== undefined) {
      const base = path.join(V2_MOUNT, v2)
      if (readFileSync(path.join(base, 'cgroup.subtree_control'), 'utf8').split(/\s+/).includes('pids')) bases.push(base)
    }
  } catch {
    // No /proc/self/cgroup or no v2 hierarchy here: no cgroups.
  }
  return bases
}

function pidsIn (dir: string): number[] {
  try {
    return readFileSync(path.join(dir, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean).map(Number)
  } catch {
    return []
  }
}

export class PidsCgroups {
  readonly #base: string
  #counter = 0

  private constructor (base: string) {
    this.#base = base
  }

  /** Pids cgroups when this process may create them (probed by making and removing one), else undefined. */
  static detect (): PidsCgroups | undefined {
    for (const base of candidateBases()) {
      const probe = path.join(base, `toolport-probe-${process.pid}`)
      try {
        mkdirSync(probe)
        writeFileSync(path.join(probe, 'pids.max'), '1')
        rmdirSync(probe)
        return new PidsCgroups(base)
      } catch {
        try { rmdirSync(probe) } catch {}
      }
    }
    return undefined
  }

  /** A fresh cgroup that admits at most `maxProcesses` processes. */
  create (maxProcesses: number): RunCgroup {
    const dir = path.join(this.#base, `toolport-${process.pid}-${++this.#counter}`)
    mkdirSync(dir)
    writeFileSync(path.join(dir, 'pids.max'), String(maxProcesses))
    const killAll = (): void => {
      for (const pid of pidsIn(dir)) {
        try { process.kill(pid, 'SIGKILL') } catch {}
      }
    }
    const release = async (): Promise<void> => {
      // Killed processes leave the cgroup once reaped: retry for a moment.
      for (let attempt = 0; attempt < 50; attempt++) {
        killAll()
        try {
          rmdirSync(dir)
          return
        } catch {
          await sleep(20)
        }
      }
    }
    return { prefix: ['/bin/sh', '-c', 'echo $$ > "$0" && exec "$@"', path.join(dir, 'cgroup.procs')], killAll, release }
  }
}
