/**
 * The connection to one upstream MCP server: the transport its config asks
 * for (stdio for `command`; Streamable HTTP for `url`, falling back to the
 * older SSE transport), an initialized client on it, and a bounded close.
 * What to do when a connection ends is the source's business (mcp-client.ts).
 */
import { EventEmitter } from 'node:events'
import { accessSync, constants } from 'node:fs'
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js'
import { getDefaultEnvironment, StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js'
import { setTimeout as sleep } from 'node:timers/promises'
import { type FoundProcess, foundDescendantsOf, foundInGroup, foundProcess, signalFound } from '../sandbox/process-tree.ts'
import { StreamableHTTPClientTransport, StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js'
import { StringDecoder } from 'node:string_decoder'
import { ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js'
import type { Logger } from 'pino'
import type { McpServerConfig } from '../config.ts'
import { clipText } from '../execution/truncate.ts'
import { VERSION } from '../version.ts'
import { boundedFetch } from './mcp-fetch.ts'
import { shortMessage } from './mcp-tools.ts'

/** The SDK's stdio close escalates to SIGKILL after 4 s; then its process group has a second to go. */
const CLOSE_WAIT_MS = 6_000
const TERMINATE_WAIT_MS = 1_000
const GROUP_GRACE_MS = 1_000

/** util-linux's setsid: a stdio server started through it leads a process group of its own (same pid, as it is no leader yet). */
const SETSID = ['/usr/bin/setsid', '/bin/setsid'].find((candidate) => {
  try {
    accessSync(candidate, constants.X_OK)
    return true
  } catch {
    return false
  }
})

/** The SDK's stdio transport, remembering the server it started (its pid is gone with its process). */
class StdioServerTransport extends StdioClientTransport {
  server: FoundProcess | undefined
  /** The end of what the server wrote to stderr; a line may come in several chunks. */
  stderrTail = ''
  #groupEnded: Promise<void> | undefined

  override async start (): Promise<void> {
    await super.start()
    if (this.pid === null) return
    this.server = foundProcess(this.pid)
    // The SDK hears of the server's end only once its pipes close, which a child that inherited them keeps
    // open (a shell's `&`, Python's subprocess): the server's exit ends its group at once, and so closes them.
    const child: unknown = Reflect.get(this, '_process')
    if (child instanceof EventEmitter) child.once('exit', () => { void this.endGroup() })
  }

  /** Ends what the server left in its process group, once (at its exit, else when its transport closes). */
  endGroup (): Promise<void> {
    this.#groupEnded ??= this.server === undefined ? Promise.resolve() : endGroup(this.server.pid)
    return this.#groupEnded
  }
}

/** One live client and what it runs on. */
export interface McpConnection {
  client: Client
  transport: Transport
  /** Settles when the transport has closed (for stdio: when the child has exited, and what it left in its group has been ended). */
  closed: Promise<void>
}

/** What the source hears from a connection once it is open. */
export interface McpConnectionEvents {
  /** The transport closed (by itself, or by `disconnect`). */
  onClose: (connection: McpConnection) => void
  /** The server says its tool list changed. */
  onToolListChanged: (connection: McpConnection) => Promise<void>
}

export interface McpConnectorOptions {
  config: McpServerConfig
  log: Logger
  /** Bound on initialize. */
  connectTimeoutMs: number
}

/** Opens connections to one server; remembers across reconnects whether it speaks only SSE. */
export class McpConnector {
  readonly #options: McpConnectorOptions
  /** Set once a server turned out to speak only the older SSE transport, so reconnects skip the probe. */
  #sseOnly = false

  constructor (options: McpConnectorOptions) {
    this.#options = options
  }

  /** Connects over the configured transport: stdio, or Streamable HTTP with an SSE fallback. */
  async open (signal: AbortSignal, events: McpConnectionEvents): Promise<McpConnection> {
    const { command, url = '' } = this.#options.config
    if (command) {
      const transport = this.#stdio(command)
      try {
        return await this.#attach(transport, signal, events)
      } catch (error) {
        const said = lastLine(transport.stderrTail)
        throw said === '' ? error : new Error(`${shortMessage(error)} (its stderr: ${said})`)
      }
    }
    const endpoint = new URL(url)
    if (this.#sseOnly) return this.#attach(new SSEClientTransport(endpoint, { fetch: boundedFetch }), signal, events)
    try {
      return await this.#attach(new StreamableHTTPClientTransport(endpoint, { fetch: boundedFetch }), signal, events)
    } catch (error) {
      // Servers from before Streamable HTTP refuse the initialize POST with a 4xx (404, 405).
      const status = error instanceof StreamableHTTPError ? error.code ?? 0 : 0
      const refused = status >= 400 && status < 500
      if (!refused || signal.aborted) throw error
      this.#options.log.debug({ status }, 'Streamable HTTP refused; trying the older SSE transport')
      try {
        const connection = await this.#attach(new SSEClientTransport(endpoint, { fetch: boundedFetch }), signal, events)
        this.#sseOnly = true
        return connection
      } catch (sseError) {
        throw new Error(`${shortMessage(error)}; SSE fallback: ${shortMessage(sseError)}`)
      }
    }
  }

  #stdio (command: string): StdioServerTransport {
    const args = this.#options.config.args ?? []
    const transport = new StdioServerTransport({
      command: SETSID ?? command,
      args: SETSID ? [command, ...args] : args,
      // The SDK's safe subset (PATH, HOME, …), never the service's environment: it holds secrets.
      env: { ...getDefaultEnvironment(), ...this.#options.config.env },
      stderr: 'pipe',
    })
    // Decoded as a stream: a character split between two chunks stays one.
    const decoder = new StringDecoder('utf8')
    transport.stderr?.on('data', (chunk: Buffer) => {
      const text = decoder.write(chunk)
      this.#options.log.debug({ stderr: clipText(text.trimEnd(), 2000) }, 'MCP server stderr')
      transport.stderrTail = (transport.stderrTail + text).slice(-2000)
    })
    return transport
  }

  async #attach (transport: Transport, signal: AbortSignal, events: McpConnectionEvents): Promise<McpConnection> {
    const client = new Client({ name: 'toolport', version: VERSION }, { capabilities: {} })
    const closed = Promise.withResolvers<void>()
    const connection: McpConnection = { client, transport, closed: closed.promise }
    client.onclose = () => {
      // A server that exited (crashed, or was closed) leaves what it started in its group, orphaned: ended here.
      void (transport instanceof StdioServerTransport ? transport.endGroup() : Promise.resolve()).then(() => closed.resolve())
      events.onClose(connection)
    }
    client.onerror = (error) => this.#options.log.debug({ reason: shortMessage(error) }, 'MCP transport error')
    client.setNotificationHandler(ToolListChangedNotificationSchema, () => events.onToolListChanged(connection))
    try {
      await client.connect(transport, { signal, timeout: this.#options.connectTimeoutMs })
    } catch (error) {
      await disconnect(connection)
      throw error
    }
    return connection
  }
}

/**
 * Closes a connection and waits (bounded) for its transport to be gone. A
 * session of a stateful HTTP server is ended politely first (DELETE).
 */
export async function disconnect ({ client, transport, closed }: McpConnection): Promise<void> {
  if (transport instanceof StreamableHTTPClientTransport) await within(transport.terminateSession(), TERMINATE_WAIT_MS).catch(() => {})
  // The SDK ends a stdio server's own process only: what it started (a helper, a shell's command)
  // would outlive it, out of reach once its parent is gone. They are found now (while the server
  // is the process that was started), asked to stop with it, and killed if still there once it has gone.
  const server = transport instanceof StdioServerTransport ? transport.server : undefined
  const helpers = server === undefined ? [] : foundDescendantsOf(server)
  signalFound(helpers, 'SIGTERM')
  await client.close().catch(() => {})
  await within(closed, CLOSE_WAIT_MS)
  signalFound(helpers, 'SIGKILL')
}

/** Asks every process left in the group `pgid` to stop, and kills those still there a second later. */
async function endGroup (pgid: number): Promise<void> {
  const members = foundInGroup(pgid)
  if (members.length === 0) return
  signalFound(members, 'SIGTERM')
  await sleep(GROUP_GRACE_MS)
  signalFound(members, 'SIGKILL')
}

/** Whether a failed request means the HTTP connection is unusable: 404 = session gone (the spec says start a new one), or the network failed. */
export function isConnectionGone (error: unknown): boolean {
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

/** The last line with something on it: why a server would not start, as a rule (setsid's own complaint included). */
function lastLine (text: string): string {
  const lines = text.split('\n').map((line) => line.trim()).filter((line) => line !== '')
  // Well-formed: the tail kept of a long line may begin with the second half of a character.
  return clipText((lines.at(-1) ?? '').toWellFormed(), 300)
}
