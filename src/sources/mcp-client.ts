/**
 * One upstream MCP server as a tool source: stdio (`command`) or Streamable
 * HTTP (`url`, falling back to SSE for older servers). A server that fails to
 * start or drops its connection never takes the service down: its tools stay
 * listed but answer ExecutionFailed while it reconnects with backoff.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js'
import { getDefaultEnvironment, StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js'
import { StreamableHTTPClientTransport, StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js'
import { ToolListChangedNotificationSchema, type Tool as McpTool } from '@modelcontextprotocol/sdk/types.js'
import type { Logger } from 'pino'
import type { McpServerConfig } from '../config.ts'
import type { AnyTool, ToolContext } from '../core/tool.ts'
import { ToolError } from '../errors.ts'
import { VERSION } from '../version.ts'
import { errorOf, wrapTools } from './mcp-tools.ts'

export type McpServerState = 'connecting' | 'up' | 'down' | 'closed'

const FIRST_BACKOFF_MS = 500
const MAX_BACKOFF_MS = 30_000

export interface McpClientSourceOptions {
  name: string
  config: McpServerConfig
  log: Logger
  onChange: (tools: AnyTool[]) => void
  connectTimeoutMs?: number
}

export class McpClientSource {
  state: McpServerState = 'connecting'
  lastError: string | undefined
  readonly #options: McpClientSourceOptions
  #client: Client | undefined
  #tools: AnyTool[] = []
  #backoffMs = FIRST_BACKOFF_MS
  #retry: NodeJS.Timeout | undefined
  #failures = 0

  constructor (options: McpClientSourceOptions) {
    this.#options = options
  }

  get toolCount (): number {
    return this.#tools.length
  }

  /** The first connection attempt; resolves either way, never throws. */
  async start (): Promise<void> {
    const { command, url } = this.#options.config
    if (!command && !url) {
      this.state = 'down'
      this.lastError = 'no command or url'
      this.#options.log.warn('MCP server skipped: it has no command or url')
      return
    }
    await this.#connect()
  }

  async close (): Promise<void> {
    this.state = 'closed'
    clearTimeout(this.#retry)
    const client = this.#client
    this.#client = undefined
    await client?.close().catch(() => {})
  }

  async #connect (): Promise<void> {
    if (this.state === 'closed') return
    let client: Client | undefined
    try {
      client = await this.#open()
      // close() may have run while we were connecting.
      if ((this.state as McpServerState) === 'closed') {
        await client.close().catch(() => {})
        return
      }
      this.#client = client
      await this.#refresh(client)
      this.state = 'up'
      this.lastError = undefined
      this.#backoffMs = FIRST_BACKOFF_MS
      this.#failures = 0
      this.#options.log.info({ tools: this.#tools.length }, 'MCP server connected')
    } catch (error) {
      if (client && this.#client === client) this.#client = undefined
      await client?.close().catch(() => {})
      this.#fail(error)
    }
  }

  /** Connects a client over the configured transport (Streamable HTTP, then SSE). */
  async #open (): Promise<Client> {
    const { command, url } = this.#options.config
    if (command) return this.#attach(this.#stdio(command))
    try {
      return await this.#attach(new StreamableHTTPClientTransport(new URL(url as string)))
    } catch (error) {
      const status = error instanceof StreamableHTTPError ? error.code : undefined
      if (status === undefined || status < 400 || status >= 500) throw error
      this.#options.log.debug({ status }, 'Streamable HTTP refused; trying the older SSE transport')
      return this.#attach(new SSEClientTransport(new URL(url as string)))
    }
  }

  #stdio (command: string): Transport {
    const transport = new StdioClientTransport({
      command,
      args: this.#options.config.args,
      // The SDK's safe subset of variables, never the service's whole environment (it holds secrets).
      env: { ...getDefaultEnvironment(), ...this.#options.config.env },
      stderr: 'pipe',
    })
    transport.stderr?.on('data', (chunk: Buffer) => this.#options.log.debug({ stderr: chunk.toString().slice(0, 2000) }, 'MCP server stderr'))
    return transport
  }

  async #attach (transport: Transport): Promise<Client> {
    const client = new Client({ name: 'toolport', version: VERSION }, { capabilities: {} })
    client.setNotificationHandler(ToolListChangedNotificationSchema, async () => {
      await this.#refresh(client).catch((error: unknown) => this.#options.log.warn({ err: error }, 'could not refresh the tools of an MCP server'))
    })
    client.onclose = () => this.#lost(client)
    const timeout = this.#options.connectTimeoutMs ?? 10_000
    await client.connect(transport, { timeout })
    return client
  }

  async #refresh (client: Client): Promise<void> {
    const listed: McpTool[] = []
    let cursor: string | undefined
    do {
      const page = await client.listTools(cursor === undefined ? {} : { cursor })
      listed.push(...page.tools)
      cursor = page.nextCursor
    } while (cursor !== undefined)
    if (client !== this.#client) return
    this.#tools = wrapTools(this.#options.name, listed, this.#options.config.internal_only, (name, args, ctx) => this.#call(name, args, ctx))
    this.#options.onChange(this.#tools)
  }

  async #call (name: string, args: Record<string, unknown>, ctx: ToolContext) {
    const client = this.#client
    if (!client || this.state !== 'up') throw new ToolError('ExecutionFailed', `MCP server ${this.#options.name} is not connected`)
    try {
      return await client.callTool({ name, arguments: args }, undefined, { signal: ctx.signal, timeout: this.#options.config.timeout_ms }) as Awaited<ReturnType<Client['callTool']>> & { content: [] }
    } catch (error) {
      throw errorOf(error, this.#options.name, ctx.signal)
    }
  }

  /** The connection of `client` closed: unless we are closing, reconnect. */
  #lost (client: Client): void {
    if (client !== this.#client || this.state === 'closed') return
    this.#client = undefined
    this.#fail(new Error('the connection closed'))
  }

  #fail (error: unknown): void {
    if (this.state === 'closed') return
    this.state = 'down'
    this.lastError = error instanceof Error ? error.message.split('\n')[0] : String(error)
    this.#failures++
    const details = { reason: this.lastError, retry_in_ms: this.#backoffMs }
    // The first failure is news; repeats of it are noise.
    if (this.#failures === 1) this.#options.log.warn(details, 'MCP server unavailable; reconnecting in the background')
    else this.#options.log.debug(details, 'MCP server still unavailable')
    this.#options.onChange(this.#tools)
    this.#retry = setTimeout(() => { void this.#connect() }, this.#backoffMs)
    this.#retry.unref()
    this.#backoffMs = Math.min(this.#backoffMs * 2, MAX_BACKOFF_MS)
  }
}
