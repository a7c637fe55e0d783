/**
 * One upstream MCP server as a tool source: lists and wraps its tools, calls
 * them, and keeps the connection (mcp-connection.ts) alive. A server that fails
 * to start or drops its connection never takes the service down: its tools
 * stay registered but answer ExecutionFailed while the source reconnects
 * with backoff in the background.
 */
import type { Client } from '@modelcontextprotocol/sdk/client/index.js'
import type { RequestOptions } from '@modelcontextprotocol/sdk/shared/protocol.js'
import { type CallToolResult, type Tool as McpTool, PaginatedResultSchema } from '@modelcontextprotocol/sdk/types.js'
import type { Logger } from 'pino'
import type { McpServerConfig } from '../config.ts'
import { MAX_JSON_DEPTH } from '../execution/json-text.ts'
import { type AnyTool, MAX_TOOL_NAME_CHARS, type ToolContext } from '../execution/tool.ts'
import { ToolError } from '../errors.ts'
import { disconnect, isConnectionGone, McpConnector, type McpConnection } from './mcp-connection.ts'
import { runTiedTo } from './mcp-fetch.ts'
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
/**
 * Bounds of one listing, besides its time: a server whose cursors never
 * repeat would otherwise be listed for good, a core busy and every tool kept.
 * Real servers list a few hundred tools, on a few pages.
 */
const MAX_LIST_PAGES = 1000
const MAX_LISTED_TOOLS = 10_000

/** One upstream MCP server: connects, lists and wraps its tools, and keeps the connection alive. */
export class McpClientSource {
  state: McpServerState = 'connecting'
  lastError: string | undefined
  readonly #options: McpClientSourceOptions
  readonly #connectTimeoutMs: number
  readonly #connector: McpConnector
  #connection: McpConnection | undefined
  #tools: AnyTool[] = []
  #started: Promise<void> | undefined
  #attempt: { abort: AbortController, done: Promise<void> } | undefined
  #retry: NodeJS.Timeout | undefined
  #backoffMs = FIRST_BACKOFF_MS
  #failures = 0
  #listings = 0
  #published = 0
  /** A re-listing is under way (list_changed); `#refreshAgain`: another notification came meanwhile. */
  #refreshing = false
  #refreshAgain = false

  constructor (options: McpClientSourceOptions) {
    this.#options = options
    this.#connectTimeoutMs = options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS
    this.#connector = new McpConnector({ config: options.config, log: options.log, connectTimeoutMs: this.#connectTimeoutMs })
  }

  /** How many tools the server has listed (they stay while it is down). */
  get toolCount (): number {
    return this.#tools.length
  }

