/**
 * The launcher prepares itself, then becomes the command; a `sh -c` script
 * runs in the launcher's own shell. Either way the command must see exactly
 * what it would have seen when started directly, and nothing of it may run
 * when the preparation fails.
 */
import { spawnSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { launcherArgv, PREPARATION_FAILED, shellQuote } from '../../src/sandbox/launcher.ts'
import { tempDir } from '../support/temp.ts'

function run (argv: string[], cwd?: string): { status: number | null, stdout: string, stderr: string } {
  const result = spawnSync(argv[0] as string, argv.slice(1), { cwd, encoding: 'utf8', timeout: 10_000 })
  return { status: result.status, stdout: result.stdout, stderr: result.stderr }
}

describe('the launcher', () => {
  it('runs a sh -c script in its own shell, after the preparation, with the script\'s $0 and arguments', () => {
    const argv = launcherArgv('ulimit -t 77', 'sh', ['-c', 'echo "$0|$#|$*"; ulimit -t; echo $$ > /dev/null'])
    expect(argv[0]).toBe('/bin/sh')
    expect(run(argv)).toEqual({ status: 0, stdout: 'sh|0|\n77\n', stderr: '' })
    expect(run(launcherArgv('true', 'sh', ['-c', 'echo "$0|$#|$1|$2"', 'name', 'one', 'two words']))).toMatchObject({ stdout: 'name|2|one|two words\n' })
  })

  it('keeps the shell\'s own messages and exit codes as a direct sh -c gives them', () => {
    for (const script of ['nosuchcommand-xyz', 'exit 3', 'echo out; echo err >&2; false', 'if then']) {
      const direct = run(['sh', '-c', script])
      expect(run(launcherArgv('true', 'sh', ['-c', script])), script).toEqual(direct)
    }
  })

  it('runs nothing of the command when the preparation fails, nor when its first line does not parse', async () => {
    const dir = await tempDir('launcher-')
    expect(run(launcherArgv('false', 'sh', ['-c', 'touch ran']), dir).status).toBe(PREPARATION_FAILED)
    expect(run(launcherArgv('false', 'touch', ['ran']), dir).status).toBe(PREPARATION_FAILED)
    expect(existsSync(path.join(dir, 'ran'))).toBe(false)
    expect(run(launcherArgv('touch prepared', 'sh', ['-c', 'touch ran; if then']), dir).status).toBe(2)
    expect(existsSync(path.join(dir, 'prepared'))).toBe(false)
    expect(existsSync(path.join(dir, 'ran'))).toBe(false)
  })

  it('becomes any other command with its arguments untouched by the shell', () => {
    const args = ['%s|', 'a b', '$HOME', '"; touch x', "it's"]
    expect(run(launcherArgv('ulimit -f 100', 'printf', args))).toEqual({ status: 0, stdout: 'a b|$HOME|"; touch x|it\'s|', stderr: '' })
  })

  it('quotes a path as one shell word', () => {
    expect(run(['/bin/sh', '-c', `printf %s ${shellQuote("/tmp/a b/it's $x")}`]).stdout).toBe("/tmp/a b/it's $x")
  })
})
