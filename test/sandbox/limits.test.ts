/**
 * Resource limits reach the command, whichever way they are set: by the
 * pids-cgroup launcher's `ulimit`s (a root service with cgroups, as here) or
 * by prlimit. Read back from the kernel, inside the sandbox and outside it.
 */
import { describe, expect, it } from 'vitest'
import { limitPrefix, probeUlimitUnits, ulimitCommands } from '../../src/sandbox/limits.ts'
import { buildTestApp, exec } from '../helper.ts'

const LIMITS = { cpu_seconds: 42, max_file_bytes: 5 * 1024 * 1024, max_memory_bytes: 768 * 1024 * 1024 }

function soft (limits: string, name: string): number {
  return Number(new RegExp(`^${name}\\s+(\\d+)`, 'm').exec(limits)?.[1])
}

describe('resource limits', () => {
  it('finds how /bin/sh counts ulimit sizes, and writes the limits as ulimit commands', () => {
    const units = probeUlimitUnits()
    expect(units).toBeDefined()
    expect([512, 1024]).toContain(units?.fileBytes)
    expect(units?.dataBytes).toBe(1024)
    expect(ulimitCommands({ cpuSeconds: 42, maxFileBytes: 5 * 1024 * 1024, maxProcesses: 9, maxMemoryBytes: 768 * 1024 * 1024 }, { fileBytes: 512, dataBytes: 1024 }))
      .toBe('ulimit -t 42 && ulimit -f 10240 && ulimit -d 786432')
    expect(limitPrefix('/usr/bin/prlimit', { cpuSeconds: 42, maxFileBytes: 1, maxProcesses: 9, maxMemoryBytes: 2 })).toEqual(['/usr/bin/prlimit', '--cpu=42', '--fsize=1', '--nproc=9', '--data=2', '--'])
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
})
