/**
 * web_fetch with a name resolver the test controls, swapped into a built
 * app's registry. The internet is the one thing tests cannot have, so names
 * resolve from a table (unknown names fail like NXDOMAIN, and the system
 * resolver is never asked), and a test may let its own 127.0.0.1 server
 * stand for a public host through the address policy.
 */
import type { FastifyInstance } from 'fastify'
import type { Resolver } from '../../src/tools/ssrf.ts'
import { refusalOf } from '../../src/tools/ssrf.ts'
import { createWebFetchTool, type WebFetchOptions } from '../../src/tools/web-fetch.ts'

export type Answers = Record<string, string[] | (() => string[])>

export interface TableResolver { resolve: Resolver, lookups: string[] }

/** A resolver answering from `table` and recording every name it was asked. */
export function tableResolver (table: Answers): TableResolver {
  const lookups: string[] = []
  const resolve: Resolver = async (hostname) => {
    lookups.push(hostname)
    const entry = table[hostname]
    const addresses = typeof entry === 'function' ? entry() : entry
    if (!addresses) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' })
    return addresses.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }))
  }
  return { resolve, lookups }
}

/** The SSRF policy, except that exactly 127.0.0.1 (the test's own server) passes as public. */
export const loopbackServerIsPublic = (address: string): string | null => (address === '127.0.0.1' ? null : refusalOf(address))

/** Replaces the app's web_fetch with one built from its config and `options`. */
export function installWebFetch (app: FastifyInstance, options: WebFetchOptions): void {
  app.runtime.registry.setGroup('builtin', 'zz-test-web-fetch', [createWebFetchTool(app.runtime.config.tools.web_fetch, options)])
}
