/**
 * An event stream relayed from the instance that runs a process: whole
 * events pass; when that instance stops mid-way, the half event it sent is
 * dropped and the stream ends with the lost process's `end` event; a client
 * that leaves is no failure of that instance. The other instance here is a
 * real HTTP server on 127.0.0.1 that speaks as one would.
 */
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import path from 'node:path'
import Fastify from 'fastify'
import { describe, expect, it } from 'vitest'
import { installProblemHandlers } from '../../src/http/plugins/problem.ts'
import { relay } from '../../src/http/routes/process-relay.ts'
import { lostInfo } from '../../src/processes/process-locator.ts'
import { PEER_KEY_FILE, PeerKey } from '../../src/processes/peer-key.ts'
import { INSTANCE_HEADER, Peers } from '../../src/processes/peers.ts'
import { onCleanup, tempDir } from '../helper.ts'

const RECORD = { id: 'p_0123456789ab', workspace: 'w', command: 'tick', started_at: '2026-01-01T00:00:00.000Z', ended_at: null, owner: 'set below', instance: 'run-1' }

/** Another instance: /healthz names its run; the output path answers with what `stream` writes. */
async function peer (stream: (response: http.ServerResponse) => void): Promise<string> {
  const server = http.createServer((request, response) => {
    if (request.url === '/healthz') {
      response.writeHead(200, { [INSTANCE_HEADER]: RECORD.instance, 'content-type': 'application/json' }).end('{"status":"ok"}')
      return
    }
    response.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8' })
    stream(response)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  onCleanup(() => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }))
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`
}

/** A service whose one route relays to `owner` until `stop` fires; what relay() answered (or threw), per request. */
async function relaying (owner: string, stop = new AbortController().signal): Promise<{ base: string, outcomes: unknown[] }> {
  const keyDir = await tempDir('toolport-relay-')
  const peers = new Peers(new PeerKey(() => path.join(keyDir, PEER_KEY_FILE)))
  const outcomes: unknown[] = []
  const app = Fastify()
  installProblemHandlers(app, 65_536)
  // As the service's auth plugin decorates every request.
  app.decorateRequest('principal', { getter: () => ({ tenant: 'default', scope: () => true, allowedTools: ['*'] }) })
  app.route({
    method: ['GET', 'POST'],
    url: '/events',
    handler: async (request, reply) => {
      try {
        outcomes.push(await relay(peers, { url: owner, instance: RECORD.instance }, { path: '/output', waitMs: 30_000, lost: lostInfo({ ...RECORD, owner }), stop, stalledAfterMs: 60_000 }, request, reply))
      } catch (error) {
        outcomes.push(error)
        throw error
      }
    }
  })
  await app.listen({ port: 0, host: '127.0.0.1' })
  onCleanup(async () => { await app.close(); await peers.close() })
  return { base: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`, outcomes }
}

