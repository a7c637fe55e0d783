/**
 * read_file's shortcut (one O_NOFOLLOW open when no symlink is on the way,
 * proved through /proc/self/fd for nested paths) and its stat-and-read in
 * one round trip must answer exactly what the full resolution would.
 */
import { execFileSync, spawn } from 'node:child_process'
import { once } from 'node:events'
import { mkdir, rename, symlink, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { editFileTool } from '../../src/tools/edit-file.ts'
import { readFileTool } from '../../src/tools/read-file.ts'
import { codeOf, toolContext } from '../support/context.ts'

const read = (ctx: Awaited<ReturnType<typeof toolContext>>, p: string) => readFileTool.execute({ path: p }, ctx) as Promise<{ content: string }>

describe('read_file shortcut', () => {
  it('reads nested files, and files behind a symlinked directory inside the workspace, whole', async () => {
    const ctx = await toolContext()
    await mkdir(path.join(ctx.workspaceDir, 'a', 'b'), { recursive: true })
    await writeFile(path.join(ctx.workspaceDir, 'a', 'b', 'c.txt'), 'nested ✓\n')
    await symlink('a/b', path.join(ctx.workspaceDir, 'via'))
    await symlink('c.txt', path.join(ctx.workspaceDir, 'a', 'b', 'link.txt'))
    expect((await read(ctx, 'a/b/c.txt')).content).toBe('nested ✓\n')
    expect((await read(ctx, './a/../a/b/c.txt')).content).toBe('nested ✓\n')
    expect((await read(ctx, 'via/c.txt')).content).toBe('nested ✓\n')
    expect((await read(ctx, 'a/b/link.txt')).content).toBe('nested ✓\n')
  })

  it('answers sizes around its buffers byte for byte, one byte past the limit at most', async () => {
    const ctx = await toolContext({ maxResultBytes: 100_000 })
    for (const size of [0, 1, 16 * 1024, 64 * 1024, 64 * 1024 + 1, 64 * 1024 + 2, 99_999, 100_000, 100_001, 300_000]) {
      const text = Array.from({ length: size }, (_, i) => String.fromCharCode(97 + (i % 26))).join('')
      await writeFile(path.join(ctx.workspaceDir, `f${size}.txt`), text)
      const { content } = await read(ctx, `f${size}.txt`)
      expect(content, `size ${size}`).toBe(text.slice(0, 100_001))
    }
  })

  it('sees a file replaced under the same name (nothing is cached between calls)', async () => {
    const ctx = await toolContext()
    await writeFile(path.join(ctx.workspaceDir, 'r.txt'), 'old')
    expect((await read(ctx, 'r.txt')).content).toBe('old')
    await writeFile(path.join(ctx.workspaceDir, 'r.next'), 'new content')
    await rename(path.join(ctx.workspaceDir, 'r.next'), path.join(ctx.workspaceDir, 'r.txt'))
    expect((await read(ctx, 'r.txt')).content).toBe('new content')
  })

  it('refuses a FIFO at once instead of waiting for a writer, and keeps refusing directories and missing files', async () => {
    const ctx = await toolContext()
    execFileSync('mkfifo', [path.join(ctx.workspaceDir, 'pipe')])
    await mkdir(path.join(ctx.workspaceDir, 'dir'))
    expect(await codeOf(read(ctx, 'pipe'))).toBe('InvalidArgs')
    expect(await codeOf(readFileTool.execute({ path: 'pipe', offset: 1 }, ctx))).toBe('InvalidArgs')
    expect(await codeOf(read(ctx, 'dir'))).toBe('InvalidArgs')
    expect(await codeOf(read(ctx, 'missing.txt'))).toBe('FileNotFound')
    expect(await codeOf(read(ctx, 'dir/missing.txt'))).toBe('FileNotFound')
    expect(await codeOf(read(ctx, '.'))).toBe('InvalidArgs')
  }, 15_000)

  it('answers Conflict, without waiting, for a file another process holds a lease on', async () => {
    const ctx = await toolContext()
    const file = path.join(ctx.workspaceDir, 'leased.txt')
    await writeFile(file, 'held\n')
    // F_SETLEASE (1024) with F_WRLCK (1): another open of the file is refused (O_NONBLOCK) or waits until the holder lets go
    // or the lease-break time passes; the holder ignores SIGIO, the signal that asks it to let go, which would end it.
    const holder = spawn('perl', ['-e', '$SIG{IO} = "IGNORE"; open(my $f, "<", $ARGV[0]) or die; fcntl($f, 1024, 1) or die "lease: $!"; $| = 1; print "held\n"; sleep 60', file], { stdio: ['ignore', 'pipe', 'inherit'] })
    try {
      await once(holder.stdout, 'data')
      expect(await codeOf(read(ctx, 'leased.txt'))).toBe('Conflict')
      expect(await codeOf(editFileTool.execute({ path: 'leased.txt', old_text: 'held', new_text: 'taken' }, ctx))).toBe('Conflict')
    } finally {
      holder.kill('SIGKILL')
    }
    await once(holder, 'close')
    expect((await read(ctx, 'leased.txt')).content).toBe('held\n')
  }, 15_000)
})
