/**
 * A workspace's usage kept per directory and watched: after a real process
 * (exec_shell in the sandbox) the directories it changed are listed again,
 * not the whole tree, and the figure is the tree's (checked against a full
 * walk). Where the watches cannot tell every change (a watch limit, a burst
 * of events that may have overflowed the kernel's queue) the scan lists
 * everything and stays exact.
 */
import { existsSync, readFileSync, statSync } from 'node:fs'
import { readdir } from 'node:fs/promises'
import path from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { buildTestApp } from '../helper.ts'
import { expectProblem } from '../support/problem.ts'
import { execAs, requestAs } from '../support/requests.ts'
import { directorySize } from '../../src/workspaces/directory-size.ts'
import { usageOf } from '../../src/workspaces/usage.ts'
import { watchedDirectoryCount, watchLimit } from '../../src/workspaces/usage-watch.ts'

type App = Awaited<ReturnType<typeof buildTestApp>>

const DEFAULT_LIMIT = watchLimit.directories
afterEach(() => { watchLimit.directories = DEFAULT_LIMIT })

async function shell (app: App, workspace: string, command: string): Promise<void> {
  const answer = await execAs(app, '', 'exec_shell', { command }, workspace)
  expect(answer.status).toBe(200)
  expect((answer.body as { result: { exit_code: number } }).result.exit_code).toBe(0)
}

async function info (app: App, workspace: string): Promise<{ files: number, bytes: number }> {
  const { files, bytes } = (await requestAs(app, '', 'GET', `/v1/workspaces/${workspace}`)).body as { files: number, bytes: number }
  return { files, bytes }
}

/** The usage the service answers, and the tree's truth by a full walk. */
async function answeredAndTrue (app: App, workspace: string) {
  const dir = app.runtime.workspaces.get('default', workspace).dir
  return { answered: await info(app, workspace), truth: await directorySize(dir) }
}

/** Files made and removed for a burst of events over half the kernel's queue of them. */
const BURST_FILES = Math.ceil(Number(readFileSync('/proc/sys/fs/inotify/max_queued_events', 'utf8')) / 4) + 100

/**
 * Runs `remake` (which removes workspace `again`'s `dir` and makes it again)
 * until the new directory has had the old one's inode number `times` (other
 * tests making files meanwhile may take the number), at most `maxRounds`;
 * after each, and after a change heard only through the new directory's own
 * watch, the usage answered is the tree's.
 */
async function remadeUntilReused (app: App, remake: string, options: { times: number, maxRounds: number }): Promise<{ reused: number, rounds: number }> {
  const dir = path.join(app.runtime.workspaces.get('default', 'again').dir, 'dir')
  let reused = 0
  let rounds = 0
  for (; rounds < options.maxRounds && reused < options.times; rounds++) {
    const before = statSync(dir).ino
    await shell(app, 'again', remake)
    if (statSync(dir).ino === before) reused++
    let { answered, truth } = await answeredAndTrue(app, 'again')
    expect({ round: rounds, answered }).toEqual({ round: rounds, answered: truth })
    await shell(app, 'again', 'printf 333 >> dir/made && mkdir dir/sub && printf 1 > dir/sub/f')
    ;({ answered, truth } = await answeredAndTrue(app, 'again'))
    expect({ round: rounds, answered }).toEqual({ round: rounds, answered: truth })
  }
  return { reused, rounds }
}

const TREE = 'mkdir -p pkg1/lib pkg2/lib pkg3 && for p in pkg1 pkg2 pkg3; do printf 12345 > $p/index.js; printf abc > $p/README; done && printf xy > pkg1/lib/a.js && printf xyz > pkg2/lib/b.js && printf top > top.txt'

