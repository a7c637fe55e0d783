/**
 * A workspace's usage as a running figure: exact through the contained
 * writes' deltas without a walk, stale when something else may have changed
 * the tree, and brought up to date by a scan.
 */
import { mkdirSync, writeFileSync } from 'node:fs'
import { mkdir, realpath, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { writeContained } from '../../src/workspace-fs/write.ts'
import { workspaceQuota } from '../../src/workspaces/quotas.ts'
import { forgetUsage, startUsage, usageOf } from '../../src/workspaces/usage.ts'
import { codeOf } from '../support/context.ts'
import { tempDir } from '../support/temp.ts'

async function emptyWorkspace (): Promise<string> {
  const dir = await realpath(await tempDir('toolport-usage-'))
  startUsage(dir)
  return dir
}

const write = (dir: string, name: string, content: string, maxBytes = 1 << 20) =>
  writeContained(dir, path.join(dir, name), name, content, { createParents: true, quota: workspaceQuota(dir, maxBytes) })

describe('workspace usage', () => {
  it('follows contained writes by their deltas, without a walk', async () => {
    const dir = await emptyWorkspace()
    await write(dir, 'a.txt', 'hello')
    await write(dir, 'sub/b.txt', 'abc')
    await write(dir, 'a.txt', 'hi')
    // A file put there behind the service's back is not counted: nothing walked the tree.
    await writeFile(path.join(dir, 'unseen.txt'), '1234567')
    expect(await usageOf(dir).current(Infinity)).toEqual({ files: 2, bytes: 5 })
  })

  it('is stale while and after a change the tools do not report, until a scan', async () => {
    const dir = await emptyWorkspace()
    const usage = usageOf(dir)
    const end = usage.beginChange()
    expect(usage.stale).toBe(true)
    await mkdir(path.join(dir, 'd'))
    await writeFile(path.join(dir, 'd', 'made.txt'), '1234')
    end({ rescan: false })
    expect(usage.figure).toEqual({ files: 0, bytes: 0 })
    expect(await usage.current(Infinity)).toEqual({ files: 1, bytes: 4 })
    expect(usage.stale).toBe(false)
  })

  it('answers a large stale workspace from its figure at once, and a small one after its scan', async () => {
    const dir = await emptyWorkspace()
    for (let i = 0; i < 5; i++) await write(dir, `f${i}`, 'x')
    const usage = usageOf(dir)
    usage.beginChange()({ rescan: false })
    await writeFile(path.join(dir, 'more'), 'yy')
    // Over the threshold: the figure now, the scan in the background.
    expect(await usage.current(4)).toEqual({ files: 5, bytes: 5 })
    await usage.refresh()
    expect(await usage.current(4)).toEqual({ files: 6, bytes: 7 })
  })

  it('refuses a growing write to a stale workspace by the truth, and lets one of two racing writes take the last bytes', async () => {
    const dir = await emptyWorkspace()
    await write(dir, 'seed', 's', 2048)
    const usage = usageOf(dir)
    usage.beginChange()({ rescan: false })
    await writeFile(path.join(dir, 'filled'), 'f'.repeat(1500))
    expect(await codeOf(write(dir, 'late', 'l'.repeat(600), 2048))).toBe('PayloadTooLarge')
    const outcomes = await Promise.all([write(dir, 'x', 'x'.repeat(300), 2048), write(dir, 'y', 'y'.repeat(300), 2048)].map(codeOf))
    expect(outcomes.sort()).toEqual(['PayloadTooLarge', 'ok'])
    expect(usage.figure).toEqual({ files: 3, bytes: 1801 })
  })

  it('starts afresh for a workspace made again at a forgotten directory', async () => {
    const dir = await emptyWorkspace()
    await write(dir, 'a', 'aaa')
    forgetUsage(dir)
    // Unknown: counted on first need.
    expect(await usageOf(dir).current(0)).toEqual({ files: 1, bytes: 3 })
  })

  it('lets a small workspace of another tenant scan between the turns of two long walks', async () => {
    const root = await realpath(await tempDir('toolport-usage-turns-'))
    // Two workspaces of one tenant, of many directories each (a walk of many turns), and one of another tenant.
    const walked = ['a/w1', 'a/w2'].map((name) => path.join(root, name))
    for (const dir of walked) {
      for (let i = 0; i < 2000; i++) mkdirSync(path.join(dir, `d${i}`), { recursive: true })
      writeFileSync(path.join(dir, 'd7', 'file'), 'abc')
    }
    const small = path.join(root, 'b', 'w')
    await mkdir(small, { recursive: true })
    startUsage(small)
    const usage = usageOf(small)
    usage.beginChange()({ rescan: false })
    await writeFile(path.join(small, 'made'), '12345')

    const finished: string[] = []
    // Never counted: both take a scan slot for a full walk, the only two there are.
    const walks = walked.map((dir) => usageOf(dir).refresh().then(() => { finished.push(dir) }))
    await usage.refresh()
    // Without turns the small scan would wait for one of the walks to end.
    expect(finished).toEqual([])
    expect(usage.figure).toEqual({ files: 1, bytes: 5 })
    await Promise.all(walks)
    // Walks given up for a turn and taken again count every directory once.
    for (const dir of walked) expect(usageOf(dir).figure).toEqual({ files: 1, bytes: 3 })
    for (const dir of [...walked, small]) forgetUsage(dir)
  })
})
