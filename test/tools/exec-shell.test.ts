import { existsSync } from 'node:fs'
import { readFile } from 'node:fs/promises'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { parseConfig } from '../../src/config.ts'
import { findPrlimit } from '../../src/sandbox/limits.ts'
import { PlainRunner } from '../../src/sandbox/plain-runner.ts'
import type { ProcessRunner, RunOptions } from '../../src/sandbox/types.ts'
import { DEFAULT_DENYLIST } from '../../src/sandbox/command-rules.ts'
import { createExecShellTool } from '../../src/tools/exec-shell.ts'
import { buildTestApp, exec, tempDir } from '../helper.ts'
import { codeOf, toolContext } from '../support/context.ts'
import { expectProblem } from '../support/problem.ts'
import { alive } from '../support/processes.ts'

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** Polls until `pid` is dead (SIGKILL is delivered asynchronously), or 3 s pass. */
async function deadSoon (pid: number): Promise<boolean> {
  const deadline = Date.now() + 3000
  while (await alive(pid)) {
    if (Date.now() > deadline) return false
    await sleep(20)
  }
  return true
}

async function pidFrom (file: string): Promise<number> {
  const deadline = Date.now() + 5000
  while (!existsSync(file) || (await readFile(file, 'utf8')).trim() === '') {
    if (Date.now() > deadline) throw new Error(`${file} never appeared`)
    await sleep(20)
  }
  return Number((await readFile(file, 'utf8')).trim())
}

/** The real plain runner, remembering the options of every run. */
function recordingRunner (): { runner: ProcessRunner, runs: RunOptions[] } {
  const real = new PlainRunner({ cpuSeconds: 60, maxFileBytes: 2 ** 30, maxProcesses: 256, maxMemoryBytes: 2 ** 32 }, findPrlimit())
  const runs: RunOptions[] = []
  return { runs, runner: { mode: 'none', run: (options) => { runs.push(options); return real.run(options) }, prepare: (options) => real.prepare(options) } }
}

function execShell (config: Record<string, unknown> = {}) {
  const { runner, runs } = recordingRunner()
  const tool = createExecShellTool({ config: parseConfig({ tools: { exec_shell: config } }).tools.exec_shell, runner })
  return { tool, runs }
}

