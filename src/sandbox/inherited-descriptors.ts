/**
 * Descriptors the service inherited from whatever started it. Node.js opens
 * its own with close-on-exec, but leaves an inherited one (a shell's
 * `exec 200>>file`, a supervisor's pipe) open, and every process the service
 * starts gets it in turn, through bubblewrap too: a sandboxed command could
 * write to a file outside its workspace through it. They are closed once, at
 * start-up, before any process is started.
 */
import { closeSync, readdirSync, readFileSync, readlinkSync } from 'node:fs'
import path from 'node:path'
import process from 'node:process'

/** O_CLOEXEC as /proc/<pid>/fdinfo shows it (octal, in its `flags:` line). */
const O_CLOEXEC = 0o2000000

/**
 * Closes every descriptor past stdio that a started process would inherit; answers how many it
 * closed. Node's own (an IPC channel to a parent Node.js process included) are close-on-exec.
 */
export function closeInheritedDescriptors (): number {
  awaitCertificateFiles()
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
    if (flags === undefined || (Number.parseInt(flags, 8) & O_CLOEXEC) !== 0 || isProfilerLog(fd)) continue
    try {
      closeSync(fd)
      closed++
    } catch {}
  }
  return closed
}

/**
 * Node reads `NODE_EXTRA_CA_CERTS` (and, with `--use-system-ca`, the system's certificates) in a
 * thread of its own from start-up, through descriptors that are not close-on-exec: closed under it,
 * the certificates are ignored or Node aborts. Asking for them waits for that thread.
 */
function awaitCertificateFiles (): void {
  const systemCa = process.env['NODE_USE_SYSTEM_CA'] === '1' || [...process.execArgv, process.env['NODE_OPTIONS'] ?? ''].some((flag) => flag.includes('--use-system-ca'))
  if (process.env['NODE_EXTRA_CA_CERTS'] === undefined && !systemCa) return
  process.getBuiltinModule('node:tls').getCACertificates('default')
}

/**
 * A file V8 writes for this process while it runs (`--prof`'s isolate log, `--perf-basic-prof`'s perf map,
 * `--perf-prof`'s jit dump), opened before any of this code and not close-on-exec: closed, V8 would go on
 * writing its lines into whatever took the number next (a client's connection). A profiled service's
 * commands get them too.
 */
function isProfilerLog (fd: number): boolean {
  let name: string
  try {
    name = path.basename(readlinkSync(`/proc/self/fd/${fd}`))
  } catch {
    return false
  }
  const pid = process.pid
  return name === `perf-${pid}.map` || name === `jit-${pid}.dump` || (name.startsWith('isolate-') && name.includes(`-${pid}-`)) || profilerLogNames().has(name)
}

/** The names `--logfile` gives V8's log (with `--no-logfile-per-isolate`, the file itself; `v8.log` by default). */
function profilerLogNames (): Set<string> {
  const flags = [...process.execArgv, ...(process.env['NODE_OPTIONS'] ?? '').split(/\s+/)]
  if (!flags.includes('--no-logfile-per-isolate')) return new Set()
  const named = flags.filter((flag) => flag.startsWith('--logfile=')).map((flag) => path.basename(flag.slice('--logfile='.length)))
  return new Set(named.length > 0 ? named : ['v8.log'])
}
