/**
 * Signalling every process of a run: the one started, its process group,
 * its descendants (found through /proc, so a `setsid` grandchild is found
 * while its parent lives) and its pids cgroup (which holds whatever the run
 * started, orphans included). A signal other than SIGKILL may spare some
 * processes (the sandbox's own, see PreparedLaunch.signalTree).
 */
import { readdirSync, readFileSync } from 'node:fs'

/** The fields of a /proc/PID/stat line after the command name (which may hold spaces and parentheses): the state first. */
function statFields (stat: string): string[] {
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ')
}

/** Every process now, with its /proc/PID/stat fields (`statFields`); none where there is no /proc. */
function everyProcess (): Array<{ pid: number, fields: string[] }> {
  let names: string[]
  try {
    names = readdirSync('/proc')
  } catch {
    return []
  }
  const found: Array<{ pid: number, fields: string[] }> = []
  for (const name of names) {
    if (!/^\d+$/.test(name)) continue
    try {
      found.push({ pid: Number(name), fields: statFields(readFileSync(`/proc/${name}/stat`, 'utf8')) })
    } catch {
      // gone meanwhile
    }
  }
  return found
}

/** The children of each process. */
function parents (): Map<number, number[]> {
  const children = new Map<number, number[]>()
  for (const { pid, fields } of everyProcess()) {
    const ppid = Number(fields[1])
    const list = children.get(ppid) ?? []
    list.push(pid)
    children.set(ppid, list)
  }
  return children
}

/** Every live descendant of `root`. */
export function descendantsOf (root: number): number[] {
  const children = parents()
  const found: number[] = []
  const queue = [root]
  for (let pid = queue.shift(); pid !== undefined; pid = queue.shift()) {
    for (const child of children.get(pid) ?? []) {
      found.push(child)
      queue.push(child)
    }
  }
  return found
}

/** A process as found at one moment: its pid and its start time, which a later process given the same pid does not share. */
export interface FoundProcess {
  pid: number
  startedAt: string
}

/** When `pid` started (clock ticks since boot, /proc/PID/stat field 22); '' when it is gone, or has ended and waits to be reaped (a zombie). */
function startTimeOf (pid: number): string {
  try {
    const fields = statFields(readFileSync(`/proc/${pid}/stat`, 'utf8'))
    return fields[0] === 'Z' || fields[0] === 'X' ? '' : fields[19] ?? ''
  } catch {
    return ''
  }
}

/** `pid` as it is now; undefined when it is gone. */
export function foundProcess (pid: number): FoundProcess | undefined {
  const startedAt = startTimeOf(pid)
  return startedAt === '' ? undefined : { pid, startedAt }
}

/** Every live descendant of `root`, each with its start time; none when `root` is gone (or its pid another's now). */
export function foundDescendantsOf (root: FoundProcess): FoundProcess[] {
  if (startTimeOf(root.pid) !== root.startedAt) return []
  return descendantsOf(root.pid).map((pid) => ({ pid, startedAt: startTimeOf(pid) })).filter((found) => found.startedAt !== '')
}

/** Every live process of the process group `pgid`, each with its start time (orphans of a gone leader included). */
export function foundInGroup (pgid: number): FoundProcess[] {
  return everyProcess().filter(({ fields }) => Number(fields[2]) === pgid).map(({ pid, fields }) => ({ pid, startedAt: fields[19] ?? '' }))
}

/** Signals each of `found` that is still the process found (not another that took its pid since). */
export function signalFound (found: FoundProcess[], signal: NodeJS.Signals): void {
  for (const { pid, startedAt } of found) {
    if (startTimeOf(pid) !== startedAt) continue
    try {
      process.kill(pid, signal)
    } catch {}
  }
}

/** The command name of a process ('' when it is gone). */
export function commandNameOf (pid: number): string {
  try {
    return readFileSync(`/proc/${pid}/comm`, 'utf8').trim()
  } catch {
    return ''
  }
}

export interface RunTree {
  /** The process the run started. */
  pid: number
  /** The pids of the run's cgroup, when it has one. */
  cgroupPids?: () => number[]
  /** Processes a gentle signal leaves alone. */
  spare?: (pid: number) => boolean
}

/** Signals the tree; returns how many processes the signal reached. */
export function signalRunTree (tree: RunTree, signal: NodeJS.Signals): number {
  const targets = new Set([tree.pid, ...descendantsOf(tree.pid), ...(tree.cgroupPids?.() ?? [])])
  let reached = 0
  for (const pid of targets) {
    if (signal !== 'SIGKILL' && tree.spare?.(pid) === true) continue
    try {
      process.kill(pid, signal)
      reached++
    } catch {}
  }
  if (signal === 'SIGKILL') try { process.kill(-tree.pid, 'SIGKILL') } catch {}
  return reached
}
