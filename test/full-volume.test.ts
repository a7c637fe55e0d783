/**
 * A full workspaces volume (a real tmpfs, filled): the service's own records
 * are never left half-written or beside a temp file, and what cannot be
 * written says so, not "internal error".
 */
import { execFileSync } from 'node:child_process'
import { readdir, readFile, rm, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { replaceFile } from '../src/replace-file.ts'
import { buildTestApp, onCleanup, tempDir } from './helper.ts'

/** A tmpfs of `size` mounted at a fresh directory, and a way to fill it and to make room again. */
async function smallVolume (size: string): Promise<{ dir: string, fill: () => Promise<void>, free: () => Promise<void> }> {
  const dir = await tempDir('toolport-full-')
  execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${size}`, 'tmpfs', dir])
  onCleanup(async () => { execFileSync('umount', ['-l', dir]) })
  const filler = path.join(dir, 'filler')
  return { dir, fill: async () => { await writeFile(filler, Buffer.alloc(64 * 1024 * 1024)).catch(() => {}) }, free: () => rm(filler, { force: true }) }
}

describe('a full volume', () => {
  it('leaves a record replaced whole or as it was, and no temp file', async () => {
    const volume = await smallVolume('256k')
    const record = path.join(volume.dir, 'record.json')
    await replaceFile(record, '{"v":1}')
    await volume.fill()
    await expect(replaceFile(record, JSON.stringify({ v: 2, pad: 'x'.repeat(100_000) }))).rejects.toMatchObject({ code: 'ENOSPC' })
    expect(await readFile(record, 'utf8')).toBe('{"v":1}')
    expect((await readdir(volume.dir)).sort()).toEqual(['filler', 'record.json'])
    await volume.free()
    await replaceFile(record, '{"v":3}', 0o600)
    expect(await readFile(record, 'utf8')).toBe('{"v":3}')
  })

  it('answers a workspace it cannot make as a full volume, not an internal error, and makes it once there is room', async () => {
    const volume = await smallVolume('1m')
    const app = await buildTestApp({ workspaces: { root: path.join(volume.dir, 'root') } })
    await app.ready()
    await volume.fill()
    for (let i = 0; i < 200; i++) await writeFile(path.join(volume.dir, `inode-${i}`), '').catch(() => {})
    const made = await app.inject({ method: 'POST', url: '/v1/workspaces', payload: { id: 'full' } })
    expect(made.statusCode).toBe(500)
    expect(made.json()).toMatchObject({ code: 'ExecutionFailed', detail: 'no space left on the service\'s volume' })
    await volume.free()
    expect((await app.inject({ method: 'POST', url: '/v1/workspaces', payload: { id: 'full' } })).statusCode).toBe(201)
  })

  it('writes the end of a process that ended while the volume was full once there is room', async () => {
    const volume = await smallVolume('1m')
    const root = path.join(volume.dir, 'root')
    const app = await buildTestApp({ workspaces: { root }, tools: { builtin: ['*'] } })
    const started = await app.inject({ method: 'POST', url: '/v1/workspaces/w/processes', payload: { command: 'sleep 0.5' } })
    expect(started.statusCode, started.body).toBe(201)
    const id = String(started.json()['id'])
    const record = path.join(root, 'tenants', 'default', 'processes', 'w', `${id}.json`)
    expect(JSON.parse(await readFile(record, 'utf8'))).toMatchObject({ ended_at: null })
    await volume.fill()
    // Its end comes while nothing can be written...
    const state = async (): Promise<unknown> => (await app.inject({ method: 'GET', url: `/v1/workspaces/w/processes/${id}` })).json()['state']
    const until = Date.now() + 5000
    while (await state() === 'running' && Date.now() < until) await new Promise((resolve) => setTimeout(resolve, 50))
    expect(await state()).toBe('exited')
    await new Promise((resolve) => setTimeout(resolve, 1500))
    expect(JSON.parse(await readFile(record, 'utf8'))).toMatchObject({ ended_at: null })
    // ...and is on disk soon after there is room again: other instances read it there.
    await volume.free()
    const deadline = Date.now() + 5000
    let ended: unknown = null
    while (ended === null && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 100))
      ended = (JSON.parse(await readFile(record, 'utf8')) as { ended_at: unknown }).ended_at
    }
    expect(ended).toEqual(expect.any(String))
  })
})
