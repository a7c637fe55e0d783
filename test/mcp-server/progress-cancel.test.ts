/**
 * MCP progress and cancellation on /mcp, with the SDK's own client over a
 * real socket: a long call that asked for progress gets notifications whose
 * progress grows (so a client that resets its timeout on progress waits for
 * it), and a cancelled call's process is killed and the call answers nothing.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import type { Progress } from '@modelcontextprotocol/sdk/types.js'
import { describe, expect, it } from 'vitest'
import { buildTestApp } from '../helper.ts'
import { eventually } from '../sources/helpers.ts'
import { listening, mcpClient } from '../support/listening.ts'
import { alive, processesWith, uniqueSleepSeconds } from '../support/processes.ts'

type App = Awaited<ReturnType<typeof buildTestApp>>

async function connect (app: App): Promise<Client> {
  return mcpClient(await listening(app))
}

const textOf = (result: Awaited<ReturnType<Client['callTool']>>): string => (result.content as Array<{ text?: string }>).map((c) => c.text ?? '').join('')

describe('/mcp progress and cancellation', () => {
  it('sends growing progress for a long call that asked for it, so a timeout reset on progress does not end it', { timeout: 30_000 }, async () => {
    const client = await connect(await buildTestApp())
    const progress: Progress[] = []
    // The client's timeout is far below the call's length: only progress keeps the call alive.
    const result = await client.callTool({ name: 'exec_shell', arguments: { command: 'sleep 7; echo done' } }, undefined, {
      onprogress: (update) => { progress.push(update) },
      timeout: 5000,
      resetTimeoutOnProgress: true,
    })
    expect(result.isError).toBeFalsy()
    expect(textOf(result)).toContain('done')
    expect(progress.length).toBeGreaterThanOrEqual(2)
    for (let i = 1; i < progress.length; i++) expect(progress[i]!.progress).toBeGreaterThan(progress[i - 1]!.progress)
    expect(progress[0]?.message).toMatch(/^running for \d+ s$/)
  })

  it('sends no progress to a call that did not ask for it', { timeout: 30_000 }, async () => {
    const client = await connect(await buildTestApp())
    const notifications: unknown[] = []
    client.fallbackNotificationHandler = async (notification) => { notifications.push(notification) }
    const result = await client.callTool({ name: 'exec_shell', arguments: { command: 'sleep 3' } })
    expect(result.isError).toBeFalsy()
    expect(notifications).toEqual([])
  })

  it('a cancelled call has its process killed within 2 s, answers nothing and ends its POST\'s stream', { timeout: 30_000 }, async () => {
    const app = await buildTestApp()
    const client = await connect(app)
    const idle = app.runtime.activeRequests
    const errors: Error[] = []
    client.onerror = (error) => { errors.push(error) }
    const cancel = new AbortController()
    const running = client.callTool({ name: 'exec_shell', arguments: { command: 'sleep 60 & echo $! > pid.txt; wait' } }, undefined, { signal: cancel.signal, onprogress: () => {} })
    const settled = running.then(() => 'answered', (error: unknown) => error)
    // The session's workspace is shared by its calls: the pid is read through read_file.
    let pid = 0
    const readPid = async (): Promise<boolean> => {
      const read = await client.callTool({ name: 'read_file', arguments: { path: 'pid.txt' } })
      pid = read.isError ? 0 : Number.parseInt((read.structuredContent as { content: string }).content, 10)
      return pid > 0
    }
    expect(await eventually(readPid, 10_000)).toBe(true)
    expect(await alive(pid)).toBe(true)
    // Half a second into the call, as a user pressing stop would.
    await new Promise((resolve) => setTimeout(resolve, 500))
    cancel.abort('stop')
    expect(await eventually(async () => !(await alive(pid)), 2000)).toBe(true)
    const outcome = await settled
    expect(outcome).not.toBe('answered')
    // The stream that waited for its answer is closed: nothing holds a shutdown's drain.
    expect(await eventually(() => app.runtime.activeRequests === idle, 2000)).toBe(true)
    // The session goes on; a response for the cancelled request would have been reported as unknown.
    expect((await client.callTool({ name: 'exec_shell', arguments: { command: 'echo after' } })).isError).toBeFalsy()
    expect(errors).toEqual([])
  })

  it('ends a batch\'s stream once its other calls have answered, when one of them was cancelled (protocol 2025-03-26)', { timeout: 30_000 }, async () => {
    const app = await buildTestApp()
    const mcp = `${await listening(app)}/mcp`
    const idle = app.runtime.activeRequests
    const headers: Record<string, string> = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' }
    const send = async (body: unknown) => fetch(mcp, { method: 'POST', headers, body: JSON.stringify(body) })
    const init = await send({ jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: '2025-03-26', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } })
    Object.assign(headers, { 'mcp-session-id': init.headers.get('mcp-session-id') ?? '', 'mcp-protocol-version': '2025-03-26' })
    await init.text()
    await (await send({ jsonrpc: '2.0', method: 'notifications/initialized' })).text()
    // A sleep no other process has: the cancel is sent once call 1's process runs, not after a guessed delay.
    const mark = uniqueSleepSeconds()
    const stream = send([
      { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'exec_shell', arguments: { command: `sleep ${mark}` } } },
      { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'exec_shell', arguments: { command: 'sleep 1; echo two' } } },
    ]).then(async (response) => response.text())
    expect(await eventually(() => processesWith(mark).length > 0, 10_000)).toBe(true)
    await (await send({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 1 } })).text()
    const events = await stream
    // The other call's answer came, the cancelled one's did not, and the stream ended.
    expect(events).toContain('two')
    expect(events).not.toMatch(/"id":1[,}]/)
    expect(await eventually(() => app.runtime.activeRequests === idle, 2000)).toBe(true)
    // A cancel in the very batch of its call, which the SDK reads before the call begins.
    const both = await (await send([
      { jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: 'exec_shell', arguments: { command: 'sleep 30' } } },
      { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 3 } },
    ])).text()
    expect(both).not.toMatch(/"id":3[,}]/)
    expect(await eventually(() => app.runtime.activeRequests === idle, 2000)).toBe(true)
  })
})
