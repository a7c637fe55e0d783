/** Requests through `inject` as a given bearer token, answered as {status, body, headers}. */
import type { FastifyInstance } from 'fastify'

export type Method = 'GET' | 'POST' | 'PUT' | 'DELETE'

/** `token` null sends no Authorization header. */
export async function requestAs (app: FastifyInstance, token: string | null, method: Method, url: string, payload?: unknown, headers: Record<string, string> = {}) {
  const response = await app.inject({
    method,
    url,
    payload: payload as string,
    headers: { ...(token === null ? {} : { authorization: `Bearer ${token}` }), ...headers },
  })
  let body: any = response.body
  try { body = response.json() } catch {}
  return { status: response.statusCode, body, headers: response.headers }
}

/** POST /v1/tools/{tool}/execute as `token`. */
export function execAs (app: FastifyInstance, token: string, tool: string, args: unknown, workspace?: string) {
  return requestAs(app, token, 'POST', `/v1/tools/${tool}/execute`, { arguments: args, ...(workspace ? { workspace } : {}) })
}
