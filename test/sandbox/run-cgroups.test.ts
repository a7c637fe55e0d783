/**
 * Per-run cgroups (a process count, and a memory size where memory cgroups
 * can be made) are kept for reuse once empty. Reuse must never hand
 * a run a cgroup that still holds a process, nor one with another bound.
 * (The service runs as root here, where these cgroups are what bounds a
 * fork bomb; where they cannot be made, detect() says so.)
 */
import { spawn, spawnSync } from 'node:child_process'
import { existsSync, mkdirSync, readFileSync, rmdirSync, rmSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { launcherArgv } from '../../src/sandbox/launcher.ts'
import { type RunCgroup, RunCgroups } from '../../src/sandbox/run-cgroups.ts'
import { onCleanup } from '../support/temp.ts'

const cgroups = RunCgroups.detect()

/** Running (a zombie waiting for its new parent to reap it counts as dead). */
function alive (pid: number): boolean {
  try {
    return readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.[0] !== 'Z'
  } catch {
    return false
  }
}

/** Starts `sh -c script` through the launcher joining `cgroup`; resolves with the pid the command printed once it runs. */
function startIn (cgroup: RunCgroup, script: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const argv = launcherArgv(cgroup.join, 'sh', ['-c', script])
    const child = spawn(argv[0] as string, argv.slice(1), { stdio: ['ignore', 'pipe', 'inherit'], detached: true })
    child.once('error', reject)
    child.stdout.once('data', (chunk: Buffer) => resolve(Number(chunk.toString().trim())))
  })
}

