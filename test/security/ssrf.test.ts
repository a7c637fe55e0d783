/**
 * SSRF (issue 5): under the default policy web_fetch refuses every way of
 * naming a loopback, private, link-local, CGNAT, multicast, unspecified or
 * metadata address with 403 PermissionDenied, before any connection: the
 * local server each vector points at receives nothing. Names resolve through
 * a table the test controls; nothing here leaves the machine, and only
 * 127.0.0.1 is ever connected to.
 */
import type { FastifyInstance } from 'fastify'
import { beforeEach, describe, expect, it } from 'vitest'
import { refusalOf } from '../../src/tools/ssrf.ts'
import { buildTestApp, exec } from '../helper.ts'
import { expectProblem } from '../support/problem.ts'
import { type HttpServer, startHttpServer } from '../support/servers.ts'
import { installWebFetch, loopbackServerIsPublic, tableResolver } from '../support/web-fetch.ts'

let server: HttpServer

beforeEach(async () => {
  server = await startHttpServer((request, response) => {
    const target = new URL(request.url, 'http://x').searchParams.get('to')
    if (target) response.writeHead(302, { location: target }).end()
    else response.writeHead(200, { 'content-type': 'text/plain' }).end(`page ${request.url}`)
  })
})

/** Every vector as a function of the server's port, so that a policy failure would reach the server. */
const vectors = (p: number): Array<[string, string]> => [
  ['loopback', `http://127.0.0.1:${p}/`],
  ['localhost (resolved)', `http://localhost:${p}/`],
  ['decimal', `http://2130706433:${p}/`],
  ['octal', `http://0177.0.0.1:${p}/`],
  ['long octal', `http://017700000001:${p}/`],
  ['hex', `http://0x7f000001:${p}/`],
  ['dotted hex', `http://0x7f.1:${p}/`],
  ['short 127.1', `http://127.1:${p}/`],
  ['short 127.0.1', `http://127.0.1:${p}/`],
  ['zero-padded', `http://127.000.000.001:${p}/`],
  ['unspecified 0.0.0.0', `http://0.0.0.0:${p}/`],
  ['unspecified 0', `http://0:${p}/`],
  ['https loopback', `https://127.0.0.1:${p}/`],
  ['credentials before loopback', `http://user:pass@127.0.0.1:${p}/`],
  ['IPv6 loopback', `http://[::1]:${p}/`],
  ['IPv6 loopback, long form', `http://[0:0:0:0:0:0:0:1]:${p}/`],
  ['IPv6 unspecified', `http://[::]:${p}/`],
  ['IPv4-mapped dotted', `http://[::ffff:127.0.0.1]:${p}/`],
  ['IPv4-mapped hex', `http://[::ffff:7f00:1]:${p}/`],
  ['IPv4-compatible', `http://[::127.0.0.1]:${p}/`],
  ['IPv4-translated', `http://[::ffff:0:7f00:1]:${p}/`],
  ['link-local with zone id', `http://[fe80::1%25lo0]:${p}/`],
  ['link-local', `http://[fe80::1]:${p}/`],
  ['unique-local fd00', `http://[fd00::1]:${p}/`],
  ['unique-local fc00', `http://[fc00::1]:${p}/`],
  ['IPv6 multicast', `http://[ff02::1]:${p}/`],
  ['private 10/8', `http://10.0.0.1:${p}/`],
  ['private 172.16/12', `http://172.16.0.1:${p}/`],
  ['private 172.31', `http://172.31.255.254:${p}/`],
  ['private 192.168/16', `http://192.168.1.1:${p}/`],
  ['CGNAT', `http://100.64.0.1:${p}/`],
  ['AWS metadata', 'http://169.254.169.254/latest/meta-data/'],
  ['AWS metadata, IPv4-mapped', 'http://[::ffff:a9fe:a9fe]/latest/meta-data/'],
  ['AWS metadata, NAT64', 'http://[64:ff9b::a9fe:a9fe]/'],
  ['AWS metadata IPv6', 'http://[fd00:ec2::254]/latest/meta-data/'],
  ['GCP metadata name', 'http://metadata.google.internal/computeMetadata/v1/'],
  ['GCP metadata name, upper case, trailing dot', 'http://METADATA.GOOGLE.INTERNAL./'],
  ['multicast', `http://224.0.0.1:${p}/`],
  ['broadcast', `http://255.255.255.255:${p}/`],
  ['benchmarking range', `http://198.18.0.1:${p}/`],
  ['name resolving to 10/8', `http://intranet.test:${p}/`],
  ['name resolving to loopback', `http://loop.test:${p}/`],
  ['name resolving to ::1', `http://v6.test:${p}/`],
  ['name resolving to mapped loopback', `http://mapped.test:${p}/`],
  ['name resolving to the metadata address', 'http://meta.test/'],
  ['name with a reserved and a private address', `http://mixed.test:${p}/`],
]

const TABLE = {
  localhost: ['127.0.0.1', '::1'],
  'intranet.test': ['10.1.2.3'],
  'loop.test': ['127.0.0.1'],
  'v6.test': ['::1'],
  'mapped.test': ['::ffff:127.0.0.1'],
  'meta.test': ['169.254.169.254'],
  // A documentation address (never connected to: the private one refuses the name first).
  'mixed.test': ['192.0.2.10', '192.168.0.10'],
}