describe('relayed event streams', () => {
  it('drop the half event an instance that stops mid-way sent, and end with the lost process\'s end event', async () => {
    const owner = await peer((response) => {
      response.write('event: stdout\nid: 5\ndata: "tick\\n"\n\n: keep-alive\n\nevent: stdout\nid: 10\ndata: "ti')
      setTimeout(() => response.socket?.destroy(), 100)
    })
    const { base, outcomes } = await relaying(owner)
    const text = await (await fetch(`${base}/events`, { headers: { accept: 'text/event-stream' }, signal: AbortSignal.timeout(10_000) })).text()
    const lost = { ...lostInfo({ ...RECORD, owner }) }
    expect(text).toBe(`event: stdout\nid: 5\ndata: "tick\\n"\n\n: keep-alive\n\nevent: end\ndata: ${JSON.stringify(lost)}\n\n`)
    expect(outcomes).toEqual(['cut'])
  })

  it('pass a whole stream on as it came', async () => {
    const owner = await peer((response) => {
      response.write('event: stdout\nid: 5\ndata: "tic')
      setTimeout(() => response.end('k\\n"\n\nevent: end\ndata: {"state":"exited"}\n\n'), 50)
    })
    const { base, outcomes } = await relaying(owner)
    const text = await (await fetch(`${base}/events`, { headers: { accept: 'text/event-stream' }, signal: AbortSignal.timeout(10_000) })).text()
    expect(text).toBe('event: stdout\nid: 5\ndata: "tick\\n"\n\nevent: end\ndata: {"state":"exited"}\n\n')
    expect(outcomes).toEqual([true])
  })

  it('count a client that leaves as an answer, not as the instance failing', async () => {
    const owner = await peer((response) => {
      response.write('event: stdout\nid: 5\ndata: "tick\\n"\n\n')
      const timer = setInterval(() => response.write(': keep-alive\n\n'), 50)
      response.once('close', () => clearInterval(timer))
    })
    const { base, outcomes } = await relaying(owner)
    const left = new AbortController()
    const response = await fetch(`${base}/events`, { headers: { accept: 'text/event-stream' }, signal: left.signal })
    const reader = (response.body as ReadableStream<Uint8Array>).getReader()
    expect(new TextDecoder().decode((await reader.read()).value)).toContain('tick')
    left.abort()
    for (let round = 0; round < 50 && outcomes.length === 0; round++) await new Promise((resolve) => setTimeout(resolve, 20))
    expect(outcomes).toEqual([true])
  })

  it('end without an end event when this instance begins to stop, for the client to follow on elsewhere', async () => {
    const owner = await peer((response) => {
      response.write('event: stdout\nid: 5\ndata: "tick\\n"\n\n')
      const timer = setInterval(() => response.write(': keep-alive\n\n'), 50)
      response.once('close', () => clearInterval(timer))
    })
    const stopping = new AbortController()
    const { base, outcomes } = await relaying(owner, stopping.signal)
    const response = await fetch(`${base}/events`, { headers: { accept: 'text/event-stream' }, signal: AbortSignal.timeout(10_000) })
    const reader = (response.body as ReadableStream<Uint8Array>).getReader()
    let text = new TextDecoder().decode((await reader.read()).value)
    stopping.abort()
    for (let chunk = await reader.read(); !chunk.done; chunk = await reader.read()) text += new TextDecoder().decode(chunk.value)
    expect(text).toContain('tick')
    expect(text).not.toContain('event: end')
    expect(outcomes).toEqual([true])
  })
})

describe('relayed waits', () => {
  it('answer 503 Overloaded with Retry-After, to be asked again, when this instance begins to stop while the owner still waits; a POST (input, a kill) is let finish', async () => {
    let asked!: () => void
    let waiting = new Promise<void>((resolve) => { asked = resolve })
    const held: http.ServerResponse[] = []
    const server = http.createServer((request, response) => {
      if (request.url === '/healthz') response.writeHead(200, { [INSTANCE_HEADER]: RECORD.instance, 'content-type': 'application/json' }).end('{"status":"ok"}')
      else {
        // A long-poll (or an input being written): answered when the test says.
        held.push(response)
        asked()
      }
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    onCleanup(() => new Promise<void>((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }))
    const stopping = new AbortController()
    const { base, outcomes } = await relaying(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, stopping.signal)
    const wait = fetch(`${base}/events`, { signal: AbortSignal.timeout(10_000) })
    await waiting
    waiting = new Promise<void>((resolve) => { asked = resolve })
    const input = fetch(`${base}/events`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"data":"x"}', signal: AbortSignal.timeout(10_000) })
    await waiting
    stopping.abort()
    const refused = await wait
    expect(refused.status).toBe(503)
    expect(refused.headers.get('retry-after')).toBe('1')
    expect(await refused.json()).toMatchObject({ code: 'Overloaded' })
    // The input the owner has taken is answered as the owner answers it.
    held[1]?.writeHead(200, { 'content-type': 'application/json' }).end('{"id":"p_0123456789ab"}')
    const written = await input
    expect([written.status, await written.json()]).toEqual([200, { id: 'p_0123456789ab' }])
    expect(outcomes).toEqual([expect.objectContaining({ code: 'Overloaded' }), true])
  })
})
