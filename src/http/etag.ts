/**
 * Strong ETags for answers that clients cache (the catalog, one tool): the
 * tag is a digest of the answer itself, so it changes exactly when the
 * answer does (another format, scope or filter, a tool added or changed).
 */
import { createHash } from 'node:crypto'
import type { FastifyReply, FastifyRequest } from 'fastify'

/** The strong ETag of a JSON answer. */
export function etagOf (body: unknown): string {
  return `"${createHash('sha256').update(JSON.stringify(body)).digest('base64url')}"`
}

/** Whether an If-None-Match header names `tag` (or is `*`); weak forms compare by their opaque part. */
export function matchesIfNoneMatch (header: string | undefined, tag: string): boolean {
  if (header === undefined) return false
  return header.split(',').map((part) => part.trim().replace(/^W\//, '')).some((part) => part === '*' || part === tag)
}

/**
 * Sets the answer's ETag; true when the client has it already, in which
 * case a 304 has been sent, without a body (so without a Content-Length:
 * a 304's would have to be the 200's), and the caller returns the reply.
 */
export function notModified (request: FastifyRequest, reply: FastifyReply, body: unknown): boolean {
  const tag = etagOf(body)
  reply.header('etag', tag)
  if (!matchesIfNoneMatch(request.headers['if-none-match'], tag)) return false
  void reply.code(304).send()
  return true
}
