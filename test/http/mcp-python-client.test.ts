/**
 * The official Python MCP SDK's requests, reproduced byte for byte on a raw
 * socket (the package cannot be installed here): it ends a session with
 * `DELETE /mcp`, `Content-Type: application/json` and no body. That must end
 * the session and remove its workspace, not answer 400.
 */
import net from 'node:net'
import { describe, expect, it } from 'vitest'
import { listening } from '../support/listening.ts'
import { buildTestApp } from '../helper.ts'
import { workspacesIn } from '../support/ephemeral.ts'

/** Sends `raw` on a fresh connection and answers the status line's code. */
function rawRequest (port: number, raw: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1', () => socket.write(raw))
    let answer = ''
    socket.on('data', (chunk: Buffer) => {
      answer += chunk.toString('latin1')
      const status = /^HTTP\/1\.1 (\d{3})/.exec(answer)
      if (status) {
        socket.destroy()
        resolve(Number(status[1]))
      }
    })
    socket.on('error', reject)
  })
}

/** httpx's headers, as the Python SDK's streamable HTTP transport sends them on DELETE. */
const pythonDelete = (port: number, session: string, contentLength: boolean): string => [
  'DELETE /mcp HTTP/1.1',
  `Host: 127.0.0.1:${port}`,
  'Accept: application/json, text/event-stream',
  'Accept-Encoding: gzip, deflate',
  'Connection: keep-alive',
  'User-Agent: python-httpx/0.28.1',
  `mcp-session-id: ${session}`,
  'mcp-protocol-version: 2025-06-18',
  'content-type: application/json',
  ...(contentLength ? ['Content-Length: 0'] : []),
  '',
  '',
].join('\r\n')

describe('the Python MCP SDK ending a session', () => {
  for (const contentLength of [false, true]) {
    it(`ends the session and removes its workspace (${contentLength ? 'with' : 'without'} Content-Length: 0)`, async () => {
      const app = await buildTestApp()
      const base = await listening(app)
      const port = Number(new URL(base).port)
      const headers = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' }
      const init = await fetch(`${base}/mcp`, {
        method: 'POST',
        headers,
        body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'mcp', version: '1.9.0' } } }),
      })
      const session = init.headers.get('mcp-session-id') as string
      await init.text()
      const call = await fetch(`${base}/mcp`, {
        method: 'POST',
        headers: { ...headers, 'mcp-session-id': session, 'mcp-protocol-version': '2025-06-18' },
        body: JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'write_file', arguments: { path: 'kept.txt', content: 'x' } } }),
      })
      expect(await call.text()).toContain('Successfully wrote')
      const ephemeral = app.runtime.workspaces.ephemeralRoot
      expect((await workspacesIn(ephemeral)).length).toBe(1)

      expect(await rawRequest(port, pythonDelete(port, session, contentLength))).toBe(200)
      // The workspace goes as the session closes, a moment after the answer.
      for (let i = 0; i < 100 && (await workspacesIn(ephemeral)).length > 0; i++) await new Promise((resolve) => setTimeout(resolve, 20))
      expect(await workspacesIn(ephemeral)).toEqual([])
      const after = await fetch(`${base}/mcp`, { method: 'POST', headers: { ...headers, 'mcp-session-id': session }, body: JSON.stringify({ jsonrpc: '2.0', id: 3, method: 'tools/list' }) })
      expect(after.status).toBe(404)
    })
  }
})

describe('a client on HTTP/1.0, which may send no Host', () => {
  it('opens a session: the request gets the address it was sent to as its Host (with tokens; without, a request must name a loopback host)', async () => {
    const app = await buildTestApp({ auth: { tokens: [{ token: 'old-client', tenant: 't' }] } })
    const port = Number(new URL(await listening(app)).port)
    const body = JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'old', version: '1' } } })
    const raw = [
      'POST /mcp HTTP/1.0',
      'Authorization: Bearer old-client',
      'Content-Type: application/json',
      'Accept: application/json, text/event-stream',
      `Content-Length: ${Buffer.byteLength(body)}`,
      '',
      body,
    ].join('\r\n')
    expect(await rawRequest(port, raw)).toBe(200)
  })
})
