/** Request ids: a caller's own when it is sane, else a fresh one. */
import { randomUUID } from 'node:crypto'

const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/

/** Keeps a caller's id (an X-Request-Id, an MCP request id) when it is sane; otherwise makes one. */
export function requestIdOf (given: string | string[] | undefined): string {
  return typeof given === 'string' && REQUEST_ID.test(given) ? given : randomUUID()
}