describe('exec_shell', () => {
  it('answers {exit_code, stdout, stderr, duration_ms}; a non-zero exit is a success', async () => {
    const app = await buildTestApp()
    const answer = await exec(app, 'exec_shell', { command: 'echo out; echo err >&2; exit 3' })
    expect(answer.status).toBe(200)
    expect(answer.body.truncated).toBe(false)
    expect(Object.keys(answer.body.result)).toEqual(['exit_code', 'stdout', 'stderr', 'duration_ms'])
    expect(answer.body.result).toMatchObject({ exit_code: 3, stdout: 'out\n', stderr: 'err\n' })
    expect(Number.isInteger(answer.body.result.duration_ms)).toBe(true)
    // Killed by a signal: the exit code is unknown, which the seed spells -1.
    expect((await exec(app, 'exec_shell', { command: 'kill -9 $$' })).body.result.exit_code).toBe(-1)
  })

  it('refuses a command longer than one argument may be (400), here and as a process; a long one that fits runs', async () => {
    const app = await buildTestApp({ tools: { builtin: ['*'] } })
    // The longest that is allowed runs, in the sandbox too (the launcher's prelude goes in the same argument).
    const longest = `echo fits #${'x'.repeat(128 * 1024 - 4096 - 1 - 'echo fits #'.length)}`
    for (const sandbox of ['none', 'bwrap']) {
      const fits = await exec(await buildTestApp({ sandbox: { mode: sandbox } }), 'exec_shell', { command: longest })
      expect(fits.body.result, sandbox).toMatchObject({ exit_code: 0, stdout: 'fits\n' })
    }
    const tooLong = `${longest}x`
    expect((await exec(app, 'exec_shell', { command: tooLong })).body).toMatchObject({ code: 'InvalidArgs', detail: expect.stringMatching(/at most 126975 may be/) })
    const started = await app.inject({ method: 'POST', url: '/v1/workspaces/long/processes', payload: { command: tooLong } })
    expect([started.statusCode, started.json().code]).toEqual([400, 'InvalidArgs'])
  })

  it('runs sh -c in the workspace', async () => {
    const app = await buildTestApp()
    const answer = await exec(app, 'exec_shell', { command: 'echo x > made.txt; pwd; ls' }, { workspace: 'shell-cwd' })
    const [pwd, listing] = answer.body.result.stdout.split('\n')
    expect(path.basename(pwd)).toBe('shell-cwd')
    expect(listing).toBe('made.txt')
  })

  it('refuses every default denylist pattern, in any case, before running anything', async () => {
    const app = await buildTestApp()
    const commands = [
      'true || rm -rf /',
      ...DEFAULT_DENYLIST.flatMap((pattern) => [pattern, pattern.toUpperCase(), pattern.replace(/^./, (c) => c.toUpperCase())])
        .map((pattern) => `echo '${pattern}'`),
    ]
    for (const command of commands) {
      const body = expectProblem(await exec(app, 'exec_shell', { command: `touch ran; ${command}` }, { workspace: 'deny' }), 403, 'PermissionDenied', 'exec_shell')
      expect(body['detail']).toMatch(/denylist pattern/)
    }
    expect((await exec(app, 'exec_shell', { command: 'ls -A' }, { workspace: 'deny' })).body.result.stdout).toBe('')
  })

  it('a configured denylist replaces the default patterns', async () => {
    const app = await buildTestApp({ tools: { exec_shell: { denylist: ['forbidden-word'] } } })
    expect((await exec(app, 'exec_shell', { command: "echo 'sudo reboot'" })).body.result.stdout).toBe('sudo reboot\n')
    expectProblem(await exec(app, 'exec_shell', { command: 'echo FORBIDDEN-Word' }), 403, 'PermissionDenied', 'exec_shell')
    const open = await buildTestApp({ tools: { exec_shell: { denylist: [] } } })
    expect((await exec(open, 'exec_shell', { command: "echo 'mkfs shutdown'" })).status).toBe(200)
  })

  it('defaults the timeout to 30 s and clamps a longer one to timeout_max', async () => {
    const ctx = await toolContext()
    const defaults = execShell()
    for (const timeout of [undefined, 100, 1000]) await defaults.tool.execute({ command: 'true', timeout }, ctx)
    expect(defaults.runs.map((run) => run.timeoutMs)).toEqual([30_000, 100_000, 300_000])
    const tight = execShell({ timeout_default: 5, timeout_max: 1 })
    await tight.tool.execute({ command: 'true' }, ctx)
    await tight.tool.execute({ command: 'true', timeout: 100 }, ctx)
    expect(tight.runs.map((run) => run.timeoutMs)).toEqual([1000, 1000])
  })

  it('times out with a 504 carrying the output so far, and kills the whole process group', async () => {
    const app = await buildTestApp({ tools: { exec_shell: { timeout_max: 1 } } })
    const dir = await tempDir()
    const command = [
      `sleep 30 & echo $! > ${dir}/child.pid`,
      `sh -c 'sleep 30 & echo $! > ${dir}/grandchild.pid; wait' &`,
      'echo started; echo warming >&2; wait',
    ].join('\n')
    const body = expectProblem(await exec(app, 'exec_shell', { command, timeout: 100 }), 504, 'Timeout', 'exec_shell')
    expect(body).toMatchObject({ partial_stdout: 'started\n', partial_stderr: 'warming\n', timeout_seconds: 1 })
    for (const name of ['child.pid', 'grandchild.pid']) {
      const pid = await pidFrom(path.join(dir, name))
      expect(await deadSoon(pid), `${name} ${pid} survived`).toBe(true)
    }
  })

  it.each(['none', 'bwrap'])('answers as soon as the command ends, killing what it left in the background (sandbox %s)', async (mode) => {
    const app = await buildTestApp({ sandbox: { mode } })
    // Without the kill, the background sleep would hold the pipes until the 20 s timeout: a 504.
    const answer = await exec(app, 'exec_shell', { command: 'sleep 30 & echo $! > bg.pid; echo done', timeout: 20 }, { workspace: 'bg' })
    expect(answer.status).toBe(200)
    expect(answer.body.result).toMatchObject({ exit_code: 0, stdout: 'done\n' })
    if (mode === 'none') {
      const pid = Number(await readFile(path.join(app.runtime.workspaces.get('default', 'bg').dir, 'bg.pid'), 'utf8'))
      expect(await deadSoon(pid)).toBe(true)
    }
  })

  it('caps the partial output of a 504', async () => {
    const { tool } = execShell({ timeout_max: 1 })
    const error = await tool.execute({ command: 'head -c 3000000 /dev/zero | tr "\\0" a; sleep 30' }, await toolContext())
      .then(() => null, (thrown: { code: string, extra: Record<string, unknown> }) => thrown)
    expect(error?.code).toBe('Timeout')
    expect(String(error?.extra['partial_stdout']).length).toBeLessThanOrEqual(16 * 1024)
    expect(String(error?.extra['partial_stdout'])).toMatch(/^a+$/)
    expect(error?.extra['stdout_bytes']).toBe(3_000_000)
  })

  it('bounds captured output: 200 MB printed, a capped result that states the full count', async () => {
    const app = await buildTestApp()
    const before = process.memoryUsage().rss
    const answer = await exec(app, 'exec_shell', { command: "head -c 200000000 /dev/zero | tr '\\0' a; echo done >&2" })
    const grown = process.memoryUsage().rss - before
    expect(answer.status).toBe(200)
    const result = answer.body.result
    expect(result).toMatchObject({ exit_code: 0, stderr: 'done\n', stdout_truncated: true, stdout_bytes: 200_000_000 })
    expect(result.stdout).toMatch(/^a+$/)
    expect(result.stdout.length).toBeGreaterThan(60_000)
    // The result fits the 64 KiB limit as a well-formed object (not a truncation envelope).
    expect(Buffer.byteLength(JSON.stringify(result))).toBeLessThanOrEqual(65_536)
    // The tool cut its own output to fit, and the answer says so.
    expect(answer.body.truncated).toBe(true)
    // Holding the output would take over 200 MB (400 MB as Buffer and string); pipe chunks awaiting GC take some.
    expect(grown).toBeLessThan(150 * 1024 * 1024)
  })

  it('shares the result limit between two long streams, and honours a lower requested limit', async () => {
    const app = await buildTestApp()
    const command = "head -c 1000000 /dev/zero | tr '\\0' o; head -c 500000 /dev/zero | tr '\\0' e >&2"
    const big = (await exec(app, 'exec_shell', { command })).body.result
    expect(big).toMatchObject({ stdout_truncated: true, stdout_bytes: 1_000_000, stderr_truncated: true, stderr_bytes: 500_000 })
    expect(Math.abs(big.stdout.length - big.stderr.length)).toBeLessThan(100)
    expect(Buffer.byteLength(JSON.stringify(big))).toBeLessThanOrEqual(65_536)
    // A short stderr stays whole; stdout gets the rest of a 1,000-byte limit.
    const small = (await exec(app, 'exec_shell', { command: "head -c 5000 /dev/zero | tr '\\0' o; echo short >&2" }, { max_result_bytes: 1000 })).body.result
    expect(small).toMatchObject({ stderr: 'short\n', stdout_truncated: true, stdout_bytes: 5000 })
    expect(small.stderr_truncated).toBeUndefined()
    expect(Buffer.byteLength(JSON.stringify(small))).toBeLessThanOrEqual(1000)
    expect(small.stdout.length).toBeGreaterThan(800)
  })

  it('keeps escaped output within the limit too', async () => {
    const { tool } = execShell()
    const result = await tool.execute({ command: "head -c 100000 /dev/zero | tr '\\0' '\\001'" }, await toolContext({ maxResultBytes: 4096 })) as Record<string, unknown>
    expect(Buffer.byteLength(JSON.stringify(result))).toBeLessThanOrEqual(4096)
    expect(result).toMatchObject({ stdout_truncated: true, stdout_bytes: 100_000 })
    expect(String(result['stdout'])).toBe('\u0001'.repeat(String(result['stdout']).length))
    expect(String(result['stdout']).length).toBeGreaterThan(500)
  })

  it('is cancelled by its AbortSignal: the process and its children die', async () => {
    const { tool } = execShell()
    const controller = new AbortController()
    const ctx = await toolContext({ signal: controller.signal })
    const call = codeOf(tool.execute({ command: 'echo $$ > shell.pid; sleep 30 & echo $! > child.pid; wait' }, ctx))
    const shell = await pidFrom(path.join(ctx.workspaceDir, 'shell.pid'))
    const child = await pidFrom(path.join(ctx.workspaceDir, 'child.pid'))
    expect(await alive(child)).toBe(true)
    controller.abort()
    expect(await call).toBe('ExecutionFailed')
    expect(await deadSoon(shell)).toBe(true)
    expect(await deadSoon(child)).toBe(true)
  })

  it('refuses bad arguments as InvalidArgs, a command too long for one argument too', async () => {
    const app = await buildTestApp()
    expectProblem(await exec(app, 'exec_shell', { command: 'true', timeout: 0 }), 400, 'InvalidArgs', 'exec_shell')
    expectProblem(await exec(app, 'exec_shell', { command: 'true', timeout: '5' }), 400, 'InvalidArgs', 'exec_shell')
    expectProblem(await exec(app, 'exec_shell', {}), 400, 'InvalidArgs', 'exec_shell')
    expectProblem(await exec(app, 'exec_shell', { command: 'echo a\u0000b' }), 400, 'InvalidArgs', 'exec_shell')
    expectProblem(await exec(app, 'exec_shell', { command: `echo ${'x'.repeat(200_000)}` }), 400, 'InvalidArgs', 'exec_shell')
  })
})
