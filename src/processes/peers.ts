/**
 * Requests to the other instances that share the workspace root. A request
 * about a process that another instance runs goes to that instance, with
 * the caller's own credentials, in bounded time, and marked as forwarded, so
 * that it is answered there and never sent on again. An instance that does
 * not answer in time (refused, unreachable, silent), or is not the run that
 * started the process, is `OwnerGone`: its processes are lost, for good or
 * for as long as it does not answer (process-locator.ts).
 */
import type { Readable } from 'node:stream'
import type { Agent } from 'undici'
import { ToolError, isErrorCode } from '../errors.ts'
import { loadOnce } from '../load-once.ts'
import type { PeerKey } from './peer-key.ts'

/** Marks a forwarded request, with the instances' key (peer-key.ts): its instance answers from its own processes only. */
export const FORWARDED_HEADER = 'toolport-forwarded'
/** Names the run of the instance that answers (on /healthz): a request is forwarded only to the run its record names. */
export const INSTANCE_HEADER = 'toolport-instance'
/** How long connecting to another instance may take. */
const CONNECT_MS = 2000
/** How long another instance may take to begin its answer, beyond what the request asked it to wait. */
const ANSWER_MS = 10_000
/** How long a forwarded event stream may stay silent (its instance sends a comment every 15 s). */
const STREAM_IDLE_MS = 45_000

/** The instance a process record names: its address, and the id of the run that started the process. */
export interface Owner {
  url: string
  instance: string
}

/** Failures that leave no doubt the request never reached the instance. */
const NOT_SENT = new Set(['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN', 'UND_ERR_CONNECT_TIMEOUT'])

/**
 * Why the instance that runs a process could not answer for it: `replaced`
 * leaves no doubt that the process is gone (another run of the service, or
 * something else, answers at its address), `unanswered` may pass (a restart
 * under way, a network that failed for a moment, a process it does not list
 * yet because its start is under way).
 */
export type Unreachable = 'replaced' | 'unanswered'

export class OwnerGone extends Error {
  /** The request may have reached the instance before it stopped answering (a call may have run there). */
  readonly maybeDelivered: boolean
  readonly reason: Unreachable

  constructor (owner: Owner, options: { cause?: unknown, sent?: boolean, reason?: Unreachable } = {}) {
    super(`the instance at ${owner.url} does not answer, or is not the one that ran the process`, options)
    const code = (options.cause as { code?: unknown } | undefined)?.code
    this.maybeDelivered = options.sent === true && !(typeof code === 'string' && NOT_SENT.has(code))
    this.reason = options.reason ?? 'unanswered'
  }
}

export interface PeerRequest {
  method: 'GET' | 'POST'
  /** The path and query string, rebuilt from checked parts (never a caller's raw URL): it must stay at the owner's address. */
  path: string
  /** The caller's Authorization header, passed on as it came. */
  credentials?: string | undefined
  body?: unknown
  accept?: string | undefined
  lastEventId?: string | undefined
  requestId?: string | undefined
  /** How long the other instance may take before it answers (a long-poll, a kill's grace, a call's run), in ms: the service's own bound, never a caller's. */
  waitMs?: number
  /** The answer is an event stream: silence is bounded, not its length. */
  stream?: boolean
  signal?: AbortSignal | undefined
}

export interface PeerAnswer {
  status: number
  contentType: string | undefined
  /** Its Retry-After, in seconds (an Overloaded answer has one). */
  retryAfterSeconds: number | undefined
  body: Readable & { json: () => Promise<unknown>, dump: () => Promise<void> }
}

async function loadUndici (): Promise<{ agent: Agent, request: typeof import('undici').request }> {
  const { Agent, request } = await import('undici')
  return { agent: new Agent({ connect: { timeout: CONNECT_MS } }), request }
}

export class Peers {
  /** undici, loaded by the first forward: a single instance never needs it. */
  #undici = loadOnce(loadUndici)
  /** The trace headers of the request being forwarded, so the owner's spans join the caller's trace. */
  readonly #traceHeaders: () => Record<string, string>
  /** What marks a request as one instance's to another. */
  readonly key: PeerKey

  constructor (key: PeerKey, traceHeaders: () => Record<string, string> = () => ({})) {
    this.key = key
    this.#traceHeaders = traceHeaders
  }

