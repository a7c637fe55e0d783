/**
 * Toolport as an MCP server: each MCP session is an SDK server over a
 * Streamable HTTP transport, bound to the principal that opened it and to
 * one workspace that all its calls share and that goes when the session
 * ends (DELETE, idle expiry, the tenant's session limit, shutdown).
 */
import { randomUUID } from 'node:crypto'
import { Server } from '@modelcontextprotocol/sdk/server/index.js'
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js'
import { CallToolRequestSchema, ErrorCode, ListToolsRequestSchema, McpError, type RequestId } from '@modelcontextprotocol/sdk/types.js'
import type { Logger } from 'pino'
import { execute } from '../execution/execute.ts'
import type { NameMatcher } from '../execution/globs.ts'
import type { Runtime } from '../runtime.ts'
import { WorkspaceScope } from '../workspaces/scope.ts'
import { catalogEntry } from '../formats/catalog.ts'
import { toCallToolResult } from '../formats/mcp-result.ts'
import { VERSION } from '../version.ts'
import type { Principal } from '../execution/principal.ts'
import { answerInvalidParams } from './params.ts'
import { requestIdOf } from '../execution/request-id.ts'
import { ATTR_MCP_SESSION_ID } from '../telemetry/tracing.ts'
import { reportProgress } from './progress.ts'

export interface McpSession {
  id: string
  principal: Principal
  transport: StreamableHTTPServerTransport
  lastActive: number
  /** Its tool calls under way (a session with one is in use, however long ago the call began), by JSON-RPC id. */
  calls: SessionCalls
  /** Answers each call under way with an error (the session is ending). */
  answerUnfinished: () => Promise<void>
}

interface SessionCalls {
  running: number
  unanswered: Set<RequestId>
}

/** Idle sessions are looked for four times per idle time (and at least once a minute), so one ends at most a quarter of it late. */
const SWEEPS_PER_IDLE_TIME = 4
const MAX_SWEEP_INTERVAL_MS = 60_000

export class McpSessions {
  readonly #runtime: Runtime
  readonly #log: Logger
  /** Each tenant's sessions, least recently used first: a use moves a session to the end. */
  readonly #byTenant = new Map<string, Map<string, McpSession>>()
  readonly #maxPerTenant: number
  readonly #idleMs: number
  readonly #sweeper: NodeJS.Timeout

  constructor (runtime: Runtime, log: Logger) {
    this.#runtime = runtime
    this.#log = log
    this.#maxPerTenant = runtime.config.server.max_mcp_sessions
    this.#idleMs = runtime.config.server.mcp_session_idle_seconds * 1000
    this.#sweeper = setInterval(() => { this.#endIdle() }, Math.min(this.#idleMs / SWEEPS_PER_IDLE_TIME, MAX_SWEEP_INTERVAL_MS))
    this.#sweeper.unref()
  }

  /** The live session with this id, if it belongs to the same principal; finding it counts as a use. */
  find (id: string, principal: Principal): McpSession | undefined {
    const session = this.#byTenant.get(principal.tenant)?.get(id)
    // The same token's principal (a tokens file's reload keeps it for a token it leaves as it was).
    if (!session || session.principal !== principal) return undefined
    this.touch(session)
    return session
  }

  /** Marks a use of a live session (a request to it began or ended). */
  touch (session: McpSession): void {
    const sessions = this.#byTenant.get(session.principal.tenant)
    if (!sessions?.delete(session.id)) return
    session.lastActive = Date.now()
    sessions.set(session.id, session)
  }

  /**
   * A new session (its id is assigned when the initialize request is
   * handled); `allowed` filters its catalog as REST's `allowed` does.
   * The caller closes the transport if its initialize request does not complete.
   */
  async open (principal: Principal, allowed?: NameMatcher): Promise<StreamableHTTPServerTransport> {
    const workspace = new WorkspaceScope(this.#runtime.workspaces, principal.tenant, undefined, { keepsProcesses: true })
    const calls: SessionCalls = { running: 0, unanswered: new Set() }
    let endOnRevocation: (() => void) | undefined
    const server = this.#server(principal, workspace, allowed, calls, (requestId) => { transport.closeSSEStream(requestId) })
    // When a session ends (DELETE, its limit, idle, revocation), its calls still under way are answered first:
    // the streams they would have been answered on close with the session, and their clients would wait until
    // their own timeouts, or for good. (At shutdown the drain has answered them before the sessions close.)
    const answerUnfinished = async (): Promise<void> => {
      const unanswered = [...calls.unanswered]
      calls.unanswered.clear()
      await Promise.allSettled(unanswered.map((id) => transport.send({
        jsonrpc: '2.0',
        id,
        error: { code: ErrorCode.ConnectionClosed, message: 'the MCP session ended before this call was answered; the call was stopped' },
      }, { relatedRequestId: id })))
    }
    const transport: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      // A DELETE, which the transport handles itself: this runs before it closes.
      onsessionclosed: answerUnfinished,
      onsessioninitialized: (id) => {
        // The initialize request's span learns the id it created.
        this.#runtime.tracing?.annotateRequest(ATTR_MCP_SESSION_ID, id)
        const session = { id, principal, transport, lastActive: Date.now(), calls, answerUnfinished }
        this.#admit(session)
        // A session of a token revoked meanwhile ends, its processes with it.
        endOnRevocation = () => { this.#end(session, 'its token was revoked') }
        principal.revoked?.addEventListener('abort', endOnRevocation, { once: true })
      },
    })
    transport.onclose = () => {
      // Removed by hand: with addEventListener's `signal` option, Node holds the removal of all but a
      // target's latest listener weakly, so that the token's signal would keep ended sessions for good.
      if (endOnRevocation) principal.revoked?.removeEventListener('abort', endOnRevocation)
      if (transport.sessionId) this.#forget(principal.tenant, transport.sessionId)
      void workspace.close()
      void server.close().catch(() => {})
    }
    await server.connect(transport)
    answerInvalidParams(transport)
    return transport
  }

