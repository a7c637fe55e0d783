/**
 * The log destination (src/log-destination.ts): lines leave in order and
 * whole, in batches, within the flush interval and at exit; a stalled pipe
 * holds a bounded number of them and the rest are counted as dropped.
 */
import { execFileSync } from 'node:child_process'
import { closeSync, constants, openSync, readFileSync, readSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterEach, describe, expect, it } from 'vitest'
import { LogDestination } from '../src/log-destination.ts'
import { tempDir } from './support/temp.ts'

const SOURCE = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'src', 'log-destination.ts')
const fds: number[] = []
afterEach(() => { for (const fd of fds.splice(0)) closeSync(fd) })

async function logFile (): Promise<{ fd: number, read: () => string }> {
  const file = path.join(await tempDir('log-'), 'out.log')
  const fd = openSync(file, 'w')
  fds.push(fd)
  return { fd, read: () => readFileSync(file, 'utf8') }
}

const line = (i: number, pad = 0): string => `${JSON.stringify({ i, pad: 'x'.repeat(pad) })}\n`

async function until (condition: () => boolean, ms = 5000): Promise<void> {
  for (const deadline = Date.now() + ms; !condition();) {
    if (Date.now() > deadline) throw new Error('timed out')
    await new Promise((resolve) => setTimeout(resolve, 5))
  }
}

describe('log destination', () => {
  it('holds lines until a batch fills or a flush asks, then writes them in order', async () => {
    const out = await logFile()
    const destination = new LogDestination({ fd: out.fd, batchChars: 1000, flushMs: 60_000 })
    for (let i = 0; i < 3; i++) destination.write(line(i))
    await new Promise((resolve) => setTimeout(resolve, 50))
    expect(out.read()).toBe('')
    await new Promise<void>((resolve) => { destination.flush(() => { resolve() }) })
    expect(out.read()).toBe(line(0) + line(1) + line(2))
    // A full batch goes by itself.
    for (let i = 3; i < 40; i++) destination.write(line(i, 30))
    await until(() => out.read().length >= 1000)
    expect(out.read().startsWith(line(0) + line(1) + line(2) + line(3, 30))).toBe(true)
  })

  it('writes a lone line within the flush interval', async () => {
    const out = await logFile()
    const destination = new LogDestination({ fd: out.fd, flushMs: 20 })
    destination.write(line(7))
    await until(() => out.read() === line(7), 2000)
  })

  it('keeps a bounded backlog for a pipe nobody reads, drops and counts the rest, and writes what it kept once the pipe drains', async () => {
    const fifo = path.join(await tempDir('log-'), 'pipe')
    execFileSync('mkfifo', [fifo])
    // Read-write so that the open does not wait for a reader; non-blocking as stdout pipes are.
    const fd = openSync(fifo, constants.O_RDWR | constants.O_NONBLOCK)
    fds.push(fd)
    const destination = new LogDestination({ fd, batchChars: 4096, flushMs: 10, maxWaitingChars: 256 * 1024 })
    const accepted: string[] = []
    for (let i = 0; i < 5000; i++) {
      const text = line(i, 100)
      if (destination.write(text)) accepted.push(text)
    }
    expect(destination.dropped).toBeGreaterThan(0)
    expect(destination.dropped + accepted.length).toBe(5000)
    // Drain the pipe: every accepted line comes out, whole and in order.
    const want = accepted.join('')
    const chunks: Buffer[] = []
    let got = 0
    const buffer = Buffer.alloc(65536)
    await until(() => {
      try {
        const n = readSync(fd, buffer)
        chunks.push(Buffer.from(buffer.subarray(0, n)))
        got += n
      } catch {}
      return got >= Buffer.byteLength(want)
    }, 10_000)
    expect(Buffer.concat(chunks).toString('utf8')).toBe(want)
  })

  it('writes what waits when the process exits', () => {
    const script = `import { LogDestination } from ${JSON.stringify(SOURCE)}
const d = new LogDestination({ fd: 1, flushMs: 60000 })
for (let i = 0; i < 2000; i++) d.write(JSON.stringify({ i }) + '\\n')
process.exit(0)`
    const output = execFileSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' })
    expect(output.split('\n').filter(Boolean).map((l) => JSON.parse(l).i)).toEqual(Array.from({ length: 2000 }, (_, i) => i))
  })
})
