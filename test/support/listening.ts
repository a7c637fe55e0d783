/** An app listening on a real socket (a free port on 127.0.0.1), and an MCP SDK client of it. */
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import type { FastifyInstance } from 'fastify'
import { onCleanup } from './temp.ts'

/** Starts `app` listening and answers its base URL (`http://127.0.0.1:<port>`). */
export async function listening (app: FastifyInstance): Promise<string> {
  await app.listen({ host: '127.0.0.1', port: 0 })
  const address = app.server.address()
  if (address === null || typeof address === 'string') throw new Error('not listening')
  return `http://127.0.0.1:${address.port}`
}

/** An MCP SDK client connected to `<base>/mcp<query>`, closed after the test. */
export async function mcpClient (base: string, options: { token?: string, query?: string } = {}): Promise<Client> {
  const headers: Record<string, string> = options.token ? { authorization: `Bearer ${options.token}` } : {}
  const transport = new StreamableHTTPClientTransport(new URL(`${base}/mcp${options.query ?? ''}`), { requestInit: { headers } })
  const client = new Client({ name: 'toolport-test', version: '1.0.0' })
  await client.connect(transport)
  onCleanup(() => client.close())
  return client
}
