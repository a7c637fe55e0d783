/**
 * The start-up sweep of inherited descriptors, in a process of its own:
 * what V8 itself writes to (its profiler's log, under any name) stays open.
 */
import { spawnSync } from 'node:child_process'
import { readFileSync } from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { tempDir } from '../support/temp.ts'

const MODULE = new URL('../../src/sandbox/inherited-descriptors.ts', import.meta.url).pathname

describe('the sweep of inherited descriptors', () => {
  it('leaves the log --prof writes under the name --logfile gives it, and closes what was inherited', async () => {
    const dir = await tempDir('toolport-fds-')
    const log = path.join(dir, 'v8.log')
    const inherited = path.join(dir, 'inherited.txt')
    const script = `
      import { readdirSync, readlinkSync } from 'node:fs'
      import { closeInheritedDescriptors } from ${JSON.stringify(MODULE)}
      const closed = closeInheritedDescriptors()
      const open = readdirSync('/proc/self/fd').map((fd) => { try { return readlinkSync('/proc/self/fd/' + fd) } catch { return '' } })
      console.log(JSON.stringify({ closed, log: open.includes(${JSON.stringify(log)}), inherited: open.includes(${JSON.stringify(inherited)}) }))
    `
    // A high descriptor, opened by a shell as a supervisor's would be: Node marks only its first ones close-on-exec at start, this one is the sweep's to close.
    const run = spawnSync('/bin/bash', ['-c', 'exec 200>>"$1" && shift && exec "$0" "$@"', process.execPath, inherited, '--prof', '--no-logfile-per-isolate', `--logfile=${log}`, '--input-type=module', '-e', script], { encoding: 'utf8', timeout: 20_000 })
    expect(run.stderr).toBe('')
    const { closed, log: kept, inherited: leftOpen } = JSON.parse(run.stdout) as { closed: number, log: boolean, inherited: boolean }
    expect(kept).toBe(true)
    expect(leftOpen).toBe(false)
    expect(closed).toBeGreaterThanOrEqual(1)
    expect(readFileSync(log, 'utf8').length).toBeGreaterThan(0)
  })
})
