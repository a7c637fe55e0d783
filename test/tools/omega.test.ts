import { readFile, symlink, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { findPrlimit } from '../../src/sandbox/limits.ts'
import { PlainRunner } from '../../src/sandbox/plain-runner.ts'
import type { LaunchOptions, RunOptions } from '../../src/sandbox/types.ts'
import { bashTool, editTool, readTool, writeTool } from '../../src/tools/omega/index.ts'
import { truncateText } from '../../src/execution/truncate.ts'
import { buildTestApp, exec, tempDir } from '../helper.ts'
import { codeOf, toolContext } from '../support/context.ts'
import { expectProblem } from '../support/problem.ts'

const omegaApp = () => buildTestApp({ tools: { builtin: ['*'] } })

function plainRunner () {
  const real = new PlainRunner({ cpuSeconds: 60, maxFileBytes: 2 ** 30, maxProcesses: 256, maxMemoryBytes: 2 ** 32 }, findPrlimit())
  const runs: RunOptions[] = []
  return { runs, runner: { mode: 'none' as const, run: (options: RunOptions) => { runs.push(options); return real.run(options) }, prepare: (options: LaunchOptions) => real.prepare(options) } }
}

describe('omega truncate_output', () => {
  it('keeps text at or under the cap, cuts longer text with the notice', () => {
    expect(truncateText('abc', 3)).toBe('abc')
    expect(truncateText('abcd', 3)).toBe('abc\n... (output truncated: 4 total chars, showing first 3)')
    // Never half of an emoji (two UTF-16 units): the cut falls before it.
    expect(truncateText('ab\u{1F600}c', 3)).toBe('ab\n... (output truncated: 5 total chars, showing first 2)')
  })
})

describe('omega bash', () => {
  it('combines stdout and stderr in order, in the workspace', async () => {
    const app = await omegaApp()
    const answer = await exec(app, 'bash', { command: 'echo one; echo two >&2; echo three; [[ -n yes ]] && basename "$PWD"' }, { workspace: 'omega-ws' })
    expect(answer.status).toBe(200)
    expect(answer.body.result).toEqual({ content: 'one\ntwo\nthree\nomega-ws\n', is_error: false, exit_code: 0 })
    // Interleaving holds for many alternating writes, and bash reports its own errors as bash.
    const mixed = await exec(app, 'bash', { command: 'for i in $(seq 1 200); do echo "o$i"; echo "e$i" >&2; done; no-such-cmd-q' })
    const expected = Array.from({ length: 200 }, (_, i) => `o${i + 1}\ne${i + 1}\n`).join('')
    expect(mixed.body.result.content).toBe(`${expected}bash: line 1: no-such-cmd-q: command not found\n`)
    expect(mixed.body.result).toMatchObject({ is_error: true, exit_code: 127 })
  })

  it('sets is_error on a non-zero exit (still a 200), and reports the exit code when silent', async () => {
    const app = await omegaApp()
    expect((await exec(app, 'bash', { command: 'echo failing; exit 2' })).body.result).toEqual({ content: 'failing\n', is_error: true, exit_code: 2 })
    const silent = await exec(app, 'bash', { command: 'exit 5' })
    expect(silent.status).toBe(200)
    expect(silent.body.result).toMatchObject({ is_error: true, exit_code: 5, content: expect.stringMatching(/5/) })
    expectProblem(await exec(app, 'bash', { command: '  ' }), 400, 'InvalidArgs', 'bash')
    expectProblem(await exec(app, 'bash', {}), 400, 'InvalidArgs', 'bash')
    expectProblem(await exec(app, 'bash', { command: 'echo \u0000' }), 400, 'InvalidArgs', 'bash')
  })

  it('caps output at 30,000 characters with omega\'s notice', async () => {
    const app = await omegaApp()
    const answer = (await exec(app, 'bash', { command: "head -c 45000 /dev/zero | tr '\\0' a" })).body
    expect(answer.truncated).toBe(true)
    expect((await exec(app, 'bash', { command: 'echo short' })).body.truncated).toBe(false)
    const { content } = answer.result
    expect(content).toBe(`${'a'.repeat(30_000)}\n... (output truncated: 45000 total chars, showing first 30000)`)
    // Far beyond what is captured, the notice still names the full size.
    const huge = (await exec(app, 'bash', { command: "head -c 5000000 /dev/zero | tr '\\0' b; echo tail >&2" })).body.result.content
    expect(huge).toBe(`${'b'.repeat(30_000)}\n... (output truncated: 5000005 total chars, showing first 30000)`)
  })

  it('times out after 120 s by default (504 with the output so far)', async () => {
    const { runner, runs } = plainRunner()
    await bashTool(runner).execute({ command: 'true' }, await toolContext())
    expect(runs[0]).toMatchObject({ command: 'sh', args: ['-c', 'exec bash -c "$1" 2>&1', 'sh', 'true'], timeoutMs: 120_000 })
    const error = await bashTool(runner, 0.5).execute({ command: 'echo so far; sleep 30' }, await toolContext())
      .then(() => null, (thrown: { code: string, extra: Record<string, unknown> }) => thrown)
    expect(error).toMatchObject({ code: 'Timeout', extra: { partial_stdout: 'so far\n' } })
  })
})

describe('omega read', () => {
  it('reads a workspace file, capped at 50,000 characters with the notice', async () => {
    const app = await omegaApp()
    await exec(app, 'write', { file_path: 'small.txt', content: 'héllo\n' }, { workspace: 'r' })
    expect((await exec(app, 'read', { file_path: 'small.txt' }, { workspace: 'r' })).body.result).toEqual({ content: 'héllo\n' })
    await exec(app, 'write', { file_path: 'big.txt', content: 'z'.repeat(60_000) }, { workspace: 'r' })
    const big = (await exec(app, 'read', { file_path: 'big.txt' }, { workspace: 'r' })).body
    expect(big.truncated).toBe(true)
    expect(big.result.content)
      .toBe(`${'z'.repeat(50_000)}\n... (output truncated: 60000 total chars, showing first 50000)`)
    await exec(app, 'write', { file_path: 'exact.txt', content: 'y'.repeat(50_000) }, { workspace: 'r' })
    const exact = (await exec(app, 'read', { file_path: 'exact.txt' }, { workspace: 'r' })).body
    expect([exact.truncated, exact.result.content]).toEqual([false, 'y'.repeat(50_000)])
    expectProblem(await exec(app, 'write', { file_path: 'newdir/', content: 'x' }, { workspace: 'r' }), 400, 'InvalidArgs', 'write')
  })

  it('counts characters, not bytes', async () => {
    const ctx = await toolContext()
    await writeFile(path.join(ctx.workspaceDir, 'u.txt'), '✓'.repeat(50_000))
    expect(await readTool.execute({ file_path: 'u.txt' }, ctx)).toEqual({ content: '✓'.repeat(50_000) })
  })

  it('is confined to the workspace, unlike omega', async () => {
    const app = await omegaApp()
    expectProblem(await exec(app, 'read', { file_path: '/etc/passwd' }), 400, 'InvalidPath', 'read')
    expectProblem(await exec(app, 'read', { file_path: '../../../etc/passwd' }), 400, 'InvalidPath', 'read')
    expectProblem(await exec(app, 'read', { file_path: 'missing.txt' }), 404, 'FileNotFound', 'read')
    const ctx = await toolContext()
    const outside = await tempDir()
    await writeFile(path.join(outside, 'secret'), 'TOPSECRET')
    await symlink(path.join(outside, 'secret'), path.join(ctx.workspaceDir, 'link'))
    expect(await codeOf(readTool.execute({ file_path: 'link' }, ctx))).toBe('InvalidPath')
  })
})

describe('omega write', () => {
  it('creates or overwrites a file with its parents and reports the byte count', async () => {
    const ctx = await toolContext()
    expect(await writeTool.execute({ file_path: 'a/b/c.txt', content: 'héllo' }, ctx)).toEqual({ content: 'Wrote 6 bytes to a/b/c.txt', bytes: 6 })
    expect(await writeTool.execute({ file_path: 'a/b/c.txt', content: '' }, ctx)).toEqual({ content: 'Wrote 0 bytes to a/b/c.txt', bytes: 0 })
    expect(await readFile(path.join(ctx.workspaceDir, 'a/b/c.txt'), 'utf8')).toBe('')
  })

  it('writes nothing outside the workspace', async () => {
    const app = await omegaApp()
    const outside = await tempDir()
    expectProblem(await exec(app, 'write', { file_path: path.join(outside, 'x.txt'), content: 'x' }), 400, 'InvalidPath', 'write')
    expectProblem(await exec(app, 'write', { file_path: '../x.txt', content: 'x' }), 400, 'InvalidPath', 'write')
    expectProblem(await exec(app, 'write', { file_path: '/tmp/omega-write-test.txt', content: 'x' }), 400, 'InvalidPath', 'write')
    const ctx = await toolContext()
    await symlink(outside, path.join(ctx.workspaceDir, 'out'))
    expect(await codeOf(writeTool.execute({ file_path: 'out/x.txt', content: 'x' }, ctx))).toBe('InvalidPath')
    expect(await codeOf(writeTool.execute({ file_path: '.', content: 'x' }, ctx))).toBe('InvalidArgs')
  })
})

describe('omega edit', () => {
  it('replaces the first occurrence only and reports how many there were', async () => {
    const ctx = await toolContext()
    await writeFile(path.join(ctx.workspaceDir, 'e.txt'), 'cat cat cat $&')
    expect(await editTool.execute({ file_path: 'e.txt', old_string: 'cat', new_string: 'dog$1' }, ctx))
      .toEqual({ content: 'Edited e.txt: replaced the first of 3 occurrence(s)', occurrences: 3 })
    expect(await readFile(path.join(ctx.workspaceDir, 'e.txt'), 'utf8')).toBe('dog$1 cat cat $&')
    expect(await editTool.execute({ file_path: 'e.txt', old_string: 'dog$1', new_string: 'cow' }, ctx)).toMatchObject({ occurrences: 1 })
    expect(await readFile(path.join(ctx.workspaceDir, 'e.txt'), 'utf8')).toBe('cow cat cat $&')
  })

  it('answers InvalidArgs for a missing old_string, FileNotFound for a missing file, InvalidPath outside', async () => {
    const app = await omegaApp()
    await exec(app, 'write', { file_path: 'e.txt', content: 'unchanged' }, { workspace: 'edit' })
    const body = expectProblem(await exec(app, 'edit', { file_path: 'e.txt', old_string: 'absent', new_string: 'x' }, { workspace: 'edit' }), 400, 'InvalidArgs', 'edit')
    expect(body['detail']).toMatch(/not found/)
    expectProblem(await exec(app, 'edit', { file_path: 'e.txt', old_string: '', new_string: 'x' }, { workspace: 'edit' }), 400, 'InvalidArgs', 'edit')
    expect((await exec(app, 'read', { file_path: 'e.txt' }, { workspace: 'edit' })).body.result.content).toBe('unchanged')
    expectProblem(await exec(app, 'edit', { file_path: 'ghost.txt', old_string: 'a', new_string: 'b' }), 404, 'FileNotFound', 'edit')
    expectProblem(await exec(app, 'edit', { file_path: '/etc/hosts', old_string: 'a', new_string: 'b' }), 400, 'InvalidPath', 'edit')
  })
})

describe('omega tools in the catalog', () => {
  it('join with builtin ["*"] and match case-insensitively', async () => {
    const app = await omegaApp()
    const answer = await exec(app, 'BASH', { command: 'echo hi' })
    expect(answer.body).toMatchObject({ tool: 'bash', result: { content: 'hi\n' } })
    const clawft = await buildTestApp()
    expectProblem(await exec(clawft, 'bash', { command: 'echo hi' }), 404, 'NotFound', 'bash')
  })
})
