/**
 * The process runners for real: bubblewrap's view of the filesystem (a
 * writable workspace, a read-only root, a private /tmp per run), what a
 * missing program looks like in each mode, and the choice of mode at start
 * as /readyz and /metrics report it.
 */
import { constants, existsSync, readdirSync, readFileSync } from 'node:fs'
import { mkdir, open, realpath, rename, writeFile } from 'node:fs/promises'
import { execa } from 'execa'
import path from 'node:path'
import { pino } from 'pino'
import { describe, expect, it } from 'vitest'
import { parseConfig } from '../../src/config.ts'
import { createRunner } from '../../src/sandbox/index.ts'
import { findPrlimit } from '../../src/sandbox/limits.ts'
import { PlainRunner } from '../../src/sandbox/plain-runner.ts'
import { fillPasses, passedStdio } from '../../src/sandbox/process.ts'
import type { ProcessRunner, RunOptions } from '../../src/sandbox/types.ts'
import { buildTestApp, tempDir } from '../helper.ts'
import { processesWith, uniqueSleepSeconds } from '../support/processes.ts'

const log = pino({ level: 'silent' })

async function runnerOf (mode: 'bwrap' | 'none'): Promise<ProcessRunner> {
  return createRunner(parseConfig({ sandbox: { mode } }).sandbox, { log })
}

async function run (runner: ProcessRunner, cwd: string, script: string, extra: Partial<RunOptions> = {}) {
  return runner.run({ command: 'sh', args: ['-c', script], cwd, timeoutMs: 15_000, signal: new AbortController().signal, maxOutputBytes: 65_536, ...extra })
}

describe('the bubblewrap runner', () => {
  it('runs in the workspace as an unprivileged user, with the workspace writable and shared with the host', async () => {
    const runner = await runnerOf('bwrap')
    expect(runner.mode).toBe('bwrap')
    const cwd = await realpath(await tempDir())
    const result = await run(runner, cwd, 'pwd; echo "$HOME"; id -u; echo hi > made.txt; exit 3')
    expect(result.exitCode).toBe(3)
    expect(result.stdout).toBe(`${cwd}\n${cwd}\n65534\n`)
    expect(readFileSync(path.join(cwd, 'made.txt'), 'utf8')).toBe('hi\n')
  })

  it('binds the directory it is handed open, not what its path names by the start, and gives the command no descriptor of it', async () => {
    const runner = await runnerOf('bwrap')
    const root = await realpath(await tempDir())
    const cwd = path.join(root, 'ws')
    await mkdir(cwd)
    // As a start holds it: a path descriptor (O_PATH), which needs no read permission.
    const held = await open(cwd, 0o10000000 | constants.O_DIRECTORY)
    try {
      // Removed and made again under the same path (another instance's delete and create) before the start.
      await rename(cwd, path.join(root, 'trashed'))
      await mkdir(cwd)
      const launch = await runner.prepare({ command: 'sh', args: ['-c', 'echo old > here.txt; for fd in /proc/self/fd/*; do readlink "$fd"; done; true'], cwd, directory: held.fd })
      const running = execa(launch.file, launch.args, { cwd: launch.cwd, env: launch.env, extendEnv: false, stdio: ['ignore', 'pipe', 'pipe', ...passedStdio(launch.passes) as Array<'pipe'>], reject: false })
      fillPasses(running.stdio, launch.passes)
      const child = await running
      launch.release()
      expect(child.exitCode, child.stderr).toBe(0)
      expect(readdirSync(cwd)).toEqual([])
      expect(readFileSync(path.join(root, 'trashed', 'here.txt'), 'utf8')).toBe('old\n')
      // No descriptor of the workspace's directory (whose '..' would lead out of the sandbox).
      expect(child.stdout).not.toContain(root)
      expect(child.stdout).not.toContain('/ws')
    } finally {
      await held.close()
    }
  })

  it('keeps the root read-only and gives each run its own empty /tmp', async () => {
    const runner = await runnerOf('bwrap')
    const cwd = await realpath(await tempDir())
    const name = `toolport-private-${process.pid}-${Date.now()}`
    const first = await run(runner, cwd, `echo one > /tmp/${name} && cat /tmp/${name}; touch /usr/${name} 2>&1; echo "usr=$?"`)
    expect(first.stdout).toContain('one\n')
    expect(first.stdout).toMatch(/Read-only file system/)
    expect(first.stdout).toMatch(/usr=[1-9]/)
    expect(existsSync(`/tmp/${name}`)).toBe(false)
    const second = await run(runner, cwd, `test -e /tmp/${name} && echo present || echo absent`)
    expect(second.stdout).toBe('absent\n')
  })

  it('keeps the kernel\'s settings read-only (as root, /proc/sys would change the host)', async () => {
    const runner = await runnerOf('bwrap')
    const cwd = await realpath(await tempDir())
    // The hostname is the sandbox's own (a UTS namespace): writing it is harmless, and refused only by the read-only mount.
    const result = await run(runner, cwd, 'echo toolport-sandbox > /proc/sys/kernel/hostname; echo "rc=$?"; grep -E " /proc/(sys|sysrq-trigger) " /proc/self/mountinfo | cut -d" " -f5,6')
    expect(result.stdout).toMatch(/^rc=[1-9]/)
    expect(result.stderr).toMatch(/Read-only file system|Permission denied/)
    const mounts = result.stdout.split('\n').slice(1).filter(Boolean)
    expect(mounts.map((line) => line.split(' ')[0])).toEqual(expect.arrayContaining(['/proc/sys']))
    for (const line of mounts) expect(line.split(' ')[1]).toMatch(/(^|,)ro(,|$)/)
  })

  it('lets a process read, but not write, its read-only extra paths; extra variables arrive', async () => {
    const runner = await runnerOf('bwrap')
    const cwd = await realpath(await tempDir())
    const extra = await realpath(await tempDir('toolport-ro-'))
    await writeFile(path.join(extra, 'data.txt'), 'shared')
    const result = await run(runner, cwd, `cat '${extra}/data.txt'; echo " $TOOL_VAR"; echo x > '${extra}/new.txt' 2>/dev/null; echo "write=$?"`, { readOnlyPaths: [extra], env: { TOOL_VAR: 'v1' } })
    expect(result.stdout).toMatch(/^shared v1\nwrite=[1-9]\n$/)
    expect(readdirSync(extra)).toEqual(['data.txt'])
  })

  it('hides the workspaces root and the listed paths', async () => {
    const cwdRoot = await realpath(await tempDir())
    await mkdir(path.join(cwdRoot, 'mine'))
    await mkdir(path.join(cwdRoot, 'other'))
    await writeFile(path.join(cwdRoot, 'other', 'secret'), 'x')
    const hiddenFile = path.join(await realpath(await tempDir()), 'config.yaml')
    await writeFile(hiddenFile, 'token: abc')
    const runner = await createRunner(parseConfig({ sandbox: { mode: 'bwrap' } }).sandbox, { log, hidePaths: [cwdRoot, hiddenFile] })
    const result = await run(runner, path.join(cwdRoot, 'mine'), `ls '${cwdRoot}'; cat '${hiddenFile}' | wc -c`)
    expect(result.stdout).toBe('mine\n0\n')
  })
})

