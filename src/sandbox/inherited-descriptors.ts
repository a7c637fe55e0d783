/**
 * Descriptors the service inherited from whatever started it. Node.js opens
 * its own with close-on-exec, but leaves an inherited one (a shell's
 * `exec 200>>file`, a supervisor's pipe) open, and every process the service
 * starts gets it in turn, through bubblewrap too: a sandboxed command could
 * write to a file outside its workspace through it. They are closed once, at
 * start-up, before any process is started.
 */
import { closeSync, readdirSync, readFileSync } from 'node:fs'

/** O_CLOEXEC as /proc/<pid>/fdinfo shows it (octal, in its `flags:` line). */
const O_CLOEXEC = 0o2000000

/**
 * Closes every descriptor past stdio that a started process would inherit; answers how many it
 * closed. Node's own (an IPC channel to a parent Node.js process included) are close-on-exec.
 */
export function closeInheritedDescriptors (): number {
  let names: string[]
  try {
    names = readdirSync('/proc/self/fd')
  } catch {
    // No /proc: nothing to look at (and no sandbox to leak into).
    return 0
  }
  let closed = 0
  for (const name of names) {
    const fd = Number(name)
    if (fd <= 2) continue
    let flags: string | undefined
    try {
      flags = /^flags:\s+([0-7]+)$/m.exec(readFileSync(`/proc/self/fdinfo/${fd}`, 'utf8'))?.[1]
    } catch {
      // Gone since the listing (the listing's own descriptor).
      continue
    }
    if (flags === undefined || (Number.parseInt(flags, 8) & O_CLOEXEC) !== 0) continue
    try {
      closeSync(fd)
      closed++
    } catch {}
  }
  return closed
}
