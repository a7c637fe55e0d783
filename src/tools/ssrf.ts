/**
 * The SSRF policy of web_fetch: a URL a caller sends may only lead to public
 * unicast addresses. Literal IPs arrive normalised by WHATWG URL parsing
 * (`2130706433`, `0x7f.1`, `127.1` all become 127.0.0.1); names are resolved
 * and every address they resolve to must pass. The connection then goes to
 * the very address that was checked.
 */
import ipaddr from 'ipaddr.js'
import { ToolError } from '../errors.ts'

/** Names of cloud metadata services that resolve to internal addresses. */
const BLOCKED_HOSTNAMES = new Set(['metadata.google.internal', 'metadata.goog', 'metadata', 'instance-data', 'instance-data.ec2.internal'])

export interface VettedAddress {
  address: string
  family: 4 | 6
}

export type Resolver = (hostname: string) => Promise<Array<{ address: string, family: number }>>

// node:dns/promises loads with the first name resolved, not at every start of the service.
export const systemResolver: Resolver = (hostname) => process.getBuiltinModule('node:dns/promises').lookup(hostname, { all: true, verbatim: true })

/** ipaddr.js's range name in words, with its article: `linkLocal` → "a link-local". */
function describeRange (range: string): string {
  const words = range === 'carrierGradeNat' ? 'carrier-grade NAT (CGNAT)' : range.replace(/([a-z])([A-Z0-9])/g, '$1-$2').toLowerCase()
  return `${/^(?!uni)[aeiou]/i.test(words) ? 'an' : 'a'} ${words}`
}

/** Why an address is refused, or null when it is a public unicast address. */
export function refusalOf (address: string): string | null {
  if (!ipaddr.isValid(address)) return 'not an IP address'
  // process() turns an IPv4-mapped IPv6 address into the IPv4 address it carries.
  const parsed = ipaddr.process(address)
  const range = parsed.range()
  if (range !== 'unicast') return `${address} is ${describeRange(range)} address`
  // ::a.b.c.d (IPv4-compatible, deprecated) is no range of ipaddr.js's but must not pass as public.
  if (parsed.kind() === 'ipv6' && (parsed as ipaddr.IPv6).parts.slice(0, 6).every((part) => part === 0)) return `${address} is an IPv4-compatible address`
  return null
}

/** The address policy: why an address is refused, or null when it may be reached. */
export type AddressPolicy = (address: string) => string | null

/** The host part of a URL without IPv6 brackets. */
export function hostOf (url: URL): string {
  return url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname
}

/**
 * Resolves and checks the host of `url`; the first permitted address is the
 * one to connect to. PermissionDenied when any address is private.
 */
export async function vetHost (url: URL, resolve: Resolver = systemResolver, policy: AddressPolicy = refusalOf): Promise<VettedAddress> {
  const host = hostOf(url).toLowerCase().replace(/\.$/, '')
  if (BLOCKED_HOSTNAMES.has(host)) throw new ToolError('PermissionDenied', `${host} is a cloud metadata host`)
  let addresses: Array<{ address: string, family: number }>
  if (ipaddr.isValid(host)) {
    addresses = [{ address: host, family: host.includes(':') ? 6 : 4 }]
  } else {
    try {
      addresses = await resolve(host)
    } catch (error) {
      throw new ToolError('ExecutionFailed', `cannot resolve ${host}: ${(error as NodeJS.ErrnoException).code ?? 'lookup failed'}`)
    }
  }
  if (addresses.length === 0) throw new ToolError('ExecutionFailed', `cannot resolve ${host}`)
  for (const { address } of addresses) {
    const refusal = policy(address)
    if (refusal) throw new ToolError('PermissionDenied', `blocked address: ${host} → ${refusal} (private networks are not allowed)`)
  }
  const first = addresses[0] as { address: string, family: number }
  return { address: first.address, family: first.family === 6 ? 6 : 4 }
}
