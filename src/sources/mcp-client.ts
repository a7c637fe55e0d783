/**
 * One upstream MCP server as a tool source: stdio (`command`) or Streamable
 * HTTP (`url`, falling back to the older SSE transport). A server that fails
 * to start or drops its connection never takes the service down: its tools
 * stay registered but answer ExecutionFailed while the source reconnects
 * with backoff in the background.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js'
import { getDefaultEnvironment, StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js'
import { StreamableHTTPClientTransport, StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import type { RequestOptions } from '@modelcontextprotocol/sdk/shared/protocol.js'
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js'
import { ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js'
import type { CallToolResult, Tool as McpTool } from '@modelcontextprotocol/sdk/types.js'
import type { Logger } from 'pino'
import type { McpServerConfig } from '../config.ts'
import type { AnyTool, ToolContext } from '../execution/tool.ts'
import { ToolError } from '../errors.ts'
import { VERSION } from '../version.ts'
import { clipText } from '../execution/truncate.ts'
import { errorOf, shortMessage, wrapTools } from './mcp-tools.ts'

/** `connecting` until the first attempt ends; `down` while retrying; `closed` after close(). */
export type McpServerState = 'connecting' | 'up' | 'down' | 'closed'

export interface McpClientSourceOptions {
  /** The server's key in `tools.mcp_servers`: the `{server}__` prefix of its tools. */
  name: string
  config: McpServerConfig
  log: Logger
  /** Called with the whole tool list whenever it changes, and again when the state flips between up and down. */
  onChange: (tools: AnyTool[]) => void
  /** Bound on initialize and tools/list; generous by default because `npx -y` may download the server first. */
  connectTimeoutMs?: number
}

const FIRST_BACKOFF_MS = 500
const MAX_BACKOFF_MS = 30_000
const DEFAULT_CONNECT_TIMEOUT_MS = 30_000
/** The SDK's stdio close escalates to SIGKILL after 4 s; waiting a little longer sees the child gone. */
const CLOSE_WAIT_MS = 5_000
const TERMINATE_WAIT_MS = 1_000

/** One live client and what it runs on. */
interface Connection {
  client: Client
  transport: Transport
  /** Settles when the transport has closed (for stdio: when the child has exited). */
  closed: Promise<void>
}

/** One upstream MCP server: connects, lists and wraps its tools, and keeps the connection alive. */
export class McpClientSource {
  state: McpServerState = 'connecting'
  lastError: string | undefined
  readonly #options: McpClientSourceOptions
  readonly #connectTimeoutMs: number
  #connection: Connection | undefined
  #tools: AnyTool[] = []
  #started: Promise<void> | undefined
  #attempt: { abort: AbortController, done: Promise<void> } | undefined
  #retry: NodeJS.Timeout | undefined
  #backoffMs = FIRST_BACKOFF_MS
  #failures = 0
  #listings = 0
  #published = 0
  /** Set once a server turned out to speak only the older SSE transport, so reconnects skip the probe. */
  #sseOnly = false

  constructor (options: McpClientSourceOptions) {
    this.#options = options
    this.#connectTimeoutMs = options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS
  }

  /** How many tools the server has listed (they stay while it is down). */
  get toolCount (): number {
    return this.#tools.length
  }

  /** Resolves when the first connection attempt has ended, either way. Never rejects. */
  start (): Promise<void> {
    this.#started ??= this.#begin()
    return this.#started
  }

  /** Stops reconnecting and closes the session (and the child process) for good. */
  async close (): Promise<void> {
    if (this.state === 'closed') return
    this.state = 'closed'
    clearTimeout(this.#retry)
    const attempt = this.#attempt
    attempt?.abort.abort()
    const connection = this.#connection
    this.#connection = undefined
    await Promise.allSettled([attempt?.done, connection && disconnect(connection)])
  }

  async #begin (): Promise<void> {
    const { command, url } = this.#options.config
    if (!command && !url) {
      this.state = 'down'
      this.lastError = 'no command or url'
      this.#options.log.warn('MCP server skipped: it has no command or url')
      return
    }
    await this.#connect()
  }

