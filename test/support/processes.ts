/** Looking for processes on the host: by pid, or by a marker in their command line. */
import { readdirSync, readFileSync } from 'node:fs'
import { readFile } from 'node:fs/promises'
import { setTimeout as sleep } from 'node:timers/promises'

/** Pids of the host's processes whose command line contains `marker`. */
export function processesWith (marker: string): number[] {
  const found: number[] = []
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue
    try {
      if (readFileSync(`/proc/${entry}/cmdline`, 'utf8').includes(marker)) found.push(Number(entry))
    } catch {
      // Gone meanwhile.
    }
  }
  return found
}

/** Waits (up to `timeoutMs`) until no process carries `marker`; answers those still there. */
export async function survivorsWith (marker: string, timeoutMs = 3000): Promise<number[]> {
  const deadline = Date.now() + timeoutMs
  let left = processesWith(marker)
  while (left.length > 0 && Date.now() < deadline) {
    await sleep(50)
    left = processesWith(marker)
  }
  return left
}

/** A marker unlikely to appear anywhere else: a number of seconds for `sleep`. */
export function uniqueSleepSeconds (): string {
  return `${1000 + Math.floor(Math.random() * 8000)}.${process.pid % 1000}${Math.floor(Math.random() * 1000)}`
}

/** A process counts as alive unless it is gone or a zombie waiting to be reaped (`kill(pid, 0)` succeeds on zombies). */
export async function alive (pid: number): Promise<boolean> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8')
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z'
  } catch {
    return false
  }
}
