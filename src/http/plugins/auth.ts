/**
 * Bearer-token authentication. With tokens configured (or a tokens file
 * named), every /v1 and /mcp request needs one; a token names its tenant and
 * the tools it may use. Tokens are compared through their SHA-256 digests in
 * constant time. A tokens file is followed: its changes apply within a second.
 *
 * Without tokens (and without `auth.disabled`), the service listens on
 * loopback only, and serves /v1 and /mcp only to requests that name a
 * loopback host and come from no other site's page: a web page whose name an
 * attacker re-points at 127.0.0.1 (DNS rebinding) sends its own name as
 * Host, and its own origin as Origin.
 */
import { createHash, timingSafeEqual } from 'node:crypto'
import { stat } from 'node:fs/promises'
import type { FastifyInstance, FastifyRequest } from 'fastify'
import ipaddr from 'ipaddr.js'
import type { Logger } from 'pino'
import { allTokens, authIsOn, type Config, readTokensFile } from '../../config.ts'
import { globMatcher } from '../../execution/globs.ts'
import type { Principal } from '../../execution/principal.ts'
import { ToolError } from '../../errors.ts'

declare module 'fastify' {
  interface FastifyRequest {
    principal: Principal
  }
}

const ANONYMOUS: Principal = { tenant: 'default', scope: () => true, allowedTools: ['*'] }

const digest = (token: string): Buffer => createHash('sha256').update(token).digest()

/** Whether a request for `path` (a route's pattern, or the raw path when no route matched) needs a token. */
export function needsAuth (path: string): boolean {
  return path.startsWith('/v1/') || path === '/v1' || path.startsWith('/mcp')
}

/** How often a tokens file is looked at for a change (a kubelet swaps a Secret's files in place of the old). */
const TOKENS_FILE_CHECK_MS = 1000

interface KnownToken {
  digest: Buffer
  principal: Principal
  /** Aborts the principal's `revoked`. */
  revoke: () => void
  /** Its tenant and scope, to tell an unchanged token on a reload. */
  grants: string
}

/**
 * The tokens as known from now on. A token that `before` knew with the
 * same tenant and scope keeps its principal (its MCP sessions and streams
 * go on); the others of `before` are revoked.
 */
function knownTokens (tokens: Config['auth']['tokens'], before: KnownToken[] = []): KnownToken[] {
  const previous = new Map(before.map((known) => [`${known.digest.toString('hex')} ${known.grants}`, known]))
  const now = tokens.map((t) => {
    const hashed = digest(t.token)
    const grants = JSON.stringify([t.tenant, t.allowed_tools])
    const kept = previous.get(`${hashed.toString('hex')} ${grants}`)
    if (kept) return kept
    const revocation = new AbortController()
    const principal = { tenant: t.tenant, scope: globMatcher(t.allowed_tools), allowedTools: t.allowed_tools, revoked: revocation.signal }
    // The reason is what a call cut by the revocation answers (execute.ts), rather than a bare "cancelled".
    return { digest: hashed, principal, revoke: () => { revocation.abort(new ToolError('Unauthorized', 'the token was revoked while the request ran')) }, grants }
  })
  const kept = new Set(now)
  for (const known of before) if (!kept.has(known)) known.revoke()
  return now
}

