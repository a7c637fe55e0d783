/**
 * Idempotency-Key on the routes that declare `config: { idempotent: true }`.
 * A request with a key claims it (idempotency-store.ts) before its handler
 * runs; its answer is stored as it is sent, and a later request by the same
 * tenant with the same key, method, path and body gets that answer again
 * (`Idempotent-Replayed: true`) without running. The same key with another
 * request is 422 IdempotencyKeyReused; a repeat while the first still runs
 * is 409 Conflict.
 *
 * What a tenant's keys keep is bounded by as much as one of its workspaces may
 * hold (`workspaces.max_bytes`, or its quota): past it a new key is 413
 * PayloadTooLarge, and replays go on.
 *
 * Stored: every answer a handler gave, errors included, except one that
 * invites a retry: a 503 Overloaded (the limiter refused the call, or a
 * shutdown stopped it), a 401 (its token's revocation cut it short), or a
 * batch each of whose calls was so answered (`inviteRetry`). Its key is
 * released, and the retry runs. The layer's own 400, 409 and 422 never
 * touch the record. A request with a key runs to
 * its end even when its client goes away (caller.ts), so the client's retry
 * finds the answer and the call never runs twice.
 *
 * The body is compared as canonical JSON of the parsed body (keys sorted,
 * no whitespace), read before validation fills in defaults: a client that
 * re-serialises the same arguments in another key order or spacing retries
 * the same request.
 *
 * A replay hands out what the first request's tools answered, so it goes
 * only to a caller whose token allows the same tools as the first caller's,
 * or else may call every tool the request names (the route's
 * `toolsCalled`); another token of the tenant gets 403, as without a key.
 */
import { createHash } from 'node:crypto'
import type { FastifyInstance, FastifyReply, FastifyRequest, FastifySchema, onSendHookHandler, preHandlerAsyncHookHandler, preValidationAsyncHookHandler } from 'fastify'
import type { Logger } from 'pino'
import type { Runtime } from '../../runtime.ts'
import { ToolError } from '../../errors.ts'
import { outOfScope } from '../../execution/execute.ts'
import type { StoredAnswer } from '../idempotency-records.ts'
import { IdempotencyStore, type Ticket } from '../idempotency-store.ts'
import { problems } from '../schemas.ts'

declare module 'fastify' {
  interface FastifyContextConfig {
    /** The route takes an Idempotency-Key (plugins/idempotency.ts). */
    idempotent?: boolean
    /** The tools a request of the route calls (absent: none): a replay goes only to a caller that may call them all. */
    toolsCalled?: (request: FastifyRequest) => readonly string[]
  }
}

const KEY_HEADER = 'idempotency-key'
/** 1–255 visible ASCII characters. */
const VALID_KEY = /^[!-~]{1,255}$/
/** The answer headers a replay gives again (the rest describe the connection or this request). */
const KEPT_HEADERS = ['content-type', 'location'] as const

/** What a request with a key carries between its hooks. */
interface KeyState {
  key: string
  fingerprint: string
  ticket?: Ticket
}

const states = new WeakMap<FastifyRequest, KeyState>()
/** Requests whose answer invites a retry, though its status does not say so (a batch's is 200). */
const retryInvited = new WeakSet<FastifyRequest>()

/** Marks `request`'s answer as one that invites a retry: its key is released, not kept. */
export function inviteRetry (request: FastifyRequest): void {
  retryInvited.add(request)
}

/** True when the request holds a claimed key: it must run to its end and store its answer, client or not. */
export function holdsIdempotencyKey (request: FastifyRequest): boolean {
  return states.get(request)?.ticket !== undefined
}

/**
 * The plugin. It adds its hooks to the idempotent routes only, so it skips
 * Fastify's encapsulation (the `skip-override` mark fastify-plugin sets) to
 * see the route modules registered beside it; its store stays its own.
 */