  /** Resolves when the first connection attempt has ended, either way. Never rejects. */
  start (): Promise<void> {
    this.#started ??= this.#connect()
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
    let connection: McpConnection | undefined
    try {
      connection = await this.#connector.open(signal, {
        onClose: (closed) => this.#lost(closed),
        onToolListChanged: (changed) => this.#refresh(changed),
      })
      // Current before the listing, so a list_changed arriving meanwhile is not lost.
      this.#connection = connection
      const listing = ++this.#listings
      const listed = await listAllTools(connection.client, { signal, timeout: this.#connectTimeoutMs })
      this.state = 'up'
      this.lastError = undefined
      this.#failures = 0
      this.#backoffMs = FIRST_BACKOFF_MS
      this.#options.log.info({ tools: listed.tools.length }, 'MCP server connected')
      this.#publish(listed, listing)
    } catch (error) {
      if (connection) {
        if (this.#connection === connection) this.#connection = undefined
        await disconnect(connection)
      }
      if (signal.aborted || this.state === 'closed') return
      this.#down(error)
    }
  }

  /**
   * list_changed: lists again; only the newest listing is published. One
   * listing at a time, and one more after it when notifications came
   * meanwhile, however many: a storm of them would otherwise hold a listing
   * (up to 10,000 tools) for each.
   */
  async #refresh (connection: McpConnection): Promise<void> {
    if (this.#refreshing) {
      this.#refreshAgain = true
      return
    }
    this.#refreshing = true
    void (async () => {
      do {
        this.#refreshAgain = false
        const listing = ++this.#listings
        try {
          const listed = await listAllTools(connection.client, { timeout: this.#connectTimeoutMs })
          if (connection === this.#connection && listing > this.#published) this.#publish(listed, listing)
        } catch (error) {
          this.#options.log.warn({ reason: shortMessage(error) }, 'could not list the tools of an MCP server again')
        }
      } while (this.#refreshAgain && connection === this.#connection)
      this.#refreshing = false
    })()
  }

  #publish ({ tools, cut }: { tools: McpTool[], cut: boolean }, listing: number): void {
    if (listing > this.#published) {
      if (cut) this.#options.log.warn({ tools: tools.length }, `the MCP server lists more than ${MAX_LIST_PAGES} pages or ${MAX_LISTED_TOOLS} tools: only the first are published`)
      this.#published = listing
      const { name, config } = this.#options
      this.#tools = wrapTools(name, tools, config.internal_only, (tool, args, ctx) => this.#call(tool, args, ctx))
      if (this.#tools.length < tools.length) {
        this.#options.log.warn({ left_out: tools.length - this.#tools.length }, `left out MCP tools whose names, with the server's prefix, are longer than ${MAX_TOOL_NAME_CHARS} characters, or that are no tools, or have names of other characters than letters, digits, "_", "." and "-", or input schemas no catalog takes (not an object schema, or nested more than ${MAX_JSON_DEPTH} levels deep)`)
      }
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
    // Over HTTP, the call's request (and the answer it is reading) stops once the call has its answer or gave up.
    const ended = new AbortController()
    try {
      // The default result schema is CallToolResultSchema; the wider type is for pre-2024-11 servers.
      return await runTiedTo(AbortSignal.any([ctx.signal, ended.signal]), (broken) =>
        connection.client.callTool({ name: tool, arguments: args }, undefined, { signal: AbortSignal.any([ctx.signal, broken]), timeout: config.timeout_ms })) as CallToolResult
    } catch (error) {
      if (!ctx.signal.aborted && isConnectionGone(error)) this.#drop(connection, error)
      throw errorOf(error, name, ctx.signal, config.timeout_ms)
    } finally {
      ended.abort()
    }
  }

  /** The transport of `connection` closed by itself (a crashed child): reconnect. */
  #lost (connection: McpConnection): void {
    if (connection !== this.#connection || this.state !== 'up') return
    this.#connection = undefined
    this.#down(new Error('the connection closed'))
  }

  /** An HTTP connection that no longer works (session gone, server unreachable): replace it. */
  #drop (connection: McpConnection, error: unknown): void {
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

/**
 * tools/list, following pagination cursors (a repeated cursor ends the
 * loop), within one deadline for all the pages: a listing that takes
 * longer has failed. Past MAX_LIST_PAGES pages or MAX_LISTED_TOOLS tools
 * (a server whose cursors never end) it stops, and `cut` says so.
 */
async function listAllTools (client: Client, options: RequestOptions & { timeout: number }): Promise<{ tools: McpTool[], cut: boolean }> {
  // One signal for the pages, stopped by the deadline or the caller's signal only while the listing lasts: the SDK
  // keeps its listener on a request's signal after the answer, and would send a cancel for every page when it fires.
  const stop = new AbortController()
  let overran = false
  const timer = setTimeout(() => { overran = true; stop.abort() }, options.timeout)
  const follow = (): void => { stop.abort(options.signal?.reason) }
  if (options.signal?.aborted === true) follow()
  else options.signal?.addEventListener('abort', follow, { once: true })
  try {
    return await listPages(client, options, stop.signal, () => overran)
  } finally {
    clearTimeout(timer)
    options.signal?.removeEventListener('abort', follow)
  }
}

async function listPages (client: Client, options: RequestOptions & { timeout: number }, signal: AbortSignal, overran: () => boolean): Promise<{ tools: McpTool[], cut: boolean }> {
  const tools: McpTool[] = []
  const seen = new Set<string>()
  let pages = 0
  let cut = false
  const overdue = (): Error => new Error(`listing the tools took longer than ${options.timeout / 1000} s (${pages + 1} pages, ${tools.length} tools so far)`)
  let cursor: string | undefined
  do {
    if (pages === MAX_LIST_PAGES) {
      cut = true
      break
    }
    // Read loosely, each tool looked at alone (wrapTools): the SDK's own listTools refuses the whole page for one malformed
    // tool. (Nor does it compile the tools' output schemas for callTool to check answers against: the catalog does not
    // publish an upstream's output schemas, and that check ran the server's patterns on the event loop.)
    const page = await client.request({ method: 'tools/list', params: cursor === undefined ? {} : { cursor } }, PaginatedResultSchema, { ...options, signal }).catch((error: unknown) => {
      throw overran() ? overdue() : error
    })
    pages++
    const listed: unknown = page['tools']
    if (!Array.isArray(listed)) throw new Error('the server\'s tools/list answer holds no list of tools')
    const room = MAX_LISTED_TOOLS - tools.length
    for (const tool of listed.slice(0, room)) tools.push(tool as McpTool)
    if (listed.length >= room && (listed.length > room || page.nextCursor !== undefined)) {
      cut = true
      break
    }
    if (cursor !== undefined) seen.add(cursor)
    cursor = page.nextCursor
  } while (cursor !== undefined && !seen.has(cursor))
  return { tools, cut }
}