  /**
   * Sends `request` to `owner`; OwnerGone when it does not answer, or is not
   * the run of the instance that the record names: the caller's credentials
   * go only to that run (an address is reused when a pod is replaced).
   */
  async send (owner: Owner, request: PeerRequest): Promise<PeerAnswer> {
    const { agent, request: send } = await this.#undici()
    await this.#check(owner, request.signal)
    const headers: Record<string, string> = { ...this.#traceHeaders(), [FORWARDED_HEADER]: await this.key.value() }
    if (request.credentials !== undefined) headers['authorization'] = request.credentials
    if (request.accept !== undefined) headers['accept'] = request.accept
    if (request.lastEventId !== undefined) headers['last-event-id'] = request.lastEventId
    if (request.requestId !== undefined) headers['x-request-id'] = request.requestId
    if (request.body !== undefined) headers['content-type'] = 'application/json'
    const answerMs = Math.max(0, request.waitMs ?? 0) + ANSWER_MS
    const url = new URL(request.path, owner.url)
    // A path is joined to the owner's address; anything that would leave it is a bug, never sent.
    if (url.origin !== new URL(owner.url).origin) throw new Error(`a forwarded path left its instance: ${request.path}`)
    try {
      const answer = await send(url, {
        method: request.method,
        headers,
        body: request.body === undefined ? undefined : JSON.stringify(request.body),
        dispatcher: agent,
        headersTimeout: answerMs,
        bodyTimeout: request.stream === true ? STREAM_IDLE_MS : answerMs,
        signal: request.signal,
      })
      const type = answer.headers['content-type']
      const retryAfter = Number(answer.headers['retry-after'])
      return { status: answer.statusCode, contentType: Array.isArray(type) ? type[0] : type, retryAfterSeconds: Number.isSafeInteger(retryAfter) && retryAfter >= 0 ? retryAfter : undefined, body: answer.body }
    } catch (error) {
      if (request.signal?.aborted === true) throw error
      throw new OwnerGone(owner, { cause: error, sent: true })
    }
  }

  /** Sends `request` and reads a JSON answer: the body of a 2xx, or the ToolError its problem names. */
  async json (owner: Owner, request: PeerRequest): Promise<unknown> {
    const answer = await this.send(owner, request)
    let body: unknown
    try {
      body = await answer.body.json()
    } catch (error) {
      throw new OwnerGone(owner, { cause: error, sent: true })
    }
    if (answer.status < 300) return body
    throw problemAsError(body, answer.status, answer.retryAfterSeconds)
  }

  async close (): Promise<void> {
    const begun = this.#undici.begun
    this.#undici = loadOnce(loadUndici)
    await (await begun)?.agent.close()
  }

  /** Whether `owner` answers as the run the record names (as `send` asks before it sends): why not, when not. */
  async answers (owner: Owner, signal?: AbortSignal): Promise<true | Unreachable> {
    await this.#undici()
    try {
      await this.#check(owner, signal)
      return true
    } catch (error) {
      if (error instanceof OwnerGone) return error.reason
      throw error
    }
  }

  /**
   * Asks `owner`'s address, without credentials, which run answers there.
   * Asked before every forward, not remembered: a run found a moment ago may
   * be gone, and its address taken by another pod, by the next request.
   */
  async #check (owner: Owner, signal: AbortSignal | undefined): Promise<void> {
    const { agent, request: send } = await this.#undici()
    let instance: unknown
    let status: number
    try {
      const answer = await send(new URL('/healthz', owner.url), { method: 'GET', dispatcher: agent, headersTimeout: ANSWER_MS, bodyTimeout: ANSWER_MS, signal })
      await answer.body.dump()
      instance = answer.headers[INSTANCE_HEADER]
      status = answer.statusCode
    } catch (error) {
      if (signal?.aborted === true) throw error
      throw new OwnerGone(owner, { cause: error })
    }
    if (instance === owner.instance) return
    // Healthy, and not that run (another run of the service, or something else): it is gone. An
    // answer that is not healthy (a proxy's 502, the instance's own 503 while it closes) may pass.
    throw new OwnerGone(owner, { reason: status >= 200 && status < 300 ? 'replaced' : 'unanswered' })
  }
}

/** The error another instance answered, as the same ToolError here (its Retry-After included). */
function problemAsError (body: unknown, status: number, retryAfterSeconds: number | undefined): ToolError {
  const problem = (typeof body === 'object' && body !== null ? body : {}) as Record<string, unknown>
  const code = isErrorCode(problem['code']) ? problem['code'] : 'ExecutionFailed'
  const detail = typeof problem['detail'] === 'string' ? problem['detail'] : `another instance answered ${status}`
  const { type: _type, title: _title, status: _status, detail: _detail, code: _code, request_id: _id, tool: _tool, ...extra } = problem
  return new ToolError(code, detail, { extra, retryAfterSeconds })
}