  #connect (): Promise<void> {
    if (this.state === 'closed') return Promise.resolve()
    const abort = new AbortController()
    const done = this.#tryConnect(abort.signal).finally(() => {
      if (this.#attempt?.abort === abort) this.#attempt = undefined
    })
    this.#attempt = { abort, done }
    return done
  }

  async #tryConnect (signal: AbortSignal): Promise<void> {
    let connection: Connection | undefined
    try {
      connection = await this.#open(signal)
      // Current before the listing, so a list_changed arriving meanwhile is not lost.
      this.#connection = connection
      const listing = ++this.#listings
      const tools = await listAllTools(connection.client, { signal, timeout: this.#connectTimeoutMs })
      this.state = 'up'
      this.lastError = undefined
      this.#failures = 0
      this.#backoffMs = FIRST_BACKOFF_MS
      this.#options.log.info({ tools: tools.length }, 'MCP server connected')
      this.#publish(tools, listing)
    } catch (error) {
      if (connection) {
        if (this.#connection === connection) this.#connection = undefined
        await disconnect(connection)
      }
      if (signal.aborted || this.state === 'closed') return
      this.#down(error)
    }
  }

  /** Connects over the configured transport: stdio, or Streamable HTTP with an SSE fallback. */
  async #open (signal: AbortSignal): Promise<Connection> {
    const { command, url = '' } = this.#options.config
    if (command) return this.#attach(this.#stdio(command), signal)
    const endpoint = new URL(url)
    if (this.#sseOnly) return this.#attach(new SSEClientTransport(endpoint), signal)
    try {
      return await this.#attach(new StreamableHTTPClientTransport(endpoint), signal)
    } catch (error) {
      // Servers from before Streamable HTTP refuse the initialize POST with a 4xx (404, 405).
      const status = error instanceof StreamableHTTPError ? error.code ?? 0 : 0
      const refused = status >= 400 && status < 500
      if (!refused || signal.aborted) throw error
      this.#options.log.debug({ status }, 'Streamable HTTP refused; trying the older SSE transport')
      try {
        const connection = await this.#attach(new SSEClientTransport(endpoint), signal)
        this.#sseOnly = true
        return connection
      } catch (sseError) {
        throw new Error(`${shortMessage(error)}; SSE fallback: ${shortMessage(sseError)}`)
      }
    }
  }

  #stdio (command: string): StdioClientTransport {
    const transport = new StdioClientTransport({
      command,
      args: this.#options.config.args,
      // The SDK's safe subset (PATH, HOME, …), never the service's environment: it holds secrets.
      env: { ...getDefaultEnvironment(), ...this.#options.config.env },
      stderr: 'pipe',
    })
    transport.stderr?.on('data', (chunk: Buffer) => {
      this.#options.log.debug({ stderr: clipText(chunk.toString('utf8').trimEnd(), 2000) }, 'MCP server stderr')
    })
    return transport
  }

  async #attach (transport: Transport, signal: AbortSignal): Promise<Connection> {
    const client = new Client({ name: 'toolport', version: VERSION }, { capabilities: {} })
    const closed = Promise.withResolvers<void>()
    const connection: Connection = { client, transport, closed: closed.promise }
    client.onclose = () => {
      closed.resolve()
      this.#lost(connection)
    }
    client.onerror = (error) => this.#options.log.debug({ reason: shortMessage(error) }, 'MCP transport error')
    client.setNotificationHandler(ToolListChangedNotificationSchema, () => this.#refresh(connection))
    try {
      await client.connect(transport, { signal, timeout: this.#connectTimeoutMs })
    } catch (error) {
      await disconnect(connection)
      throw error
    }
    return connection
  }

  /** list_changed: lists again; only the newest listing is published. */
  async #refresh (connection: Connection): Promise<void> {
    const listing = ++this.#listings
    try {
      const tools = await listAllTools(connection.client, { timeout: this.#connectTimeoutMs })
      if (connection === this.#connection && listing > this.#published) this.#publish(tools, listing)
    } catch (error) {
      this.#options.log.warn({ reason: shortMessage(error) }, 'could not list the tools of an MCP server again')
    }
  }

  #publish (tools: McpTool[], listing: number): void {
    if (listing > this.#published) {
      this.#published = listing
      const { name, config } = this.#options
      this.#tools = wrapTools(name, tools, config.internal_only, (tool, args, ctx) => this.#call(tool, args, ctx))
    }
    this.#notify()
  }

  #notify (): void {
    try {
      this.#options.onChange(this.#tools)
    } catch (error) {
      this.#options.log.error({ err: error }, 'the MCP tool list could not be registered')
    }
  }

  async #call (tool: string, args: Record<string, unknown>, ctx: ToolContext): Promise<CallToolResult> {
    const { name, config } = this.#options
    const connection = this.#connection
    if (!connection || this.state !== 'up') throw new ToolError('ExecutionFailed', `MCP server ${name} is not connected`)
    try {
      // The default result schema is CallToolResultSchema; the wider type is for pre-2024-11 servers.
      return await connection.client.callTool({ name: tool, arguments: args }, undefined, { signal: ctx.signal, timeout: config.timeout_ms }) as CallToolResult
    } catch (error) {
      if (!ctx.signal.aborted && isConnectionGone(error)) this.#drop(connection, error)
      throw errorOf(error, name, ctx.signal, config.timeout_ms)
    }
  }

  /** The transport of `connection` closed by itself (a crashed child): reconnect. */
  #lost (connection: Connection): void {
    if (connection !== this.#connection || this.state !== 'up') return
    this.#connection = undefined
    this.#down(new Error('the connection closed'))
  }

  /** An HTTP connection that no longer works (session gone, server unreachable): replace it. */
  #drop (connection: Connection, error: unknown): void {
    if (connection !== this.#connection || this.state !== 'up') return
    this.#connection = undefined
    void disconnect(connection)
    this.#down(error)
  }

  #down (error: unknown): void {
    const wasUp = this.state === 'up'
    this.state = 'down'
    this.lastError = shortMessage(error)
    this.#failures++
    const delay = this.#backoffMs
    this.#backoffMs = Math.min(delay * 2, MAX_BACKOFF_MS)
    const details = { reason: this.lastError, retry_in_ms: delay }
    // The first failure is news; its repeats (a ghost server retried every 30 s) are noise.
    if (this.#failures === 1) this.#options.log.warn(details, wasUp ? 'MCP server connection lost; reconnecting' : 'MCP server unavailable; retrying in the background')
    else this.#options.log.debug(details, 'MCP server still unavailable')
    this.#retry = setTimeout(() => {
      this.#retry = undefined
      void this.#connect()
    }, delay)
    this.#retry.unref()
    if (wasUp) this.#notify()
  }
}

