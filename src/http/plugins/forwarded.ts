/**
 * Requests one instance forwards to another (processes/peers.ts) carry the
 * instances' key in `toolport-forwarded`, and are answered from this
 * instance's own processes only. A request to /v1 or /mcp that names the
 * header without the key is refused: the header is not for clients
 * (processes/peer-key.ts). Elsewhere (the health checks, which an instance
 * of an earlier version sent it with) it means nothing and is let be.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify'
import { ToolError } from '../../errors.ts'
import type { PeerKey } from '../../processes/peer-key.ts'
import { needsAuth } from './auth.ts'
import { FORWARDED_HEADER } from '../../processes/peers.ts'

declare module 'fastify' {
  interface FastifyRequest {
    /** Another instance of the service sent this request on: it is answered here, never sent on again. */
    forwarded: boolean
  }
}

export function installForwarded (app: FastifyInstance, key: PeerKey): void {
  app.decorateRequest('forwarded', false)
  app.addHook('onRequest', async (request: FastifyRequest) => {
    const offered = request.headers[FORWARDED_HEADER]
    // The route's own pattern, as auth takes it.
    if (offered === undefined || !needsAuth(request.routeOptions.url ?? request.url)) return
    // What an instance of an earlier version sends: during a rolling update the request goes again once it is over.
    if (offered === '1') throw new ToolError('Overloaded', 'an instance of an earlier version of the service forwarded this request (an update is under way); retry it shortly', { retryAfterSeconds: 1 })
    if (typeof offered !== 'string' || !await key.admits(offered)) {
      throw new ToolError('PermissionDenied', `the ${FORWARDED_HEADER} header is for requests between instances of the service, and this one does not carry their key`)
    }
    request.forwarded = true
  })
}
