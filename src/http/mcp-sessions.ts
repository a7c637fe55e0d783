/**
 * Toolport as an MCP server: each MCP session is an SDK server over a
 * Streamable HTTP transport, bound to the principal that opened it and to
 * one workspace that all its calls share and that goes when the session
 * ends (DELETE, idle expiry, shutdown).
 */
import { randomUUID } from 'node:crypto'
import { Server } from '@modelcontextprotocol/sdk/server/index.js'
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js'
import { CallToolRequestSchema, ListToolsRequestSchema } from '@modelcontextprotocol/sdk/types.js'
import type { Logger } from 'pino'
import { execute } from '../core/execute.ts'
import type { NameMatcher } from '../core/globs.ts'
import type { Runtime } from '../core/runtime.ts'
import { WorkspaceScope } from '../core/workspace-scope.ts'
import { catalogEntry } from '../formats/catalog.ts'
import { toCallToolResult } from '../formats/mcp-result.ts'
import { VERSION } from '../version.ts'
import type { Principal } from './auth.ts'
import { requestIdOf } from './request-id.ts'

export interface McpSession {
  id: string
  principal: Principal
  transport: StreamableHTTPServerTransport
  lastActive: number
}

export class McpSessions {
  readonly #runtime: Runtime
  readonly #log: Logger
  readonly #sessions = new Map<string, McpSession>()
  readonly #idleMs: number
  readonly #sweeper: NodeJS.Timeout

  constructor (runtime: Runtime, log: Logger) {
    this.#runtime = runtime
    this.#log = log
    this.#idleMs = runtime.config.workspaces.ttl_seconds * 1000
    this.#sweeper = setInterval(() => { void this.#closeIdle() }, Math.min(this.#idleMs, 60_000))
    this.#sweeper.unref()
  }

  get size (): number {
    return this.#sessions.size
  }

  /** The live session with this id, if it belongs to the same principal. */
  find (id: string, principal: Principal): McpSession | undefined {
    const session = this.#sessions.get(id)
    if (!session || session.principal.tenant !== principal.tenant || session.principal.allowedTools !== principal.allowedTools) return undefined
    session.lastActive = Date.now()
    return session
  }

  /**
   * A new session (its id is assigned when the initialize request is
   * handled); `allowed` filters its catalog as REST's `allowed` does.
   */
  async open (principal: Principal, allowed?: NameMatcher): Promise<StreamableHTTPServerTransport> {
    const workspace = new WorkspaceScope(this.#runtime.workspaces, principal.tenant)
    const server = this.#server(principal, workspace, allowed)
    const transport: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => {
        this.#sessions.set(id, { id, principal, transport, lastActive: Date.now() })
      },
    })
    transport.onclose = () => {
      if (transport.sessionId) this.#sessions.delete(transport.sessionId)
      void workspace.close()
      void server.close().catch(() => {})
    }
    await server.connect(transport)
    return transport
  }

  /** Ends every session (shutdown). */
  async closeAll (): Promise<void> {
    clearInterval(this.#sweeper)
    await Promise.allSettled([...this.#sessions.values()].map((session) => session.transport.close()))
  }

  #server (principal: Principal, workspace: WorkspaceScope, allowed: NameMatcher | undefined): Server {
    const server = new Server({ name: 'toolport', version: VERSION }, { capabilities: { tools: { listChanged: false } } })
    server.setRequestHandler(ListToolsRequestSchema, async () => ({
      tools: this.#runtime.registry.list({ scope: principal.scope, allowed }).map((tool) => catalogEntry(tool, 'mcp')) as Array<{ name: string, inputSchema: { type: 'object' } }>,
    }))
    server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
      const caller = {
        tenant: principal.tenant,
        scope: principal.scope,
        // A client's JSON-RPC id goes into logs and problems: only a sane one is kept as it is.
        requestId: requestIdOf(String(extra.requestId)),
        log: this.#log,
        signal: extra.signal,
      }
      const outcome = await execute(this.#runtime, { name: request.params.name, arguments: request.params.arguments ?? {} }, caller, workspace)
      return toCallToolResult(outcome)
    })
    return server
  }

  async #closeIdle (): Promise<void> {
    const cutoff = Date.now() - this.#idleMs
    const idle = [...this.#sessions.values()].filter((session) => session.lastActive < cutoff)
    await Promise.allSettled(idle.map((session) => session.transport.close()))
  }
}