/** tools/list, following pagination cursors (a repeated cursor ends the loop). */
async function listAllTools (client: Client, options: RequestOptions): Promise<McpTool[]> {
  const tools: McpTool[] = []
  const seen = new Set<string>()
  let cursor: string | undefined
  do {
    const page = await client.listTools(cursor === undefined ? {} : { cursor }, options)
    tools.push(...page.tools)
    if (cursor !== undefined) seen.add(cursor)
    cursor = page.nextCursor
  } while (cursor !== undefined && !seen.has(cursor))
  return tools
}

/**
 * Closes a connection and waits (bounded) for its transport to be gone. A
 * session of a stateful HTTP server is ended politely first (DELETE).
 */
async function disconnect ({ client, transport, closed }: Connection): Promise<void> {
  if (transport instanceof StreamableHTTPClientTransport) await within(transport.terminateSession(), TERMINATE_WAIT_MS).catch(() => {})
  await client.close().catch(() => {})
  await within(closed, CLOSE_WAIT_MS)
}

/** Whether a failed request means the HTTP connection is unusable: 404 = session gone (the spec says start a new one), or the network failed. */
function isConnectionGone (error: unknown): boolean {
  if (error instanceof StreamableHTTPError) return error.code === 404
  return error instanceof TypeError && error.message === 'fetch failed'
}

/** `promise`, or undefined after `ms`. */
async function within<T> (promise: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<undefined>((resolve) => { timer = setTimeout(() => resolve(undefined), ms) })
  try {
    return await Promise.race([promise, timeout])
  } finally {
    clearTimeout(timer)
  }
}
