/**
 * The socket pairs a process writes its output to: what the writer end
 * carries arrives at the reader's callback, and a stranger that reaches
 * the listening socket is closed, never taken for a process's writer.
 */
import { randomBytes } from 'node:crypto'
import { once } from 'node:events'
import { readdir, rm } from 'node:fs/promises'
import net from 'node:net'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { OutputSockets } from '../../src/processes/output-sockets.ts'
import { onCleanup, tempDir } from '../support/temp.ts'

async function sockets (): Promise<{ outputs: OutputSockets, dir: string, listening: () => Promise<string> }> {
  const dir = await tempDir('toolport-output-sockets-')
  const outputs = new OutputSockets(async () => dir)
  onCleanup(() => outputs.close())
  // The listening socket's file, once a first pair has made it.
  const listening = async (): Promise<string> => path.join(dir, (await readdir(dir)).find((name) => name.startsWith('pairs-')) ?? 'none')
  return { outputs, dir, listening }
}

/** A connection to the listening socket that sends `bytes` and answers once the service has closed it. */
async function stranger (file: string, bytes: Buffer): Promise<{ closed: Promise<unknown> }> {
  const socket = net.connect({ path: file })
  socket.on('error', () => {})
  await once(socket, 'connect')
  socket.write(bytes)
  socket.resume()
  return { closed: once(socket, 'close') }
}

describe('output sockets', () => {
  it('carries what the writer end gets to the reader, in order, and closes the reader when the writer goes', async () => {
    const { outputs } = await sockets()
    const got: Buffer[] = []
    const pair = await outputs.pair((bytes) => got.push(Buffer.from(bytes)))
    const sent = randomBytes(300_000)
    pair.writer.end(sent)
    await once(pair.reader, 'close')
    expect(Buffer.concat(got).equals(sent)).toBe(true)
  })

  it('closes a stranger that sends a wrong nonce or more, while pairs made at the same time get their own writers', async () => {
    const { outputs, listening } = await sockets()
    // The listener exists once a first pair has been made.
    const first = await outputs.pair(() => {})
    first.writer.destroy()
    first.reader.destroy()
    const file = await listening()
    const wrong = await stranger(file, randomBytes(16))
    const long = await stranger(file, randomBytes(40))
    const received: string[] = []
    const pairs = await Promise.all([1, 2, 3].map(async (n) => {
      const pair = await outputs.pair((bytes) => received.push(`${n}:${bytes.toString()}`))
      return { n, pair }
    }))
    await Promise.all([wrong.closed, long.closed])
    for (const { n, pair } of pairs) pair.writer.end(`from ${n}`)
    await Promise.all(pairs.map(({ pair }) => once(pair.reader, 'close')))
    expect(received.sort()).toEqual(['1:from 1', '2:from 2', '3:from 3'])
  })

  it('listens anew when its socket file is removed (a cleaner of temporary files), and each service listens at a name of its own', async () => {
    const { outputs, dir, listening } = await sockets()
    const other = new OutputSockets(async () => dir)
    onCleanup(() => other.close())
    const received: string[] = []
    const before = await outputs.pair(() => {})
    before.writer.destroy()
    await rm(await listening())
    const pairs = await Promise.all(['a', 'b'].map(async (name) => ({ name, pair: await outputs.pair((bytes) => received.push(`${name}:${bytes.toString()}`)) })))
    const beside = await other.pair((bytes) => received.push(`other:${bytes.toString()}`))
    for (const { name, pair } of pairs) pair.writer.end(name)
    beside.writer.end('other')
    await Promise.all([...pairs.map(({ pair }) => once(pair.reader, 'close')), once(beside.reader, 'close')])
    expect(received.sort()).toEqual(['a:a', 'b:b', 'other:other'])
    expect((await readdir(dir)).filter((name) => name.startsWith('pairs-'))).toHaveLength(2)
  })

  it('tries to listen again at the next pair after a listen that failed', async () => {
    const dir = await tempDir('toolport-output-sockets-')
    let failures = 1
    const outputs = new OutputSockets(async () => {
      if (failures-- > 0) throw new Error('the directory could not be made')
      return dir
    })
    onCleanup(() => outputs.close())
    await expect(outputs.pair(() => {})).rejects.toThrow('the directory could not be made')
    const pair = await outputs.pair(() => {})
    pair.writer.end()
    await once(pair.reader, 'close')
  })
})
