/**
 * POST/GET/DELETE /mcp: the MCP Streamable HTTP endpoint, serving the same
 * catalog, scopes and execution path as REST. The SDK transport writes the
 * answers itself, so these routes hand it the raw request and response.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import type { FastifyReply, FastifyRequest } from 'fastify'
import type { Logger } from 'pino'
import { allowedFilter } from '../../execution/globs.ts'
import type { NameMatcher } from '../../execution/globs.ts'
import type { Runtime } from '../../runtime.ts'
import { ToolError } from '../../errors.ts'
import type { McpSession, McpSessions } from '../../mcp-server/sessions.ts'
import { loadOnce } from '../../load-once.ts'

const SESSION_HEADER = 'mcp-session-id'

function sessionIdOf (request: FastifyRequest): string | undefined {
  const header = request.headers[SESSION_HEADER]
  return typeof header === 'string' ? header : undefined
}

/**
 * `?allowed=GLOB,GLOB` on the initialize request: the session's catalog is
 * filtered as REST's `allowed` filters it (the way to see internal_only MCP tools).
 */
function allowedOf (request: FastifyRequest): NameMatcher | undefined {
  const { allowed } = request.query as { allowed?: unknown }
  // Given twice, it would be read as neither (REST's schema refuses it as well).
  if (allowed !== undefined && typeof allowed !== 'string') throw new ToolError('BadRequest', 'allowed must be given once, as a comma-separated list of globs')
  return allowedFilter(allowed)
}