async function defaultPolicyApp (): Promise<FastifyInstance> {
  const app = await buildTestApp()
  installWebFetch(app, { resolve: tableResolver(TABLE).resolve })
  return app
}

describe('web_fetch refuses SSRF vectors under the default policy', () => {
  it('has at least 30 vectors', () => {
    expect(vectors(1).length).toBeGreaterThanOrEqual(30)
  })

  it('says in words why an address is refused', () => {
    expect(refusalOf('0.0.0.0')).toBe('0.0.0.0 is an unspecified address')
    expect(refusalOf('169.254.169.254')).toBe('169.254.169.254 is a link-local address')
    expect(refusalOf('fd00::1')).toBe('fd00::1 is a unique-local address')
    expect(refusalOf('100.64.0.1')).toBe('100.64.0.1 is a carrier-grade NAT (CGNAT) address')
    expect(refusalOf('8.8.8.8')).toBeNull()
  })

  for (const [name, url] of vectors(0)) {
    it(`refuses ${name}: ${url.replace(':0/', ':PORT/')}`, async () => {
      const app = await defaultPolicyApp()
      const target = vectors(server.port).find(([n]) => n === name)?.[1] as string
      const answer = await exec(app, 'web_fetch', { url: target })
      expectProblem(answer, 403, 'PermissionDenied', 'web_fetch')
      expect(server.requests).toEqual([])
    })
  }
})

describe('redirects and DNS rebinding', () => {
  /** An app whose own 127.0.0.1 server stands for a public host (`public.test`). */
  async function publicServerApp (table: Record<string, string[] | (() => string[])> = {}) {
    const app = await buildTestApp()
    const resolver = tableResolver({ 'public.test': ['127.0.0.1'], ...TABLE, ...table })
    installWebFetch(app, { resolve: resolver.resolve, policy: loopbackServerIsPublic })
    return { app, resolver }
  }

  it('follows a redirect between allowed hosts (the control for what follows)', async () => {
    const { app } = await publicServerApp()
    const answer = await exec(app, 'web_fetch', { url: `http://public.test:${server.port}/start?to=/final` })
    expect(answer.status, JSON.stringify(answer.body)).toBe(200)
    expect(answer.body.result).toMatchObject({ status: 200, body: 'page /final' })
    expect(server.requests.map((r) => r.url)).toEqual(['/start?to=/final', '/final'])
  })

  const privateHops: Array<[string, (p: number) => string]> = [
    ['a mapped loopback literal', (p) => `http://[::ffff:127.0.0.1]:${p}/secret`],
    ['a private literal', (p) => `http://10.0.0.1:${p}/secret`],
    ['a name resolving to a private address', (p) => `http://intranet.test:${p}/secret`],
    ['the metadata service', () => 'http://169.254.169.254/latest/meta-data/'],
    ['the metadata host name', () => 'http://metadata.google.internal/'],
  ]
  for (const [name, hop] of privateHops) {
    it(`refuses a redirect chain from an allowed host into ${name}`, async () => {
      const { app } = await publicServerApp()
      const last = encodeURIComponent(hop(server.port))
      const first = `http://public.test:${server.port}/one?to=${encodeURIComponent(`http://public.test:${server.port}/two?to=${last}`)}`
      const answer = await exec(app, 'web_fetch', { url: first })
      expectProblem(answer, 403, 'PermissionDenied', 'web_fetch')
      expect(server.requests.map((r) => new URL(r.url, 'http://x').pathname)).toEqual(['/one', '/two'])
    })
  }

  it('refuses a name with any private address, even beside an allowed one', async () => {
    const { app } = await publicServerApp({ 'both.test': ['127.0.0.1', '10.0.0.1'] })
    expectProblem(await exec(app, 'web_fetch', { url: `http://both.test:${server.port}/` }), 403, 'PermissionDenied')
    expect(server.requests).toEqual([])
  })

  it('connects to the address it checked when the name rebinds, and checks again on the next hop', async () => {
    let calls = 0
    // First answer: the allowed server. Every later one: another loopback address that nothing listens on.
    const { app, resolver } = await publicServerApp({ 'rebind.test': () => (++calls === 1 ? ['127.0.0.1'] : ['127.0.0.2']) })
    const answer = await exec(app, 'web_fetch', { url: `http://rebind.test:${server.port}/page` })
    expect(answer.status, JSON.stringify(answer.body)).toBe(200)
    expect(answer.body.result.body).toBe('page /page')
    expect(resolver.lookups).toEqual(['rebind.test'])

    const again = await exec(app, 'web_fetch', { url: `http://public.test:${server.port}/r?to=${encodeURIComponent(`http://rebind.test:${server.port}/page`)}` })
    expectProblem(again, 403, 'PermissionDenied')
    expect(server.requests.map((r) => new URL(r.url, 'http://x').pathname)).toEqual(['/page', '/r'])
  })

  it('lets allow_private_networks lift the policy', async () => {
    const app = await buildTestApp({ tools: { web_fetch: { allow_private_networks: true } } })
    const answer = await exec(app, 'web_fetch', { url: `http://127.1:${server.port}/open` })
    expect(answer.body.result).toMatchObject({ status: 200, body: 'page /open' })
  })
})
