/**
 * A server span per HTTP request, continuing the caller's `traceparent`,
 * active while the route runs so that each tool call's span is its child.
 * Installed only when tracing is on: without it no hook runs.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify'
import { clipText } from '../../execution/truncate.ts'
import { ATTR_MCP_METHOD_NAME, ATTR_MCP_SESSION_ID, type RequestSpan, type Tracing } from '../../telemetry/tracing.ts'

const ATTR_REQUEST_ID = 'toolport.request_id'
/** MCP's method names and session ids are a few dozen bytes; a longer one is a caller's, and cut. */
const MAX_MCP_TEXT_BYTES = 256

declare module 'fastify' {
  interface FastifyRequest {
    traceSpan: RequestSpan | null
  }
}

/** The JSON-RPC method of a single /mcp message (a batch has no one method). */
function mcpMethodOf (body: unknown): string | undefined {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return undefined
  const method = (body as { method?: unknown }).method
  return typeof method === 'string' ? method : undefined
}

function isMcp (request: FastifyRequest): boolean {
  return request.routeOptions.url === '/mcp'
}

/**
 * Starts the request's server span, ended when its answer is. Also called
 * for a request Fastify answers before any hook runs (a URL its router
 * cannot decode: app.ts's `frameworkErrors`).
 */
export function traceRequest (tracing: Tracing, request: FastifyRequest, reply: FastifyReply): void {
  const queryAt = request.url.indexOf('?')
  const path = queryAt === -1 ? request.url : request.url.slice(0, queryAt)
  const span = tracing.startRequest(request.method, request.routeOptions.url, path, request.headers)
  span.setAttribute(ATTR_REQUEST_ID, request.id)
  request.traceSpan = span
  // 'close' comes for every response, hijacked ones (/mcp) included, and for a client that left: one that
  // left before any answer was sent has no status (Node's statusCode would read 200); a stream it left has one.
  reply.raw.once('close', () => { span.end(reply.raw.headersSent ? reply.raw.statusCode : undefined) })
}

export function installTracing (app: FastifyInstance, tracing: Tracing): void {
  app.decorateRequest('traceSpan', null)
  app.addHook('onRequest', (request, reply, done) => {
    traceRequest(tracing, request, reply)
    done()
  })
  // The body is parsed by now; from here on, what the route runs (and awaits) sees the request span as active.
  app.addHook('preHandler', (request, _reply, done) => {
    const span = request.traceSpan
    if (span === null) return done()
    if (isMcp(request)) {
      const method = mcpMethodOf(request.body)
      // The caller's text: cut, as a tool's name is (a span holds it until the exporter sends it).
      if (method !== undefined) span.setAttribute(ATTR_MCP_METHOD_NAME, clipText(method, MAX_MCP_TEXT_BYTES))
      const session = request.headers['mcp-session-id']
      if (typeof session === 'string') span.setAttribute(ATTR_MCP_SESSION_ID, clipText(session, MAX_MCP_TEXT_BYTES))
    }
    tracing.within(span, done)
  })
}