describe('workspace usage, watched per directory', () => {
  it('follows what a process changes (a deep new directory, deletes, renames, truncation, hard links) by listing only what changed', async () => {
    const app = await buildTestApp({ tools: { builtin: ['*'] } })
    await shell(app, 'w', TREE)
    const usage = usageOf(app.runtime.workspaces.get('default', 'w').dir)
    let { answered, truth } = await answeredAndTrue(app, 'w')
    expect(answered).toEqual({ files: 9, bytes: 32 })
    expect(truth).toEqual(answered)
    expect(usage.watched).toBe(true)
    const fullScans = usage.fullScans

    const steps = [
      'mkdir -p new/a/b/c/d && printf 1234567 > new/a/b/c/d/deep.txt && printf 1 > new/a/one',
      'rm pkg3/README && rm -r pkg2/lib',
      'mv pkg1 renamed && printf 12 >> renamed/lib/a.js',
      // Swapped names: each directory is now where the other was.
      'mv renamed tmp && mv pkg2 renamed && mv tmp pkg2 && printf 4444 > pkg2/lib/after-swap.js',
      'truncate -s 1 top.txt && : > pkg3/index.js',
      // A new hard link: its partner's directory hears nothing, so this one catch-up lists everything.
      'mkdir -p linked && ln pkg2/index.js linked/same.js && printf more >> linked/same.js',
      // Known now: a write through either link is counted in both directories.
      'printf again >> pkg2/index.js',
      'rm -r new/a/b && mkdir new/a/b && printf 88 > new/a/b/again',
    ]
    for (const step of steps) {
      await shell(app, 'w', step)
      ;({ answered, truth } = await answeredAndTrue(app, 'w'))
      expect({ step, answered }).toEqual({ step, answered: truth })
    }
    // A file tool writes into a directory a process made, then a process changes it again: counted once.
    expect((await execAs(app, '', 'write_file', { path: 'new/a/b/tool.txt', content: 'tool' }, 'w')).status).toBe(200)
    expect((await execAs(app, '', 'write_file', { path: 'made/by/tool.txt', content: 'tool' }, 'w')).status).toBe(200)
    await shell(app, 'w', 'printf 9 >> new/a/b/tool.txt && printf 9 >> made/by/tool.txt')
    ;({ answered, truth } = await answeredAndTrue(app, 'w'))
    expect(answered).toEqual(truth)
    expect(usage.watched).toBe(true)
    expect(usage.fullScans).toBe(fullScans + 1)
  })

  it('hears a directory that was removed and made again, though it may have the same inode number', async () => {
    const app = await buildTestApp({ tools: { builtin: ['*'] } })
    await shell(app, 'again', 'mkdir -p dir/sub && printf 1 > dir/sub/f')
    const usage = usageOf(app.runtime.workspaces.get('default', 'again').dir)
    await usage.refresh()
    // Removed whole, then made again: ext4 gives the new directory a freed inode number at once.
    const { reused } = await remadeUntilReused(app, 'rm -r dir && mkdir dir && printf 22 > dir/made', { times: 2, maxRounds: 12 })
    expect(usage.watched).toBe(true)
    expect(reused).toBe(2)
  })

  it('hears a directory that was removed and made again when everything was listed after it (a burst of events)', async () => {
    const app = await buildTestApp({ tools: { builtin: ['*'] } })
    await shell(app, 'again', 'mkdir -p dir/sub burst && printf 1 > dir/sub/f')
    const usage = usageOf(app.runtime.workspaces.get('default', 'again').dir)
    await usage.refresh()
    const fullScans = usage.fullScans
    // So many events that the catch-up lists every directory, before it lists the ones reported.
    const remake = `rm -r dir && mkdir dir && printf 22 > dir/made && cd burst && for i in $(seq ${BURST_FILES}); do : > f$i; done && rm f*`
    const { reused, rounds } = await remadeUntilReused(app, remake, { times: 1, maxRounds: 6 })
    expect(usage.fullScans).toBe(fullScans + rounds)
    expect(usage.watched).toBe(true)
    expect(reused).toBe(1)
  })

  it('refuses a write right after a process filled the workspace, writing nothing, without listing every directory', async () => {
    const app = await buildTestApp({ tools: { builtin: ['*'] }, workspaces: { max_bytes: 4096 } })
    await shell(app, 'full', TREE)
    const dir = app.runtime.workspaces.get('default', 'full').dir
    const usage = usageOf(dir)
    await usage.refresh()
    const fullScans = usage.fullScans
    await shell(app, 'full', 'mkdir -p deep/er && head -c 3500 /dev/zero > deep/er/big.bin')
    expectProblem(await execAs(app, '', 'write_file', { path: 'b.txt', content: 'b'.repeat(1000) }, 'full'), 413, 'PayloadTooLarge', 'write_file')
    expect(existsSync(path.join(dir, 'b.txt'))).toBe(false)
    await shell(app, 'full', 'truncate -s 0 deep/er/big.bin')
    expect((await execAs(app, '', 'write_file', { path: 'b.txt', content: 'b'.repeat(1000) }, 'full')).status).toBe(200)
    expect(usage.watched).toBe(true)
    expect(usage.fullScans).toBe(fullScans)
  })

  it('lists every directory when the watch limit is reached, and stays exact', async () => {
    const app = await buildTestApp({ tools: { builtin: ['*'] } })
    watchLimit.directories = watchedDirectoryCount() + 3
    await shell(app, 'limited', TREE)
    const usage = usageOf(app.runtime.workspaces.get('default', 'limited').dir)
    let { answered, truth } = await answeredAndTrue(app, 'limited')
    expect(answered).toEqual(truth)
    expect(usage.watched).toBe(false)
    const fullScans = usage.fullScans
    await shell(app, 'limited', 'mkdir -p x/y && printf 123 > x/y/z && rm -r pkg1')
    ;({ answered, truth } = await answeredAndTrue(app, 'limited'))
    expect(answered).toEqual(truth)
    expect(usage.fullScans).toBe(fullScans + 1)
  })

  it('lists every directory after a burst of events that may have overflowed the kernel queue, and stays exact', async () => {
    const app = await buildTestApp({ tools: { builtin: ['*'] } })
    await shell(app, 'burst', TREE)
    const usage = usageOf(app.runtime.workspaces.get('default', 'burst').dir)
    await usage.refresh()
    const fullScans = usage.fullScans
    // 2 × 9,000 events: over half of the default queue (16,384).
    await shell(app, 'burst', 'cd pkg3 && for i in $(seq 9000); do : > f$i; done && rm f1*')
    const { answered, truth } = await answeredAndTrue(app, 'burst')
    expect(answered).toEqual(truth)
    expect(usage.fullScans).toBe(fullScans + 1)
    expect(usage.watched).toBe(true)
  })

  it('counts, deletes and cleans up files and directories whose names are not UTF-8', async () => {
    const app = await buildTestApp({ tools: { builtin: ['*'] } })
    const odd = 'printf abc > "$(printf \'caf\\351.txt\')"; mkdir "$(printf \'dir\\377\')"; printf defg > "$(printf \'dir\\377/keep\\376\')"'
    await shell(app, 'odd', `${odd}; printf hi > plain.txt`)
    expect(await answeredAndTrue(app, 'odd')).toEqual({ answered: { files: 3, bytes: 9 }, truth: { files: 3, bytes: 9 } })
    // A change inside the oddly named directory is heard through its own watch.
    await shell(app, 'odd', 'printf 12345 >> "$(printf \'dir\\377/keep\\376\')"')
    expect((await answeredAndTrue(app, 'odd')).answered).toEqual({ files: 3, bytes: 14 })
    const root = app.runtime.workspaces.root
    expect((await requestAs(app, '', 'DELETE', '/v1/workspaces/odd')).status).toBe(204)
    // A call without a workspace leaves such names in its ephemeral one too.
    expect((await execAs(app, '', 'exec_shell', { command: odd })).status).toBe(200)
    const leftovers = async () => (await readdir(path.join(root, 'trash'))).length + (await readdir(path.join(root, 'ephemeral'))).filter((name) => name !== '.owner').length
    for (let waited = 0; await leftovers() > 0 && waited < 5000; waited += 50) await new Promise((resolve) => setTimeout(resolve, 50))
    expect(await leftovers()).toBe(0)
  })

  it('closes its watches when the workspace is deleted', async () => {
    const app = await buildTestApp({ tools: { builtin: ['*'] } })
    const before = watchedDirectoryCount()
    await shell(app, 'gone', TREE)
    await usageOf(app.runtime.workspaces.get('default', 'gone').dir).refresh()
    // The root, three packages and two lib directories.
    expect(watchedDirectoryCount()).toBe(before + 6)
    expect((await requestAs(app, '', 'DELETE', '/v1/workspaces/gone')).status).toBe(204)
    expect(watchedDirectoryCount()).toBe(before)
  })
})
