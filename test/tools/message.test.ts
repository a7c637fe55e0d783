/**
 * message with a real webhook sink on 127.0.0.1 (an operator's endpoint is
 * trusted, loopback included): the seed's result, what the sink receives
 * (content sanitised), retries, the bounded queue, unknown channels, and the
 * tool's absence without channels.
 */
import { setTimeout as sleep } from 'node:timers/promises'
import { pino } from 'pino'
import { describe, expect, it } from 'vitest'
import { createMessageTool, MAX_QUEUED_BYTES, MAX_QUEUED_MESSAGES } from '../../src/tools/message.ts'
import { codeOf, toolContext } from '../support/context.ts'
import { buildTestApp, exec, onCleanup } from '../helper.ts'
import { expectProblem } from '../support/problem.ts'
import { startHttpServer } from '../support/servers.ts'

/** Polls until `done()` holds (or 10 s pass). */
async function eventually (done: () => boolean): Promise<void> {
  const deadline = Date.now() + 10_000
  while (!done() && Date.now() < deadline) await sleep(20)
}

describe('message', () => {
  it('answers the seed result and POSTs {channel, chat_id, content} with the content sanitised', async () => {
    const sink = await startHttpServer((_request, response) => { response.writeHead(204).end() })
    const app = await buildTestApp({ channels: { ops: { webhook: `${sink.base}/hook` } } })
    const content = 'build\u0000 ok\u0007\u001b[31m\u007f\n\tline two\r\n'
    const answer = await exec(app, 'message', { channel: 'ops', chat_id: 'C024BE91L', content })
    expect(answer.status, JSON.stringify(answer.body)).toBe(200)
    const clean = 'build ok[31m\n\tline two\r\n'
    expect(answer.body.result).toEqual({ status: 'sent', channel: 'ops', chat_id: 'C024BE91L', content_length: clean.length })
    await eventually(() => sink.requests.length > 0)
    expect(sink.requests).toHaveLength(1)
    expect(sink.requests[0]).toMatchObject({ method: 'POST', url: '/hook' })
    expect(sink.requests[0]?.headers['content-type']).toMatch(/^application\/json/)
    expect(JSON.parse(sink.requests[0]?.body ?? '')).toEqual({ channel: 'ops', chat_id: 'C024BE91L', content: clean })
  })

  it('retries a failing webhook until it takes the message', async () => {
    let calls = 0
    const sink = await startHttpServer((_request, response) => { response.writeHead(++calls <= 2 ? 500 : 200).end() })
    const app = await buildTestApp({ channels: { ops: { webhook: `${sink.base}/hook` } } })
    expect((await exec(app, 'message', { channel: 'ops', chat_id: '1', content: 'retry me' })).status).toBe(200)
    await eventually(() => sink.requests.length >= 3)
    await sleep(100)
    expect(sink.requests).toHaveLength(3)
    expect(sink.requests.map((r) => JSON.parse(r.body).content)).toEqual(['retry me', 'retry me', 'retry me'])
  })

  it('delivers queued messages in order', async () => {
    const sink = await startHttpServer((_request, response) => { response.writeHead(200).end() })
    const app = await buildTestApp({ channels: { ops: { webhook: `${sink.base}/hook` } } })
    for (let i = 0; i < 5; i++) await exec(app, 'message', { channel: 'ops', chat_id: 'c', content: `m${i}` })
    await eventually(() => sink.requests.length >= 5)
    expect(sink.requests.map((r) => JSON.parse(r.body).content)).toEqual(['m0', 'm1', 'm2', 'm3', 'm4'])
  })

  it('refuses a message when its channel\'s queue is full, by count or by bytes (503, retry later); another channel goes on', async () => {
    // A sink that never answers: the first message stays in flight and the rest wait.
    const sink = await startHttpServer(() => {})
    const healthy = await startHttpServer((_request, response) => { response.writeHead(204).end() })
    const { tool, close } = createMessageTool({ ops: { webhook: `${sink.base}/hook` }, alerts: { webhook: `${healthy.base}/hook` } }, pino({ level: 'silent' }))
    onCleanup(() => close())
    const ctx = await toolContext()
    const send = (i: number, content = `m${i}`) => tool.execute({ channel: 'ops', chat_id: 'c', content }, ctx)
    await send(0)
    await eventually(() => sink.requests.length === 1)
    for (let i = 1; i <= MAX_QUEUED_MESSAGES; i++) await send(i)
    expect(await codeOf(send(MAX_QUEUED_MESSAGES + 1))).toBe('Overloaded')
    await expect(send(MAX_QUEUED_MESSAGES + 2)).rejects.toThrow(/the ops channel's queue is full/)
    // The other channel is not held back by the one whose webhook hangs.
    await tool.execute({ channel: 'alerts', chat_id: 'c', content: 'all clear' }, ctx)
    await eventually(() => healthy.requests.length === 1)
    expect(healthy.requests.map((r) => JSON.parse(r.body).content)).toEqual(['all clear'])
    // By bytes: a few large messages fill a queue long before its count does.
    const big = 'x'.repeat(MAX_QUEUED_BYTES / 4)
    const sends = await Promise.all([1, 2, 3, 4, 5].map(async () => codeOf(tool.execute({ channel: 'alerts', chat_id: 'c', content: big }, ctx))))
    expect(sends.filter((code) => code === 'Overloaded').length).toBeGreaterThan(0)
  })

  it('takes a redirect from a webhook as a refusal: logged, never followed nor retried', async () => {
    const target = await startHttpServer((_request, response) => { response.writeHead(204).end() })
    const sink = await startHttpServer((_request, response) => { response.writeHead(307, { location: `${target.base}/elsewhere` }).end() })
    const lines: Array<Record<string, unknown>> = []
    const log = pino({ level: 'debug' }, { write: (line: string) => { lines.push(JSON.parse(line)) } })
    const { tool, close } = createMessageTool({ ops: { webhook: `${sink.base}/hook` } }, log)
    onCleanup(() => close())
    await tool.execute({ channel: 'ops', chat_id: 'c', content: 'moved?' }, await toolContext())
    await eventually(() => lines.some((line) => line['msg'] === 'webhook refused a message'))
    expect(lines.find((line) => line['msg'] === 'webhook refused a message')).toMatchObject({ channel: 'ops', status: 307 })
    expect([sink.requests.length, target.requests.length]).toEqual([1, 0])
  })

  it('logs an undelivered message\'s chat_id cut short: what a caller sends never reaches the log unbounded', async () => {
    const failing = await startHttpServer((_request, response) => { response.writeHead(500).end() })
    const lines: Array<Record<string, unknown>> = []
    const log = pino({ level: 'debug' }, { write: (line: string) => { lines.push(JSON.parse(line)) } })
    const { tool, close } = createMessageTool({ ops: { webhook: `${failing.base}/hook` } }, log)
    onCleanup(() => close())
    await tool.execute({ channel: 'ops', chat_id: 'c'.repeat(1_000_000), content: 'x' }, await toolContext())
    await eventually(() => lines.some((line) => line['msg'] === 'message not delivered after retries'))
    const chatId = String(lines.find((line) => line['msg'] === 'message not delivered after retries')?.['chat_id'])
    expect(chatId.startsWith('ccc')).toBe(true)
    expect(chatId.length).toBeLessThanOrEqual(201)
  })

  it('refuses an unknown channel as InvalidArgs naming the configured ones', async () => {
    const app = await buildTestApp({ channels: { ops: { webhook: 'http://127.0.0.1:1/a' }, alerts: { webhook: 'http://127.0.0.1:1/b' } } })
    const problem = expectProblem(await exec(app, 'message', { channel: 'telegram', chat_id: '1', content: 'x' }), 400, 'InvalidArgs', 'message')
    expect(problem['detail']).toMatch(/telegram/)
    expect(problem['detail']).toMatch(/alerts, ops/)
    // Names every object has are no channel either: never "sent" to nowhere.
    for (const channel of ['toString', '__proto__', 'constructor']) {
      expectProblem(await exec(app, 'message', { channel, chat_id: '1', content: 'x' }), 400, 'InvalidArgs', 'message')
    }
  })

  it('is absent from the catalog without channels, present with one', async () => {
    const none = await buildTestApp()
    const names = (await none.inject({ method: 'GET', url: '/v1/tools' })).json().tools.map((t: { name: string }) => t.name)
    expect(names).not.toContain('message')
    expectProblem(await exec(none, 'message', { channel: 'ops', chat_id: '1', content: 'x' }), 404, 'NotFound')
    const some = await buildTestApp({ channels: { ops: { webhook: 'http://127.0.0.1:1/a' } } })
    const listed = (await some.inject({ method: 'GET', url: '/v1/tools' })).json().tools.map((t: { name: string }) => t.name)
    expect(listed).toContain('message')
  })
})
