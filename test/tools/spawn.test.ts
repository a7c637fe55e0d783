import { existsSync } from 'node:fs'
import { readFile } from 'node:fs/promises'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { parseConfig } from '../../src/config.ts'
import { findPrlimit } from '../../src/sandbox/limits.ts'
import { PlainRunner } from '../../src/sandbox/plain-runner.ts'
import type { RunOptions } from '../../src/sandbox/types.ts'
import { createSpawnTool } from '../../src/tools/spawn.ts'
import { buildTestApp, exec, tempDir } from '../helper.ts'
import { toolContext } from '../support/context.ts'
import { expectProblem } from '../support/problem.ts'
import { alive } from '../support/processes.ts'

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

async function linesOf (file: string, count: number): Promise<string[]> {
  const deadline = Date.now() + 10_000
  for (;;) {
    const lines = existsSync(file) ? (await readFile(file, 'utf8')).split('\n').filter(Boolean) : []
    if (lines.length >= count) return lines
    if (Date.now() > deadline) throw new Error(`${file} has ${lines.length} of ${count} lines`)
    await sleep(20)
  }
}

describe('spawn', () => {
  it('runs a command with literal arguments (no shell) and answers the seed shape', async () => {
    const app = await buildTestApp()
    const answer = await exec(app, 'spawn', { command: 'printf', args: ['%s|', '$HOME; echo x', '`id`', '*'] })
    expect(answer.status).toBe(200)
    expect(answer.body.result).toEqual({ exit_code: 0, stdout: '$HOME; echo x|`id`|*|', stderr: '', command: 'printf', description: '(no description)' })
  })

  it('echoes the description and reports a non-zero exit as a success', async () => {
    const app = await buildTestApp()
    const answer = await exec(app, 'spawn', { command: 'sh', args: ['-c', 'echo out; echo err >&2; exit 4'], description: 'fails on purpose' })
    expect(answer.status).toBe(200)
    expect(answer.body.result).toEqual({ exit_code: 4, stdout: 'out\n', stderr: 'err\n', command: 'sh', description: 'fails on purpose' })
  })

  it('runs in the workspace', async () => {
    const app = await buildTestApp()
    await exec(app, 'write_file', { path: 'here.txt', content: 'x' }, { workspace: 'spawn-cwd' })
    expect((await exec(app, 'spawn', { command: 'ls' }, { workspace: 'spawn-cwd' })).body.result.stdout).toBe('here.txt\n')
  })

  it('answers ExecutionFailed for a command that does not exist, InvalidArgs for bad arguments', async () => {
    const app = await buildTestApp()
    const body = expectProblem(await exec(app, 'spawn', { command: 'no-such-command-xyz' }), 500, 'ExecutionFailed', 'spawn')
    expect(body['detail']).toMatch(/no-such-command-xyz/)
    expectProblem(await exec(app, 'spawn', { command: '' }), 400, 'InvalidArgs', 'spawn')
    expectProblem(await exec(app, 'spawn', { command: 'echo', args: 'not a list' }), 400, 'InvalidArgs', 'spawn')
    expectProblem(await exec(app, 'spawn', { command: 'echo', args: [1, 2] }), 400, 'InvalidArgs', 'spawn')
  })

  it('refuses NUL bytes and an argument over the kernel\'s limit as InvalidArgs, and answers ExecutionFailed for a process that cannot start', async () => {
    const app = await buildTestApp()
    expectProblem(await exec(app, 'spawn', { command: 'echo', args: ['a\u0000b'] }), 400, 'InvalidArgs', 'spawn')
    expectProblem(await exec(app, 'spawn', { command: 'ec\u0000ho' }), 400, 'InvalidArgs', 'spawn')
    // One argument beyond the kernel's 128 KiB per-argument limit.
    expectProblem(await exec(app, 'spawn', { command: 'echo', args: ['x'.repeat(200_000)] }), 400, 'InvalidArgs', 'spawn')
    // Arguments that each fit but together pass the kernel's limit for them all: execve fails with E2BIG.
    const body = expectProblem(await exec(app, 'spawn', { command: 'echo', args: Array.from({ length: 24 }, () => 'x'.repeat(120_000)) }), 500, 'ExecutionFailed', 'spawn')
    expect(body['detail']).toMatch(/could not start.*E2BIG/)
  })

  it('defaults the timeout to 60 s', async () => {
    const real = new PlainRunner({ cpuSeconds: 60, maxFileBytes: 2 ** 30, maxProcesses: 256, maxMemoryBytes: 2 ** 32 }, findPrlimit())
    const runs: RunOptions[] = []
    const tool = createSpawnTool({ config: parseConfig({}).tools.spawn, runner: { mode: 'none', run: (options) => { runs.push(options); return real.run(options) }, prepare: (options) => real.prepare(options) } })
    const ctx = await toolContext()
    await tool.execute({ command: 'true' }, ctx)
    await tool.execute({ command: 'true', timeout: 120 }, ctx)
    expect(runs.map((run) => [run.command, run.timeoutMs])).toEqual([['true', 60_000], ['true', 120_000]])
  })

  it('times out with a 504 and the output so far', async () => {
    const app = await buildTestApp()
    const body = expectProblem(await exec(app, 'spawn', { command: 'sh', args: ['-c', 'echo begun; sleep 30'], timeout: 0.5 }), 504, 'Timeout', 'spawn')
    expect(body['partial_stdout']).toBe('begun\n')
  })

  it('runs at most 5 at once: the 6th fails at once with ExecutionFailed naming the limit', async () => {
    const app = await buildTestApp()
    const dir = await tempDir()
    const pids = path.join(dir, 'pids')
    const long = Array.from({ length: 5 }, () => exec(app, 'spawn', { command: 'sh', args: ['-c', `echo $$ >> ${pids}; exec sleep 30`], timeout: 2 }))
    const running = (await linesOf(pids, 5)).map(Number)
    for (const pid of running) expect(await alive(pid)).toBe(true)

    const refused = expectProblem(await exec(app, 'spawn', { command: 'true' }), 500, 'ExecutionFailed', 'spawn')
    expect(refused['detail']).toMatch(/concurrency limit of 5/)
    // The limit is spawn's own: exec_shell still runs meanwhile.
    expect((await exec(app, 'exec_shell', { command: 'echo free' })).body.result.stdout).toBe('free\n')

    for (const answer of await Promise.all(long)) expect(answer.status).toBe(504)
    for (const pid of running) expect(await alive(pid)).toBe(false)
    // Every slot came back.
    const again = await Promise.all(Array.from({ length: 5 }, () => exec(app, 'spawn', { command: 'true' })))
    expect(again.map((answer) => answer.status)).toEqual([200, 200, 200, 200, 200])
  })

  it('honours a configured max_concurrent', async () => {
    const app = await buildTestApp({ tools: { spawn: { max_concurrent: 1 } } })
    const dir = await tempDir()
    const pids = path.join(dir, 'pids')
    const first = exec(app, 'spawn', { command: 'sh', args: ['-c', `echo $$ >> ${pids}; exec sleep 30`], timeout: 1 })
    await linesOf(pids, 1)
    const body = expectProblem(await exec(app, 'spawn', { command: 'true' }), 500, 'ExecutionFailed', 'spawn')
    expect(body['detail']).toMatch(/concurrency limit of 1/)
    expect((await first).status).toBe(504)
  })
})