  /** Ends every session (shutdown). */
  async closeAll (): Promise<void> {
    clearInterval(this.#sweeper)
    const all = [...this.#byTenant.values()].flatMap((sessions) => [...sessions.values()])
    await Promise.allSettled(all.map((session) => this.#close(session)))
  }

  /** The session's server; `endStream` closes the HTTP stream a request's answer was to go out on. */
  #server (principal: Principal, workspace: WorkspaceScope, allowed: NameMatcher | undefined, calls: SessionCalls, endStream: (requestId: RequestId) => void): Server {
    const server = new Server({ name: 'toolport', version: VERSION }, { capabilities: { tools: { listChanged: false } } })
    /** The tool calls of each POST still to answer, and one of them that was cancelled (its stream is found by its id). */
    const postCalls = new WeakMap<object, { running: number, cancelled: RequestId | undefined }>()
    server.setRequestHandler(ListToolsRequestSchema, async (request) => {
      // Every tool is in the one page: a cursor is none this server gave (the MCP spec asks for -32602).
      if (request.params?.cursor !== undefined) throw new McpError(ErrorCode.InvalidParams, 'unknown cursor: tools/list answers every tool in one page, with no nextCursor')
      return {
        tools: this.#runtime.registry.list({ scope: principal.scope, allowed }).map((tool) => catalogEntry(tool, 'mcp')) as Array<{ name: string, inputSchema: { type: 'object' } }>,
      }
    })
    server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
      const caller = {
        tenant: principal.tenant,
        scope: principal.scope,
        // A client's JSON-RPC id goes into logs and problems: only a sane one is kept as it is.
        requestId: requestIdOf(String(extra.requestId)),
        log: this.#log,
        signal: extra.signal,
      }
      const stopProgress = reportProgress(request.params._meta?.progressToken, extra)
      // A cancelled call is answered with nothing (as MCP says), so the stream of its POST, which
      // waits for that answer, would stay open for good (and hold a shutdown's drain). It is ended
      // once no other call of that POST (a JSON-RPC batch may hold several) is still to answer.
      const post = extra.requestInfo ?? {}
      const unanswered = postCalls.get(post) ?? { running: 0, cancelled: undefined }
      postCalls.set(post, unanswered)
      unanswered.running++
      calls.running++
      calls.unanswered.add(extra.requestId)
      try {
        return toCallToolResult(await execute(this.#runtime, { name: request.params.name, arguments: request.params.arguments ?? {} }, caller, workspace))
      } finally {
        calls.running--
        calls.unanswered.delete(extra.requestId)
        stopProgress()
        // Cancelled while it ran, or before it began (a cancel in the same batch).
        if (extra.signal.aborted) unanswered.cancelled = extra.requestId
        const { cancelled } = unanswered
        // After this call's own answer, which the SDK sends once this handler has returned.
        if (--unanswered.running === 0 && cancelled !== undefined) setImmediate(() => { endStream(cancelled) })
      }
    })
    return server
  }

  /**
   * Registers a new session; past the tenant's limit, its least recently
   * used session ends. One with a tool call under way is in use: the least
   * recently used of the others goes, and only when every other one has a
   * call under way does the least recently used of those.
   */
  #admit (session: McpSession): void {
    const { tenant } = session.principal
    const sessions = this.#byTenant.get(tenant) ?? new Map<string, McpSession>()
    this.#byTenant.set(tenant, sessions)
    sessions.set(session.id, session)
    while (sessions.size > this.#maxPerTenant) {
      const others = [...sessions.values()].filter((each) => each !== session)
      const oldest = others.find((each) => each.calls.running === 0) ?? others[0] as McpSession
      this.#end(oldest, 'the tenant opened more MCP sessions than server.max_mcp_sessions')
    }
  }

  /** Ends the sessions unused for the idle time; a call under way is a use. */
  #endIdle (): void {
    const cutoff = Date.now() - this.#idleMs
    for (const sessions of this.#byTenant.values()) {
      for (const session of sessions.values()) {
        if (session.lastActive >= cutoff) break
        if (session.calls.running === 0) this.#end(session, 'idle for server.mcp_session_idle_seconds')
      }
    }
  }

  /** Ends a session as DELETE /mcp does: its transport closes and its workspace goes. */
  #end (session: McpSession, why: string): void {
    this.#forget(session.principal.tenant, session.id)
    this.#log.info({ tenant: session.principal.tenant, mcp_session: session.id }, `MCP session ended: ${why}`)
    void this.#close(session).catch(() => {})
  }

  async #close (session: McpSession): Promise<void> {
    await session.answerUnfinished()
    await session.transport.close()
  }

  #forget (tenant: string, id: string): void {
    const sessions = this.#byTenant.get(tenant)
    sessions?.delete(id)
    if (sessions?.size === 0) this.#byTenant.delete(tenant)
  }
}
