/**
 * The archive download's tar stream is gathered in one buffer that gzip is
 * given whole and that is filled again only once gzip has taken it: a
 * download holds one buffer whatever the workspace's size (a fresh buffer
 * per chunk would pile up until V8 collects it), and the archive stays
 * exact (a buffer filled again too early would corrupt it).
 */
import { execFileSync } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { mkdir, readFile, readlink, symlink, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { pipeline } from 'node:stream/promises'
import zlib from 'node:zlib'
import { pino } from 'pino'
import * as tar from 'tar'
import { extract } from 'tar'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { packWorkspace } from '../../src/workspaces/archive-pack.ts'
import { TAR_BUFFER_BYTES } from '../../src/workspaces/archive-tar-output.ts'
import { tempDir } from '../support/temp.ts'

afterEach(() => { vi.restoreAllMocks() })

describe('packWorkspace', () => {
  it('logs nothing when its reader goes away mid-download (the usual case), however the next write fails', async () => {
    const workspace = await tempDir()
    for (let i = 0; i < 40; i++) await writeFile(path.join(workspace, `f${i}.bin`), randomBytes(256 * 1024))
    const lines: string[] = []
    const log = pino({ level: 'debug' }, { write: (line: string) => { lines.push(line) } })
    const archive = packWorkspace(workspace, log)
    // The reader takes a first chunk, then leaves: the answer carrying the archive destroys it.
    await new Promise<void>((resolve) => archive.once('data', () => { archive.destroy(); resolve() }))
    await new Promise((resolve) => setTimeout(resolve, 300))
    expect(lines).toEqual([])
  })

  it('gives gzip one buffer, full until the last write, and the archive holds every file exactly', async () => {
    const workspace = await tempDir()
    const small = new Map<string, string>()
    for (let i = 0; i < 300; i++) small.set(`many/f${i}.txt`, `file ${i} `.repeat(i % 7 + 1))
    await mkdir(path.join(workspace, 'many'))
    for (const [name, content] of small) await writeFile(path.join(workspace, name), content)
    const large = randomBytes(3 * TAR_BUFFER_BYTES + 12_345)
    await writeFile(path.join(workspace, 'large.bin'), large)
    const longName = `${'n'.repeat(150)}.txt`
    await writeFile(path.join(workspace, longName), 'a name past the 100 bytes of a tar header')
    await symlink('large.bin', path.join(workspace, 'link'))

    const writes: Buffer[] = []
    const write = zlib.Gzip.prototype.write
    vi.spyOn(zlib.Gzip.prototype, 'write').mockImplementation(function (this: zlib.Gzip, ...args: Parameters<typeof write>) {
      writes.push(args[0] as Buffer)
      return write.apply(this, args)
    })
    const out = await tempDir()
    await pipeline(packWorkspace(workspace), extract({ cwd: out }))

    expect(new Set(writes.map((chunk) => chunk.buffer)).size).toBe(1)
    for (const chunk of writes.slice(0, -1)) expect(chunk.length).toBe(TAR_BUFFER_BYTES)
    expect(await readFile(path.join(out, 'large.bin'))).toEqual(large)
    for (const [name, content] of small) expect(await readFile(path.join(out, name), 'utf8')).toBe(content)
    expect(await readFile(path.join(out, longName), 'utf8')).toBe('a name past the 100 bytes of a tar header')
    expect(await readlink(path.join(out, 'link'))).toBe('large.bin')
  })

  it('packs a tree deeper than any path a header holds, leaving every such path to its pax record (node-tar never splits one)', async () => {
    const workspace = await tempDir()
    const name = 'E'.repeat(200)
    // Paths of up to 3 KB: past the 256 bytes a header holds.
    execFileSync('sh', ['-c', `for i in $(seq 15); do mkdir ${name} && cd ${name}; done; echo deep > f`], { cwd: workspace })
    const encoded: number[] = []
    const encode = tar.Header.prototype.encode
    vi.spyOn(tar.Header.prototype, 'encode').mockImplementation(function (this: tar.Header, ...args: Parameters<typeof encode>) {
      encoded.push(Buffer.byteLength(this.path ?? ''))
      return encode.apply(this, args)
    })
    const paths: string[] = []
    await pipeline(packWorkspace(workspace), tar.t({ onReadEntry: (entry) => { paths.push(entry.path) } }))
    const deep = Array.from({ length: 15 }, () => name).join('/')
    expect(paths).toContain(`${deep}/f`)
    expect(paths).toContain(`${deep}/`)
    expect(paths).toHaveLength(16)
    expect(Math.max(...encoded)).toBeLessThanOrEqual(256)
  })

  it('packs entries whose names are not UTF-8, under their names with U+FFFD for those bytes', async () => {
    const workspace = await tempDir()
    const at = (name: string) => Buffer.concat([Buffer.from(`${workspace}/`), Buffer.from(name, 'latin1')])
    await writeFile(at('caf\xe9.txt'), 'abc')
    await mkdir(at('dir\xff'))
    await writeFile(Buffer.concat([at('dir\xff'), Buffer.from('/keep.txt')]), 'kept')
    const out = await tempDir()
    await pipeline(packWorkspace(workspace), extract({ cwd: out }))
    expect(await readFile(path.join(out, 'caf\uFFFD.txt'), 'utf8')).toBe('abc')
    expect(await readFile(path.join(out, 'dir\uFFFD', 'keep.txt'), 'utf8')).toBe('kept')
  })
})