/** A Host header as a URL spells it (`[::ffff:7f00:1]`, `xn--bcher-kva.example`); BadRequest when it is no host[:port]. */
function urlHostOf (host: string): string {
  try {
    if (/^[^/?#@\\\s]+$/.test(host)) return new URL(`http://${host}`).host
  } catch {}
  throw new ToolError('BadRequest', 'the Host header is not a host name or address with an optional port')
}

/** JSON-RPC's Invalid Request. */
const INVALID_REQUEST = -32600

/** Each session's requests still to be answered, by JSON-RPC id. */
const idsInFlight = new WeakMap<McpSession, Set<string | number>>()

/**
 * Takes the ids of the requests in `body` for the session until this POST's
 * answer ends (a tool call's until it is answered, however long after its
 * client left: the session's `calls.unanswered`); why not, when the batch is
 * empty or an id is one a request still to be answered has (the transport
 * would send the answer of one to the other's stream and leave that stream
 * open for good).
 */
function claimRequestIds (body: unknown, session: McpSession, reply: FastifyReply): string | undefined {
  if (Array.isArray(body) && body.length === 0) return 'an empty batch holds no request'
  const messages: unknown[] = Array.isArray(body) ? body : [body]
  const ids = messages.flatMap((message) => {
    if (typeof message !== 'object' || message === null || typeof (message as { method?: unknown }).method !== 'string') return []
    const { id } = message as { id?: unknown }
    return typeof id === 'string' || typeof id === 'number' ? [id] : []
  })
  const inFlight = idsInFlight.get(session) ?? new Set()
  if (new Set(ids).size < ids.length || ids.some((id) => inFlight.has(id) || session.calls.unanswered.has(id))) return 'a request id must not be one that a request still to be answered in this session has'
  idsInFlight.set(session, inFlight)
  for (const id of ids) inFlight.add(id)
  reply.raw.once('close', () => { for (const id of ids) inFlight.delete(id) })
  return undefined
}

interface McpServerSide {
  sessions: McpSessions
  isInitializeRequest: (value: unknown) => boolean
}

export const mcpRoutes: FastifyPluginAsyncTypebox<{ runtime: Runtime }> = async (app, { runtime }) => {
  // The MCP SDK (its server, transport and schemas) is loaded by the first /mcp request, not at start-up.
  const serverSide = loadOnce(async (): Promise<McpServerSide> => {
    const [{ McpSessions }, { isInitializeRequest }] = await Promise.all([import('../../mcp-server/sessions.ts'), import('@modelcontextprotocol/sdk/types.js')])
    return { sessions: new McpSessions(runtime, app.log as Logger), isInitializeRequest }
  })
  app.addHook('onClose', async () => {
    await (await serverSide.begun)?.sessions.closeAll()
  })
  // The SDK's transport builds each request's URL again and answers a bare 400 of its own when that
  // changes the Host (an IPv6 address written out, a name in Unicode): it gets the Host as a URL spells it.
  // An HTTP/1.0 request may come without a Host: it gets the address it was sent to.
  app.addHook('preHandler', async (request) => {
    const { headers } = request.raw
    const { localAddress, localPort } = request.raw.socket
    headers.host = urlHostOf(headers.host ?? (localAddress?.includes(':') ? `[${localAddress}]:${localPort}` : `${localAddress}:${localPort}`))
  })

  const forward = async (request: FastifyRequest, reply: FastifyReply, transport: { handleRequest: (req: never, res: never, body?: unknown) => Promise<void> }) => {
    reply.hijack()
    await transport.handleRequest(request.raw as never, reply.raw as never, request.body)
  }

  /** The request's session; the request's end counts as a use too, so idle time starts when a long call ends. */
  const existing = async (request: FastifyRequest, reply: FastifyReply) => {
    const id = sessionIdOf(request)
    if (id === undefined) throw new ToolError('BadRequest', `no ${SESSION_HEADER} header: send an initialize request first`)
    const { sessions } = await serverSide()
    const session = sessions.find(id, request.principal)
    if (!session) throw new ToolError('NotFound', 'no such MCP session (it ended or expired)')
    reply.raw.once('close', () => { sessions.touch(session) })
    return session
  }

  const initialize = async (request: FastifyRequest, reply: FastifyReply) => {
    const { sessions } = await serverSide()
    const transport = await sessions.open(request.principal, allowedOf(request))
    // An initialize the transport refused, or whose answer never reached the client, leaves no session behind.
    reply.raw.once('close', () => {
      if (transport.sessionId === undefined || !reply.raw.writableFinished) void transport.close()
    })
    return forward(request, reply, transport)
  }

  app.post('/mcp', { schema: { summary: 'MCP Streamable HTTP: JSON-RPC messages', tags: ['mcp'] } }, async (request, reply) => {
    // Sent as text/plain (or with no body), JSON arrives as a string: say what to send, not "must be initialize".
    if (typeof request.body !== 'object' || request.body === null) throw new ToolError('BadRequest', 'the body must be a JSON-RPC message or batch, sent with Content-Type: application/json')
    const id = sessionIdOf(request)
    if (id === undefined) {
      if (!(await serverSide()).isInitializeRequest(request.body)) throw new ToolError('BadRequest', 'the first MCP request of a session must be initialize')
      if (runtime.readiness === 'draining') throw new ToolError('Overloaded', 'the service is shutting down')
      return initialize(request, reply)
    }
    const session = await existing(request, reply)
    const refusal = claimRequestIds(request.body, session, reply)
    // Answered as the transport answers a message it cannot take: a JSON-RPC error, status 400.
    if (refusal !== undefined) return reply.code(400).send({ jsonrpc: '2.0', id: null, error: { code: INVALID_REQUEST, message: refusal } })
    return forward(request, reply, session.transport)
  })

  app.get('/mcp', { schema: { summary: 'MCP Streamable HTTP: the server-to-client event stream of a session', tags: ['mcp'] } }, async (request, reply) =>
    forward(request, reply, (await existing(request, reply)).transport))

  app.delete('/mcp', { schema: { summary: 'MCP Streamable HTTP: end a session (its workspace goes with it)', tags: ['mcp'] } }, async (request, reply) =>
    forward(request, reply, (await existing(request, reply)).transport))
}