describe('run cgroups', () => {
  it('are available here, as root with a writable pids controller (or reported missing otherwise)', () => {
    if (process.getuid?.() !== 0) expect(cgroups === undefined || cgroups instanceof RunCgroups).toBe(true)
    else expect(cgroups).toBeInstanceOf(RunCgroups)
  })

  it('bound a run\'s memory where memory cgroups can be made (as root here): the command runs in a cgroup of that bound', async () => {
    if (!cgroups) return
    if (process.getuid?.() === 0) expect(cgroups.boundsMemory).toBe(true)
    if (!cgroups.boundsMemory) return
    const run = cgroups.create({ maxProcesses: 8, maxMemoryBytes: 48 * 2 ** 20 })
    const pid = await startIn(run, 'echo $$; exec sleep 30')
    // `4:memory:/a/b` (v1) or else `0::/a/b` (v2, whose memory.max is the bound).
    const entries = readFileSync(`/proc/${pid}/cgroup`, 'utf8').trim().split('\n').map((each) => each.split(':'))
    const v1 = entries.find(([, controllers]) => controllers?.split(',').includes('memory'))
    const where = (v1 ?? entries.find(([id]) => id === '0'))?.[2] ?? ''
    const limitFile = v1 ? path.join('/sys/fs/cgroup/memory', where, 'memory.limit_in_bytes') : path.join('/sys/fs/cgroup', where, 'memory.max')
    expect(where).toMatch(/toolport-\d+-\d+$/)
    expect(readFileSync(limitFile, 'utf8').trim()).toBe(String(48 * 2 ** 20))
    // Swap goes with it where the kernel accounts swap (here: v1 with memsw), so that paging out does not pass the bound.
    const swapFile = path.join(path.dirname(limitFile), v1 ? 'memory.memsw.limit_in_bytes' : 'memory.swap.max')
    if (existsSync(swapFile)) expect(readFileSync(swapFile, 'utf8').trim()).toBe(v1 ? String(48 * 2 ** 20) : '0')
    await run.release()
    expect(alive(pid)).toBe(false)
    expect(existsSync(limitFile) ? readFileSync(path.join(path.dirname(limitFile), 'cgroup.procs'), 'utf8').trim() : '').toBe('')
  })

  it('keep no cgroup whose run left memory charged to it (a file in a tmpfs): the next run gets a fresh one, with its whole bound', async () => {
    if (!cgroups?.boundsMemory) return
    const limits = { maxProcesses: 8, maxMemoryBytes: 64 * 2 ** 20 }
    const file = `/dev/shm/toolport-charged-${process.pid}`
    onCleanup(async () => { rmSync(file, { force: true }) })
    const run = cgroups.create(limits)
    const pid = await startIn(run, `head -c 8000000 /dev/zero > ${file}; echo $$; exec sleep 0.1`)
    for (let i = 0; i < 100 && alive(pid); i++) await new Promise((resolve) => setTimeout(resolve, 20))
    await run.release()
    const next = cgroups.create(limits)
    expect(next.procsFile).not.toBe(run.procsFile)
    await next.release()
  })

  it('hand an emptied cgroup to the next run with the same bound, and a fresh one for another bound', async () => {
    if (!cgroups) return
    const first = cgroups.create({ maxProcesses: 7, maxMemoryBytes: 2 ** 30 })
    const procs = first.procsFile
    await first.release()
    const second = cgroups.create({ maxProcesses: 7, maxMemoryBytes: 2 ** 30 })
    expect(second.procsFile).toBe(procs)
    expect(readFileSync(path.join(path.dirname(procs), 'pids.max'), 'utf8').trim()).toBe('7')
    const other = cgroups.create({ maxProcesses: 9, maxMemoryBytes: 2 ** 30 })
    expect(other.procsFile).not.toBe(procs)
    expect(readFileSync(path.join(path.dirname(other.procsFile), 'pids.max'), 'utf8').trim()).toBe('9')
    await Promise.all([second.release(), other.release()])
  })

  it('reuse a cgroup only once nothing counts against its bound (zombies not yet reaped included)', async () => {
    if (!cgroups) return
    const run = cgroups.create({ maxProcesses: 11, maxMemoryBytes: 2 ** 30 })
    const dir = path.dirname(run.procsFile)
    // The background sleep's parent becomes the exec'd sleep, which never reaps it: killed, it leaves a zombie for init.
    await startIn(run, 'sleep 0.05 & echo $$; exec sleep 30')
    await new Promise((resolve) => setTimeout(resolve, 200))
    await run.release()
    const next = cgroups.create({ maxProcesses: 11, maxMemoryBytes: 2 ** 30 })
    if (next.procsFile === run.procsFile) expect(readFileSync(path.join(dir, 'pids.current'), 'utf8').trim()).toBe('0')
    await next.release()
  })

  it('kill what a run left behind (even in a new session) before its cgroup is reused', async () => {
    if (!cgroups) return
    const run = cgroups.create({ maxProcesses: 16, maxMemoryBytes: 2 ** 30 })
    const procs = run.procsFile
    const leftover = await startIn(run, 'setsid sleep 60 & echo $!; wait')
    expect(alive(leftover)).toBe(true)
    expect(readFileSync(procs, 'utf8').split('\n')).toContain(String(leftover))
    await run.release()
    // Killed, and gone from the cgroup: reused when the kernel has let go of it, else a fresh one is made.
    expect(existsSync(procs) ? readFileSync(procs, 'utf8').trim() : '').toBe('')
    const next = cgroups.create({ maxProcesses: 16, maxMemoryBytes: 2 ** 30 })
    if (next.procsFile === procs) expect(readFileSync(path.join(path.dirname(procs), 'pids.current'), 'utf8').trim()).toBe('0')
    await next.release()
    for (let i = 0; i < 100 && alive(leftover); i++) await new Promise((resolve) => setTimeout(resolve, 20))
    expect(alive(leftover)).toBe(false)
  })

  it('kill, at the next start, what a service killed before it could end its runs left running, and remove their cgroups', async () => {
    if (!cgroups) return
    const run = cgroups.create({ maxProcesses: 5, maxMemoryBytes: 2 ** 30 })
    const base = path.dirname(path.dirname(run.procsFile))
    await run.release()
    // The cgroup of a service that is gone (its pid now nobody's), holding a command that outlived it.
    const gone = spawnSync('true').pid
    const stale = path.join(base, `toolport-${gone}-1`)
    mkdirSync(stale)
    onCleanup(async () => { try { rmdirSync(stale) } catch {} })
    const outlived = spawn('sleep', ['60'], { stdio: 'ignore' })
    writeFileSync(path.join(stale, 'cgroup.procs'), String(outlived.pid))
    RunCgroups.detect()
    for (let i = 0; i < 100 && alive(outlived.pid ?? 0); i++) await new Promise((resolve) => setTimeout(resolve, 20))
    expect(alive(outlived.pid ?? 0)).toBe(false)
    // Removed once the kernel has let go of the killed command: at this start, or the next.
    RunCgroups.detect()
    expect(existsSync(stale)).toBe(false)
  })
})
