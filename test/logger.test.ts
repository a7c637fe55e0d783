/**
 * The service's log destination (src/logger.ts, pino's own asynchronous
 * destination): lines leave in order and whole, a lone line within the flush
 * interval, everything at exit; a stalled pipe holds a bounded backlog and
 * the rest is dropped, never the service's memory.
 */
import { execFileSync, spawn } from 'node:child_process'
import { closeSync, constants, openSync, readSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterEach, describe, expect, it } from 'vitest'
import { logDestination } from '../src/logger.ts'
import { tempDir } from './support/temp.ts'

const SOURCE = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'src', 'logger.ts')
const fds: number[] = []
afterEach(() => { for (const fd of fds.splice(0)) closeSync(fd) })

const line = (i: number, pad = 0): string => `${JSON.stringify({ i, pad: 'x'.repeat(pad) })}\n`

async function until (condition: () => boolean, ms = 5000): Promise<void> {
  for (const deadline = Date.now() + ms; !condition();) {
    if (Date.now() > deadline) throw new Error('timed out')
    await new Promise((resolve) => setTimeout(resolve, 5))
  }
}

describe('log destination', () => {
  it('writes a lone line within the flush interval, while the process goes on', async () => {
    const script = `import { createLogger } from ${JSON.stringify(SOURCE)}
const log = createLogger({ logging: { level: 'info' } }, { pretty: false })
log.info('lone line')
setTimeout(() => {}, 60_000)`
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] })
    try {
      let output = ''
      child.stdout.on('data', (chunk: Buffer) => { output += chunk.toString() })
      await until(() => output.includes('lone line'))
      expect(JSON.parse(output)).toMatchObject({ level: 30, msg: 'lone line' })
    } finally {
      child.kill('SIGKILL')
    }
  })

  it('writes every waiting line, in order, when the process exits', () => {
    const script = `import { createLogger } from ${JSON.stringify(SOURCE)}
const log = createLogger({ logging: { level: 'info' } }, { pretty: false })
for (let i = 0; i < 2000; i++) log.info({ i })
process.exit(0)`
    const output = execFileSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' })
    expect(output.split('\n').filter(Boolean).map((l) => JSON.parse(l).i)).toEqual(Array.from({ length: 2000 }, (_, i) => i))
  })

  it('keeps a bounded backlog for a pipe nobody reads, drops the rest, and writes what it kept once the pipe drains', async () => {
    const fifo = path.join(await tempDir('log-'), 'pipe')
    execFileSync('mkfifo', [fifo])
    // Read-write so that the open does not wait for a reader; non-blocking as stdout pipes are.
    const fd = openSync(fifo, constants.O_RDWR | constants.O_NONBLOCK)
    fds.push(fd)
    const destination = logDestination(fd, { maxWaitingBytes: 256 * 1024 })
    let dropped = 0
    destination.on('drop', () => { dropped++ })
    const accepted: string[] = []
    for (let i = 0; i < 5000; i++) {
      const before = dropped
      const text = line(i, 100)
      destination.write(text)
      if (dropped === before) accepted.push(text)
    }
    expect(dropped).toBeGreaterThan(0)
    expect(dropped + accepted.length).toBe(5000)
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
})

/** Runs `script` with stdout on `stdout`; answers its exit code and stderr, or null if it was still running after 10 s. */
async function exitOf (script: string, stdout: number): Promise<{ code: number | null, stderr: string }> {
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', stdout, 'pipe'] })
  let stderr = ''
  child.stderr?.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
  const code = await new Promise<number | null>((resolve) => {
    const timer = setTimeout(() => { child.kill('SIGKILL'); resolve(null) }, 10_000)
    child.once('exit', (exitCode) => { clearTimeout(timer); resolve(exitCode) })
  })
  return { code, stderr }
}

/** Logs lines that stay waiting in the destination (below its batch), then exits at once. */
const EXIT_WITH_LINES_WAITING = `import { createLogger } from ${JSON.stringify(SOURCE)}
const log = createLogger({ logging: { level: 'info' } }, { pretty: false })
setTimeout(() => { log.info('waiting'); log.info('still waiting'); process.exit(0) }, 300)`

describe('a log output that fails', () => {
  it('is cut off with one line on stderr: the process goes on and exits when asked, never stuck on a full disk', async () => {
    const script = `import { createLogger } from ${JSON.stringify(SOURCE)}
const log = createLogger({ logging: { level: 'info' } }, { pretty: false })
for (let i = 0; i < 5000; i++) log.info({ i, pad: 'x'.repeat(100) })
setTimeout(() => { log.info('after the failure'); log.flush(() => { console.error('alive'); process.exit(0) }) }, 500)`
    const full = openSync('/dev/full', 'w')
    fds.push(full)
    const { code, stderr } = await exitOf(script, full)
    expect(stderr).toContain('writing log lines failed (ENOSPC)')
    expect(stderr).toContain('alive')
    expect(code).toBe(0)
  })

  it('does not hold the exit when the pipe was closed while lines were waiting (a reader that went away)', async () => {
    const fifo = path.join(await tempDir('log-'), 'pipe')
    execFileSync('mkfifo', [fifo])
    const reader = openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK)
    const writer = openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK)
    fds.push(writer)
    // The only reader goes away before anything is written: the exit's flush gets EPIPE.
    closeSync(reader)
    const { code, stderr } = await exitOf(EXIT_WITH_LINES_WAITING, writer)
    expect(code).toBe(0)
    expect(stderr).toBe('')
  })

  it('does not hold the exit for longer than a bounded wait when the pipe nobody reads is full', async () => {
    const fifo = path.join(await tempDir('log-'), 'pipe')
    execFileSync('mkfifo', [fifo])
    // In the child, whose stdio Node makes blocking: a descriptor of its own, non-blocking as the
    // service's stdout pipe may be, filled so that every write of the exit's flush gets EAGAIN.
    const script = `import { constants, openSync, writeSync } from 'node:fs'
import pino from 'pino'
import { logDestination } from ${JSON.stringify(SOURCE)}
const fd = openSync(${JSON.stringify(fifo)}, constants.O_RDWR | constants.O_NONBLOCK)
for (const block = Buffer.alloc(65536, 'x'); ;) {
  try { writeSync(fd, block) } catch { break }
}
const log = pino(logDestination(fd))
setTimeout(() => { log.info('waiting'); process.exit(0) }, 300)`
    const { code, stderr } = await exitOf(script, 1)
    expect(code).toBe(0)
    expect(stderr).toBe('')
  })
})
