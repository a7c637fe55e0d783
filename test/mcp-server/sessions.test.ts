/**
 * The MCP sessions' bookkeeping, with the SDK's own client over a real
 * socket: a session that ends answers the calls it still had under way,
 * and leaves nothing behind on the token that opened it.
 */
import http from 'node:http'
import { getEventListeners } from 'node:events'
import { setFlagsFromString } from 'node:v8'
import { runInNewContext } from 'node:vm'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import { pino } from 'pino'
import { describe, expect, it } from 'vitest'
import { globMatcher } from '../../src/execution/globs.ts'
import type { Principal } from '../../src/execution/principal.ts'
import { McpSessions } from '../../src/mcp-server/sessions.ts'
import { buildTestApp } from '../helper.ts'
import { McpError } from '@modelcontextprotocol/sdk/types.js'
import { listening } from '../support/listening.ts'
import { eventually } from '../sources/helpers.ts'
import { processesWith, uniqueSleepSeconds } from '../support/processes.ts'
import { onCleanup } from '../support/temp.ts'

/** A full garbage collection (what turns a weakly held listener removal into none). */
function collectGarbage (): void {
  setFlagsFromString('--expose-gc')
  ;(runInNewContext('gc') as () => void)()
}

/** An HTTP server handing every /mcp request of `principal` to `sessions`, as the /mcp route does. */
async function serve (sessions: McpSessions, principal: Principal): Promise<string> {
  const server = http.createServer((request, response) => {
    let text = ''
    request.on('data', (chunk: Buffer) => { text += chunk.toString() })
    request.on('end', () => {
      void (async () => {
        const id = request.headers['mcp-session-id']
        const transport = typeof id === 'string' ? sessions.find(id, principal)?.transport : await sessions.open(principal)
        if (transport === undefined) {
          response.writeHead(404).end()
          return
        }
        await transport.handleRequest(request, response, text === '' ? undefined : JSON.parse(text))
      })()
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  onCleanup(() => new Promise<void>((resolve) => server.close(() => resolve())))
  return `http://127.0.0.1:${(server.address() as { port: number }).port}/mcp`
}

describe('MCP sessions', () => {
  it('leave no listener on their token\'s revocation once ended, however many the token opened', async () => {
    const app = await buildTestApp({})
    const sessions = new McpSessions(app.runtime, pino({ level: 'silent' }))
    onCleanup(() => sessions.closeAll())
    const revocation = new AbortController()
    const principal: Principal = { tenant: 't', scope: globMatcher(['*']), allowedTools: ['*'], revoked: revocation.signal }
    const url = await serve(sessions, principal)
    const clients: Array<{ client: Client, transport: StreamableHTTPClientTransport }> = []
    for (let i = 0; i < 20; i++) {
      const transport = new StreamableHTTPClientTransport(new URL(url))
      const client = new Client({ name: 'sessions-test', version: '1.0.0' })
      await client.connect(transport)
      clients.push({ client, transport })
    }
    expect(getEventListeners(revocation.signal, 'abort')).toHaveLength(20)
    // Before the sessions end: what removes each session's listener must not be collected meanwhile.
    collectGarbage()
    for (const { client, transport } of clients) {
      await transport.terminateSession()
      await client.close()
    }
    expect(getEventListeners(revocation.signal, 'abort')).toHaveLength(0)
  })

  it('answer the calls still under way when they end, by DELETE or past the session limit, rather than leave their clients waiting', async () => {
    const app = await buildTestApp({ server: { max_mcp_sessions: 1 } })
    const url = new URL(`${await listening(app)}/mcp`)
    const open = async () => {
      const transport = new StreamableHTTPClientTransport(url)
      const client = new Client({ name: 'sessions-test', version: '1.0.0' })
      await client.connect(transport)
      onCleanup(() => client.close())
      return { client, transport }
    }
    // The client's own timeout (10 s) is what a call left unanswered would end with: not the session's answer.
    // Each call's sleep is one no other process has: the session ends once that call's process runs, not after a guessed delay.
    const longCall = (client: Client, mark: string) => client.callTool({ name: 'exec_shell', arguments: { command: `sleep ${mark}` } }, undefined, { timeout: 10_000 }).then(
      () => 'answered',
      (error: unknown) => error instanceof McpError ? `${error.code} ${error.message}` : String(error)
    )
    const ended = `${-32000} MCP error -32000: the MCP session ended before this call was answered; the call was stopped`
    const deleted = await open()
    const mark = uniqueSleepSeconds()
    const call = longCall(deleted.client, mark)
    expect(await eventually(() => processesWith(mark).length > 0, 5000)).toBe(true)
    await deleted.transport.terminateSession()
    expect(await call).toBe(ended)
    // The tenant's next session ends the oldest (max_mcp_sessions 1).
    const evicted = await open()
    const evictedMark = uniqueSleepSeconds()
    const evictedCall = longCall(evicted.client, evictedMark)
    expect(await eventually(() => processesWith(evictedMark).length > 0, 5000)).toBe(true)
    await open()
    expect(await evictedCall).toBe(ended)
  })
})
