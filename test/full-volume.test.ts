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
    expect(made.json()).toMatchObject({ code: 'ExecutionFailed', detail: 'no space left on the workspaces volume' })
    await volume.free()
    expect((await app.inject({ method: 'POST', url: '/v1/workspaces', payload: { id: 'full' } })).statusCode).toBe(201)
  })
})