export async function installAuth (app: FastifyInstance, auth: Config['auth']): Promise<void> {
  if (!authIsOn(auth)) {
    app.decorateRequest('principal', { getter: () => ANONYMOUS })
    if (!auth.disabled) {
      app.addHook('onRequest', async (request: FastifyRequest) => {
        if (!needsAuth(request.routeOptions.url ?? request.url)) return
        const { host, origin } = request.headers
        if (!isLoopbackAuthority(host)) throw new ToolError('PermissionDenied', `without auth tokens, only requests to a loopback host are served, not ${JSON.stringify(host ?? '')}`)
        if (origin !== undefined && !isLoopbackUrl(origin)) throw new ToolError('PermissionDenied', `without auth tokens, pages of other sites may not call the service (Origin ${JSON.stringify(origin)})`)
      })
    }
    return
  }
  let known = knownTokens(auth.tokens)
  const file = auth.tokens_file
  if (file !== undefined) {
    // Its version before its reading: a change between the two is read again.
    const version = await versionOf(file)
    known = knownTokens(allTokens(auth, await readTokensFile(file)))
    const stop = followTokensFile(auth, file, version, app.log as Logger, (tokens) => { known = knownTokens(tokens, known) })
    app.addHook('onClose', async () => { stop() })
  }
  app.decorateRequest('principal', null as unknown as Principal)
  app.addHook('onRequest', async (request: FastifyRequest) => {
    request.principal = ANONYMOUS
    // The route's own pattern, never the raw URL alone: `/%761/tools` reaches the route `/v1/tools` too.
    if (!needsAuth(request.routeOptions.url ?? request.url)) return
    const header = request.headers.authorization ?? ''
    const match = /^Bearer\s+(\S+)\s*$/i.exec(header)
    if (!match?.[1]) throw new ToolError('Unauthorized', 'send Authorization: Bearer <token>')
    const presented = digest(match[1])
    // Compare against every token so the time taken does not reveal which one matched.
    let found: Principal | undefined
    for (const candidate of known) if (timingSafeEqual(candidate.digest, presented)) found ??= candidate.principal
    if (!found) throw new ToolError('Unauthorized', 'unknown token')
    request.principal = found
  })
}

/**
 * Reads the tokens file again whenever it changes (looked at each
 * TOKENS_FILE_CHECK_MS, through its links, as a kubelet updates a mounted
 * Secret), so that a token revoked there stops working without a restart.
 * A file that cannot be read or is not valid keeps the tokens read before,
 * and says so in the log. Answers how to stop following it.
 */
function followTokensFile (auth: Config['auth'], file: string, version: string, log: Logger, replace: (tokens: Config['auth']['tokens']) => void): () => void {
  let seen = version
  let checking = false
  const check = async (): Promise<void> => {
    const now = await versionOf(file)
    if (now === seen) return
    seen = now
    try {
      replace(allTokens(auth, await readTokensFile(file)))
      log.info('auth.tokens_file changed: its tokens are in use')
    } catch (error) {
      log.error(`${(error as Error).message}; the tokens read before stay in use`)
    }
  }
  const timer = setInterval(() => {
    if (checking) return
    checking = true
    void check().finally(() => { checking = false })
  }, TOKENS_FILE_CHECK_MS).unref()
  return () => { clearInterval(timer) }
}

/** What tells one content of a file from the next: the file its links lead to, its size and its times. */
async function versionOf (file: string): Promise<string> {
  try {
    const info = await stat(file)
    return `${info.dev}:${info.ino}:${info.size}:${info.mtimeMs}:${info.ctimeMs}`
  } catch (error) {
    return `unreadable:${String((error as NodeJS.ErrnoException).code)}`
  }
}

/** Whether a hostname (as a URL gives it) is loopback: localhost, a name under .localhost, or a loopback address. */
function isLoopbackName (hostname: string): boolean {
  const name = hostname.replace(/^\[(.*)\]$/, '$1').replace(/\.$/, '').toLowerCase()
  if (name === 'localhost' || name.endsWith('.localhost')) return true
  return ipaddr.isValid(name) && ipaddr.process(name).range() === 'loopback'
}

/** A Host header's shape: a name or an address, and a port; nothing else (no user, path or query). */
const AUTHORITY = /^(?:\[[0-9A-Fa-f:.]+\]|[^\s:/?#@[\]\\]+)(?::\d*)?$/

/** Whether a Host header (`host[:port]`) names a loopback host. */
function isLoopbackAuthority (host: string | undefined): boolean {
  return host !== undefined && AUTHORITY.test(host) && isLoopbackUrl(`http://${host}/`)
}

/** Whether a URL (an Origin header among them; `null`, an opaque origin, is none) is on a loopback host. */
function isLoopbackUrl (url: string): boolean {
  try {
    return isLoopbackName(new URL(url).hostname)
  } catch {
    return false
  }
}
