/**
 * The ephemeral root belongs to one instance, which empties it at start: a
 * second instance given the same root (the default one, on a shared
 * workspace root) is refused at start when it runs on this host
 * (test/e2e/server.test.ts starts two), and one elsewhere is told of in the
 * log. A sweep removes only what its own instance made, so an instance
 * never removes another's workspaces after its start.
 */
import { existsSync } from 'node:fs'
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { ConfigError } from '../../src/config.ts'
import { EphemeralWorkspaces } from '../../src/workspaces/ephemeral.ts'
import { capturingLogger } from '../sources/helpers.ts'
import { tempDir } from '../support/temp.ts'

describe('the owner of an ephemeral root', () => {
  it('empties the root at start; a sweep removes only its own leftovers, and says once that another instance took the root', async () => {
    const root = await tempDir('toolport-ephemeral-')
    await mkdir(path.join(root, 'left-by-an-instance-before'))
    const { log, lines } = capturingLogger()
    const here = new EphemeralWorkspaces(log)
    await here.init(root)
    expect(existsSync(path.join(root, 'left-by-an-instance-before'))).toBe(false)
    const owner = JSON.parse(await readFile(path.join(root, '.owner'), 'utf8')) as Record<string, unknown>
    expect(owner).toMatchObject({ pid: process.pid, startedAt: expect.stringMatching(/^\d+$/), instance: expect.any(String) })
    // A workspace of its own whose removal failed, by the name its leases have.
    const lease = await here.lease()
    await lease.release()
    const ownLeftover = path.join(root, `${path.basename(lease.dir).slice(0, 9)}left-over`)
    await mkdir(ownLeftover)
    // Another host's instance started on the root (it emptied it then): what it makes is its own.
    await writeFile(path.join(root, '.owner'), JSON.stringify({ ...owner, host: 'elsewhere', pid: 1, instance: 'theirs' }))
    await mkdir(path.join(root, 'theirs-1'))
    await here.sweep()
    await here.sweep()
    expect(existsSync(ownLeftover)).toBe(false)
    expect(existsSync(path.join(root, 'theirs-1'))).toBe(true)
    expect(lines.filter((line) => line.level === 50).map((line) => line.msg)).toEqual(['another instance has taken workspaces.ephemeral_root (it emptied it as it started): give each instance its own'])
  })

  it('writes its record again when it is missing or spoilt, and sweeps as before', async () => {
    const root = await tempDir('toolport-ephemeral-')
    const { log, lines } = capturingLogger()
    const here = new EphemeralWorkspaces(log)
    await here.init(root)
    const record = await readFile(path.join(root, '.owner'), 'utf8')
    for (const spoil of [async () => rm(path.join(root, '.owner')), async () => writeFile(path.join(root, '.owner'), '{"host":')]) {
      await spoil()
      await here.sweep()
      expect(await readFile(path.join(root, '.owner'), 'utf8')).toBe(record)
    }
    expect(lines.filter((line) => line.level === 40).length).toBe(2)
    expect(lines.filter((line) => line.level === 50)).toEqual([])
  })

  it('refuses a second start here while the first runs, and takes a root whose owner has ended or was another process of its pid', async () => {
    const root = await tempDir('toolport-ephemeral-')
    const { log } = capturingLogger()
    await new EphemeralWorkspaces(log).init(root)
    const owner = JSON.parse(await readFile(path.join(root, '.owner'), 'utf8')) as Record<string, unknown>
    // This process, as another instance's record would name it (its own pid is always its own).
    const parent = { ...owner, pid: process.ppid, startedAt: await startTimeOf(process.ppid) }
    await writeFile(path.join(root, '.owner'), JSON.stringify(parent))
    const refused = await new EphemeralWorkspaces(log).init(root).then(() => undefined, (error: unknown) => error)
    expect(refused).toBeInstanceOf(ConfigError)
    expect((refused as Error).message).toMatch(new RegExp(`is in use by another running instance \\(pid ${process.ppid}\\)`))
    // The same pid, started at another time: not the owner (its pid was taken since).
    await writeFile(path.join(root, '.owner'), JSON.stringify({ ...parent, startedAt: '1' }))
    await new EphemeralWorkspaces(log).init(root)
  })
})

async function startTimeOf (pid: number): Promise<string> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8')
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] ?? ''
}
