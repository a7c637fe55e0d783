/**
 * web_fetch: an HTTP(S) request to a URL the caller names, under the SSRF
 * policy (unless `allow_private_networks`). Each hop of a redirect chain is
 * checked again, the connection goes to the address that was checked, and
 * the body is read only up to `max_bytes`.
 */
import { Type } from '@sinclair/typebox'
import type { Agent } from 'undici'
import type { Config } from '../config.ts'
import { ToolError } from '../errors.ts'
import { defineBuiltin } from '../execution/define.ts'
import { safePrefix } from '../execution/truncate.ts'
import { readDecoded, requestFailure, textOf } from './http-body.ts'
import { type AddressPolicy, refusalOf, type Resolver, systemResolver, type VettedAddress, vetHost } from './ssrf.ts'

export const MAX_REDIRECTS = 5
export const FETCH_TIMEOUT_MS = 30_000
const REDIRECTS = new Set([301, 302, 303, 307, 308])
const DROPPED_HEADERS = new Set(['host', 'connection', 'keep-alive', 'proxy-authorization', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'content-length'])
/** The caller's credentials for the site it named: not sent on once a redirect leads to another origin (as fetch does). */
const CREDENTIAL_HEADERS = new Set(['authorization', 'cookie'])

export interface WebFetchOptions {
  /** Name resolution (tests substitute one that answers private addresses). */
  resolve?: Resolver
  /**
   * Which addresses may be reached (tests let exactly their own 127.0.0.1
   * server pass, to stand for a public host); the SSRF policy by default.
   */
  policy?: AddressPolicy
  /** How long a whole fetch may take (tests shorten it). */
  timeoutMs?: number
}

/** An IPv6 literal with a zone id (`[fe80::1%25eth0]`): WHATWG URLs reject it, and it can only name a link-local address. */
const ZONED_IPV6 = /^https?:\/\/(?:[^/?#@]*@)?\[[^\]]*%/i

/**
 * The URL of `raw`, http(s) only. A bad URL in the caller's arguments is
 * InvalidArgs; one a site redirects to is that site's answer failing
 * (ExecutionFailed), as the caller's URL was fine.
 */
function parseUrl (raw: string, guarded: boolean, redirectedFrom?: URL): URL {
  const fault = redirectedFrom ? 'ExecutionFailed' : 'InvalidArgs'
  let url: URL
  try {
    url = new URL(raw, redirectedFrom)
  } catch {
    if (guarded && ZONED_IPV6.test(raw)) throw new ToolError('PermissionDenied', 'blocked address: an IPv6 address with a zone id is link-local (private networks are not allowed)')
    const shown = JSON.stringify(safePrefix(raw, 200))
    throw new ToolError(fault, redirectedFrom ? `the site redirected to an invalid URL: ${shown}` : `not a valid URL: ${shown}`)
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    throw new ToolError(fault, redirectedFrom
      ? `the site redirected to ${url.protocol}, which is not followed (only http:// and https://)`
      : `only http:// and https:// URLs are allowed, not ${url.protocol}`)
  }
  return url
}

/** An agent whose every connection goes to the vetted address, whatever DNS says by then. */
async function pinnedAgent (vetted: VettedAddress): Promise<Agent> {
  // undici is loaded by the first fetch, not at start-up (so in web-search.ts and message.ts).
  const { Agent } = await import('undici')
  return new Agent({
    connect: {
      lookup: (_hostname: string, options: { all?: boolean }, callback: (...args: unknown[]) => void) => {
        if (options?.all) callback(null, [{ address: vetted.address, family: vetted.family }])
        else callback(null, vetted.address, vetted.family)
      },
    } as Record<string, unknown>,
  })
}

/** `headers` without those named in `dropped` (lower case), in any letter case. */
function without (headers: Record<string, string>, dropped: ReadonlySet<string>): Record<string, string> {
  return Object.fromEntries(Object.entries(headers).filter(([name]) => !dropped.has(name.toLowerCase())))
}

export function createWebFetchTool (config: Config['tools']['web_fetch'], options: WebFetchOptions = {}) {
  const resolve = options.resolve ?? systemResolver
  const policy = options.policy ?? refusalOf
  const guarded = !config.allow_private_networks
  const timeoutMs = options.timeoutMs ?? FETCH_TIMEOUT_MS
  return defineBuiltin({
    name: 'web_fetch',
    description: 'Fetch a URL (http:// or https://) and answer its status, content type and body as text. Private networks and cloud metadata endpoints are blocked.',
    parameters: Type.Object({
      url: Type.String({ description: 'URL to fetch (http:// or https://)' }),
      method: Type.Optional(Type.String({ pattern: '^[A-Za-z]{1,16}$', description: 'HTTP method (default: "GET")' })),
      headers: Type.Optional(Type.Record(Type.String(), Type.String(), { description: 'HTTP headers as key-value pairs' })),
    }),
    outputSchema: Type.Object({
      status: Type.Integer({ description: 'The HTTP status of the last hop' }),
      content_type: Type.String(),
      body: Type.String({ description: 'The body as text, with a notice when cut at tools.web_fetch.max_bytes' }),
      url: Type.String({ description: 'The URL answered, after redirects' }),
      bytes: Type.Integer({ minimum: 0, description: 'The body\'s size (its content-length when declared)' }),
    }, { additionalProperties: false }),
    // Any method may be sent: a POST or DELETE can change or remove what is out there, and repeat it.
    annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: true },
    async execute (args, ctx) {
      let url = parseUrl(args.url, guarded)
      let method = (args.method ?? 'GET').toUpperCase()
      const timeout = AbortSignal.timeout(timeoutMs)
      const signal = AbortSignal.any([ctx.signal, timeout])
      let headers = without(args.headers ?? {}, DROPPED_HEADERS)
      for (let hop = 0; hop <= MAX_REDIRECTS; hop++) {
        const agent = guarded ? await pinnedAgent(await vetHost(url, resolve, policy)) : undefined
        try {
          const { request } = await import('undici')
          const response = await request(url, { method: method as 'GET', headers, dispatcher: agent, signal })
          const location = response.headers['location']
          if (REDIRECTS.has(response.statusCode) && typeof location === 'string') {
            await response.body.dump()
            if (response.statusCode === 303 || ((response.statusCode === 301 || response.statusCode === 302) && method === 'POST')) method = 'GET'
            const next = parseUrl(location, guarded, url)
            if (next.origin !== url.origin) headers = without(headers, CREDENTIAL_HEADERS)
            url = next
            continue
          }
          const contentType = response.headers['content-type']
          const encoding = response.headers['content-encoding']
          const { data, complete } = await readDecoded(response.body, encoding, config.max_bytes)
          // A declared length counts encoded bytes; it is the body's size only when nothing was encoded.
          const declared = encoding ? NaN : Number(response.headers['content-length'])
          const body = textOf(data, contentType, complete) + (complete ? '' : `\n... (body truncated: showing first ${data.length} bytes)`)
          return {
            status: response.statusCode,
            content_type: String(contentType ?? ''),
            body,
            url: url.href,
            bytes: Number.isFinite(declared) && declared >= data.length ? declared : data.length,
          }
        } catch (error) {
          throw requestFailure(error, 'the site', { signal: ctx.signal, timeout, timeoutMs })
        } finally {
          void agent?.close()
        }
      }
      throw new ToolError('ExecutionFailed', `more than ${MAX_REDIRECTS} redirects`)
    },
  })
}
