/**
 * docker-compose.yml, checked without Docker: it parses, every file it mounts
 * exists, the mounted Toolport config passes the service's own validation, and
 * that config reaches the search backend and the MCP server by their service names.
 */
import { existsSync, readFileSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { parse as parseYaml } from 'yaml'
import { parseConfig } from '../../src/config.ts'

const ROOT = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..')

interface Service { build?: string, image?: string, volumes?: string[], environment?: Record<string, string>, command?: string[], depends_on?: string[], read_only?: boolean, tmpfs?: string[] }
const compose = parseYaml(readFileSync(path.join(ROOT, 'docker-compose.yml'), 'utf8')) as { services: Record<string, Service>, volumes?: Record<string, unknown> }
const services = compose.services
const toolport = services['toolport']!

/** Bind mounts (`./host:/container[:ro]`) of a service, as [host, container]. */
const binds = (service: Service) => (service.volumes ?? []).filter((v) => v.startsWith('./')).map((v) => v.split(':') as [string, string])
const configOf = () => {
  const [host] = binds(toolport).find(([, target]) => target === '/etc/toolport/toolport.yaml') ?? []
  expect(host).toBeDefined()
  return parseConfig(parseYaml(readFileSync(path.join(ROOT, host!), 'utf8')))
}

describe('docker-compose.yml', () => {
  it('builds toolport from this Dockerfile beside a search backend and an MCP server', () => {
    expect(toolport.build).toBe('.')
    expect(Object.keys(services).sort()).toEqual(['mcp-everything', 'searxng', 'toolport'])
    expect(toolport.depends_on?.sort()).toEqual(['mcp-everything', 'searxng'])
  })

  it('mounts only files that exist, and named volumes that are declared', () => {
    for (const service of Object.values(services)) {
      for (const [host] of binds(service)) expect(existsSync(path.join(ROOT, host)), host).toBe(true)
      for (const volume of (service.volumes ?? []).filter((v) => !v.startsWith('./'))) expect(compose.volumes ?? {}).toHaveProperty(volume.split(':')[0]!)
    }
  })

  it('runs toolport read-only with a writable workspace volume and /tmp', () => {
    const config = configOf()
    expect(toolport.read_only).toBe(true)
    expect(toolport.tmpfs).toContain('/tmp')
    expect(toolport.volumes?.some((v) => v.endsWith(`:${config.workspaces.root}`))).toBe(true)
  })

  it('mounts a config that passes validation, with tokens since it listens on 0.0.0.0', () => {
    const config = configOf()
    expect(config.server.host).toBe('0.0.0.0')
    expect(config.auth.tokens.length).toBeGreaterThan(0)
  })

  it('points web_search at the SearXNG service, which serves JSON', () => {
    const endpoint = new URL(configOf().tools.web_search.endpoint ?? '')
    expect(endpoint.hostname).toBe('searxng')
    const [settingsFile] = binds(services['searxng']!).find(([, target]) => target === services['searxng']!.environment?.['SEARXNG_SETTINGS_PATH']) ?? []
    const settings = parseYaml(readFileSync(path.join(ROOT, settingsFile ?? 'missing'), 'utf8')) as { search: { formats: string[] } }
    expect(settings.search.formats).toContain('json')
  })

  it('points an MCP server at the example MCP service over HTTP on the port it listens on', () => {
    const servers = Object.values(configOf().tools.mcp_servers)
    expect(servers).toHaveLength(1)
    const url = new URL(servers[0]!.url ?? '')
    const mcp = services[url.hostname]!
    expect(mcp.command).toContain('streamableHttp')
    expect(url.port).toBe(mcp.environment?.['PORT'])
    expect(url.pathname).toBe('/mcp')
  })
})