describe('both runners', () => {
  for (const mode of ['bwrap', 'none'] as const) {
    it(`report a program that does not exist (mode ${mode})`, async () => {
      const runner = await runnerOf(mode)
      const cwd = await realpath(await tempDir())
      const result = await runner.run({ command: 'no-such-program-toolport', args: [], cwd, timeoutMs: 10_000, signal: new AbortController().signal, maxOutputBytes: 4096 })
      expect(result.notFound).toBe(true)
      expect(result.exitCode).toBe(127)
    })

    it(`bound processes by max_processes (mode ${mode})`, async () => {
      const runner = await createRunner(parseConfig({ sandbox: { mode, max_processes: 10 } }).sandbox, { log })
      const cwd = await realpath(await tempDir())
      const result = await run(runner, cwd, 'for i in $(seq 1 50); do sleep 5 >/dev/null 2>&1 & echo $i; done')
      const started = Math.max(...result.stdout.trim().split('\n').map(Number))
      expect(started).toBeGreaterThanOrEqual(3)
      expect(started).toBeLessThanOrEqual(10)
    })

    it(`bound a run's memory as a whole by max_memory_bytes, not only each process's (mode ${mode})`, async () => {
      const runner = await createRunner(parseConfig({ sandbox: { mode, max_memory_bytes: 64 * 2 ** 20 } }).sandbox, { log })
      const cwd = await realpath(await tempDir())
      // Four shells holding 25 MB each (in a 32 MiB buffer): each within its own RLIMIT_DATA, together past the run's bound.
      const hold = 'x=$(head -c 25000000 /dev/zero | tr "\\000" a); sleep 1; echo held'
      const result = await run(runner, cwd, `for i in 1 2 3 4; do (${hold}) & done; wait`)
      expect(result.stdout.split('\n').filter((line) => line === 'held').length).toBeLessThan(4)
      // One process that stays within the bound, with its files' pages, is not disturbed.
      const within = await run(runner, cwd, `(${hold}); head -c 100000000 /dev/zero > big; echo "written $?"`)
      expect(within.stdout).toBe('held\nwritten 0\n')
    })
  }
})

describe('the plain runner without a pids cgroup', () => {
  it('ends a run whose setsid orphan still holds the output pipes (it cannot be killed by group)', async () => {
    const runner = new PlainRunner({ cpuSeconds: 60, maxFileBytes: 1 << 20, maxProcesses: 64, maxMemoryBytes: 1 << 30 }, findPrlimit())
    const cwd = await realpath(await tempDir())
    const marker = uniqueSleepSeconds()
    try {
      // The direct child exits at once; the orphan keeps stdout open far longer than the 15 s timeout.
      const result = await run(runner, cwd, `setsid sleep ${marker} & echo started`)
      expect([result.exitCode, result.stdout, result.timedOut]).toEqual([0, 'started\n', false])
    } finally {
      for (const pid of processesWith(marker)) process.kill(pid, 'SIGKILL')
    }
  })
})

describe('the sandbox mode at start', () => {
  it('auto picks bubblewrap here, and /readyz and /metrics say so', async () => {
    const app = await buildTestApp({ sandbox: { mode: 'auto' } })
    expect(app.runtime.runner.mode).toBe('bwrap')
    const ready = await app.inject({ method: 'GET', url: '/readyz' })
    expect(ready.json()).toMatchObject({ status: 'ready', sandbox: 'bwrap' })
    const metrics = await app.inject({ method: 'GET', url: '/metrics' })
    expect(metrics.body).toContain('toolport_sandbox_mode{mode="bwrap"} 1')
    expect(metrics.body).not.toContain('toolport_sandbox_mode{mode="none"} 1')
  })

  it('none is reported as none', async () => {
    const app = await buildTestApp({ sandbox: { mode: 'none' } })
    expect((await app.inject({ method: 'GET', url: '/readyz' })).json()).toMatchObject({ sandbox: 'none' })
  })
})