export async function idempotency (app: FastifyInstance, { runtime }: { runtime: Runtime }): Promise<void> {
  const store = new IdempotencyStore({ root: runtime.config.workspaces.root, ttlSeconds: runtime.config.server.idempotency_ttl_seconds, log: app.log as Logger })
  store.start()
  app.addHook('onClose', async () => { store.stop() })

  const readKey: preValidationAsyncHookHandler = async (request) => {
    const key = request.headers[KEY_HEADER]
    if (key === undefined) return
    if (typeof key !== 'string' || !VALID_KEY.test(key)) {
      throw new ToolError('BadRequest', 'the Idempotency-Key must be 1 to 255 visible ASCII characters ("!" to "~")')
    }
    states.set(request, { key, fingerprint: fingerprintOf(request) })
  }

  /** The tools the request calls, each as the registry names it (a built-in in any letter case), or as sent when it knows none. */
  const toolsCalled = (request: FastifyRequest): string[] =>
    (request.routeOptions.config.toolsCalled?.(request) ?? []).filter((name) => name !== '').map((name) => runtime.registry.get(name)?.name ?? name)

  const claim: preHandlerAsyncHookHandler = async (request, reply) => {
    const state = states.get(request)
    if (!state) return
    const { tenant } = request.principal
    const claimed = await store.claim(tenant, state.key, state.fingerprint)
    switch (claimed.kind) {
      case 'claimed': {
        // The answers a tenant has the service keep are bounded as its files are: by as much as one workspace may hold.
        const maxBytes = runtime.quotaOf(tenant).maxWorkspaceBytes
        if (store.storedBytes(tenant) >= maxBytes) {
          await store.release(claimed.ticket)
          throw new ToolError('PayloadTooLarge', `the answers kept for this tenant's Idempotency-Keys hold ${maxBytes} bytes or more, as much as one workspace may; they go after server.idempotency_ttl_seconds: send this without a key, or later`)
        }
        // Checked and set aside in one turn of the event loop: requests that claim together see each other's answers
        // coming. An answer holds each call's result (a batch's also as its message): twice the result limit a call.
        store.reserve(claimed.ticket, 2 * Math.max(1, toolsCalled(request).length) * runtime.config.limits.max_result_bytes)
        state.ticket = claimed.ticket
        return
      }
      case 'replay': {
        if (claimed.answer.scope !== scopeOf(request)) {
          // The tools as they were when the answer was made: the registry may know others now, or here.
          const notAllowed = (claimed.answer.tools ?? toolsCalled(request)).find((name) => !request.principal.scope(name))
          if (notAllowed !== undefined) throw outOfScope(notAllowed)
        }
        return replay(reply, claimed.answer)
      }
      case 'running':
        throw new ToolError('Conflict', 'a request with this Idempotency-Key is still running; retry once it has answered')
      case 'reused':
        throw new ToolError('IdempotencyKeyReused', 'this Idempotency-Key was used with another method, path or body')
    }
  }

  const settle: onSendHookHandler = async (request, reply, payload) => {
    const ticket = states.get(request)?.ticket
    if (!ticket) return payload
    states.delete(request)
    try {
      const body = typeof payload === 'string' ? payload : Buffer.isBuffer(payload) ? payload.toString('utf8') : undefined
      // A 401 here is a request its token's revocation cut short (auth answered before the key was claimed): the retry,
      // with a token now valid, runs it.
      if (body === undefined || reply.statusCode === 503 || reply.statusCode === 401 || retryInvited.has(request)) await store.release(ticket)
      else await store.complete(ticket, { status: reply.statusCode, headers: keptHeaders(reply), body, scope: scopeOf(request), tools: toolsCalled(request) })
    } catch (error) {
      // The answer still goes out; a retry finds the claim running until the answer is stored (store.complete).
      request.log.error({ err: error }, 'could not store the answer of an idempotent request')
    }
    return payload
  }

  app.addHook('onRoute', (route) => {
    if (route.config?.idempotent !== true) return
    route.schema = documented(route.schema ?? {})
    route.preValidation = [...asList(route.preValidation), readKey]
    route.preHandler = [...asList(route.preHandler), claim]
    route.onSend = [...asList(route.onSend), settle]
  })
}
Object.defineProperty(idempotency, Symbol.for('skip-override'), { value: true })

/** The route's schema with the header and the layer's own answers, for the OpenAPI document. */
function documented (schema: FastifySchema): FastifySchema {
  const headers = (schema.headers ?? { type: 'object', properties: {} }) as { properties?: Record<string, unknown> }
  const keyHeader = { type: 'string', description: 'Repeats of this request (same tenant, method, path and body) get its first answer again, with Idempotent-Replayed: true; 1–255 visible ASCII characters' }
  return {
    ...schema,
    headers: { ...headers, properties: { ...headers.properties, [KEY_HEADER]: keyHeader } },
    response: { ...problems(409, 413, 422), ...(schema.response as Record<number, unknown> | undefined) },
  }
}

function replay (reply: FastifyReply, answer: StoredAnswer): FastifyReply {
  return reply.code(answer.status).headers(answer.headers).header('idempotent-replayed', 'true').send(answer.body)
}

function keptHeaders (reply: FastifyReply): Record<string, string> {
  const headers: Record<string, string> = {}
  for (const name of KEPT_HEADERS) {
    const value = reply.getHeader(name)
    if (value !== undefined) headers[name] = String(value)
  }
  return headers
}

/** The method, path and body of a request, as one digest. */
function fingerprintOf (request: FastifyRequest): string {
  // The body parser has bounded its nesting (execution/json-text.ts): the recursion below is too.
  return createHash('sha256').update(`${request.method} ${request.url}\n${canonicalJson(request.body)}`).digest('hex')
}

/** The caller's allowed tools, as one digest. */
function scopeOf (request: FastifyRequest): string {
  return createHash('sha256').update(canonicalJson([...new Set(request.principal.allowedTools)].sort())).digest('hex')
}

/** JSON with every object's keys sorted and no whitespace: one text per value. */
function canonicalJson (value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`
  if (value !== null && typeof value === 'object') {
    const object = value as Record<string, unknown>
    return `{${Object.keys(object).sort().map((key) => `${JSON.stringify(key)}:${canonicalJson(object[key])}`).join(',')}}`
  }
  return JSON.stringify(value) ?? 'null'
}

function asList<T> (hooks: T | T[] | undefined): T[] {
  if (hooks === undefined) return []
  return Array.isArray(hooks) ? hooks : [hooks]
}
