/**
 * Resource limits reach the command, whichever way they are set: by the
 * pids-cgroup launcher's `ulimit`s (a root service with cgroups, as here) or
 * by prlimit. Read back from the kernel, inside the sandbox and outside it.
 */
import { describe, expect, it } from 'vitest'
import { BwrapRunner } from '../../src/sandbox/bwrap-runner.ts'
import { findPrlimit, limitPrefix, probeUlimitUnits, ulimitCommands, type UlimitUnits } from '../../src/sandbox/limits.ts'
import { PlainRunner } from '../../src/sandbox/plain-runner.ts'
import { tempDir } from '../support/temp.ts'
import { buildTestApp, exec } from '../helper.ts'

const LIMITS = { cpu_seconds: 42, max_file_bytes: 5 * 1024 * 1024, max_memory_bytes: 768 * 1024 * 1024 }

function soft (limits: string, name: string): number {
  return Number(new RegExp(`^${name}\\s+(\\d+)`, 'm').exec(limits)?.[1])
}

describe('resource limits', () => {
  it('finds how /bin/sh counts ulimit sizes, and writes the limits as ulimit commands', async () => {
    const units = await probeUlimitUnits()
    expect(units).toBeDefined()
    expect([512, 1024]).toContain(units?.fileBytes)
    expect(units?.dataBytes).toBe(1024)
    expect(units?.processFlag).toBe('-p')
    expect(ulimitCommands({ cpuSeconds: 42, maxFileBytes: 5 * 1024 * 1024, maxProcesses: 9, maxMemoryBytes: 768 * 1024 * 1024 }, { fileBytes: 512, dataBytes: 1024, processFlag: '-p' }))
      .toBe('ulimit -t 42 && ulimit -f 10240 && ulimit -d 786432 && ulimit -p 9')
    expect(ulimitCommands({ cpuSeconds: 42, maxFileBytes: 5 * 1024 * 1024, maxProcesses: 9, maxMemoryBytes: 768 * 1024 * 1024 }, { fileBytes: 512, dataBytes: 1024, processFlag: '-u' }, false))
      .toBe('ulimit -t 42 && ulimit -f 10240 && ulimit -d 786432')
    expect(limitPrefix('/usr/bin/prlimit', { cpuSeconds: 42, maxFileBytes: 1, maxProcesses: 9, maxMemoryBytes: 2 })).toEqual(['/usr/bin/prlimit', '--cpu=42', '--fsize=1', '--nproc=9', '--data=2', '--'])
  })

  it('runs under the largest max_processes the config takes (bwrap\'s own processes on top of it are past what Linux takes)', async () => {
    const app = await buildTestApp({ sandbox: { mode: 'bwrap', max_processes: 4 * 1024 * 1024 } })
    const answer = await exec(app, 'exec_shell', { command: 'echo ran' })
    expect(answer.body.result).toMatchObject({ exit_code: 0, stdout: 'ran\n' })
  })

  it.each(['none', 'bwrap'])('gives the command exactly the configured limits (sandbox %s)', async (mode) => {
    const app = await buildTestApp({ sandbox: { mode, ...LIMITS } })
    const answer = await exec(app, 'exec_shell', { command: 'cat /proc/self/limits' })
    expect(answer.status).toBe(200)
    const limits = answer.body.result.stdout as string
    expect(soft(limits, 'Max cpu time')).toBe(LIMITS.cpu_seconds)
    expect(soft(limits, 'Max file size')).toBe(LIMITS.max_file_bytes)
    expect(soft(limits, 'Max data size')).toBe(LIMITS.max_memory_bytes)
  })

  // A service that cannot make cgroups (not root, as in the container image) sets the limits with the launcher alone.
  it.each(['none', 'bwrap'] as const)('sets every limit without a cgroup, in one program start for a sh -c script (sandbox %s)', async (mode) => {
    const limits = { cpuSeconds: 42, maxFileBytes: 5 * 1024 * 1024, maxProcesses: 77, maxMemoryBytes: 768 * 1024 * 1024 }
    const ulimits = ulimitCommands(limits, await probeUlimitUnits() as UlimitUnits)
    const cwd = await tempDir('limits-')
    const runner = mode === 'none'
      ? new PlainRunner(limits, findPrlimit(), undefined, ulimits)
      : new BwrapRunner({ network: false, limits, prlimit: findPrlimit(), hidePaths: [], ulimits })
    // $PPID: the shell running the script is the one the runner started (bwrap's child inside the sandbox), not a second one.
    const result = await runner.run({ command: 'sh', args: ['-c', 'cat /proc/self/limits; cat /proc/$$/cmdline | tr "\\0" " "'], cwd, timeoutMs: 10_000, signal: new AbortController().signal, maxOutputBytes: 65_536 })
    expect(result.exitCode).toBe(0)
    expect(soft(result.stdout, 'Max cpu time')).toBe(42)
    expect(soft(result.stdout, 'Max file size')).toBe(limits.maxFileBytes)
    expect(soft(result.stdout, 'Max data size')).toBe(limits.maxMemoryBytes)
    expect(soft(result.stdout, 'Max processes')).toBe(77)
    // The script ran in the launcher's own shell: its command line holds the limits, then the script.
    expect(result.stdout).toMatch(/\/bin\/sh -c .*; ulimit -t 42 .* \|\| exit 126; cat \/proc\/self\/limits/)
  })
})
