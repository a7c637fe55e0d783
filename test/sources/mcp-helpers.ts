/** Shared pieces of the MCP client tests: fixture paths, stdio configs, and reading tool results through the service. */
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { buildTestApp, exec } from '../helper.ts'

export type App = Awaited<ReturnType<typeof buildTestApp>>

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..')
export const FIXTURE = path.join(ROOT, 'test', 'fixtures', 'mcp-server.mjs')
/** The published server's bin, run with this node: no npx, no download. */
export const EVERYTHING = path.join(ROOT, 'node_modules', '@modelcontextprotocol', 'server-everything', 'dist', 'index.js')

/** A stdio server entry running the project's fixture. */
export function stdioFixture (extra: Record<string, unknown> = {}, env: Record<string, string> = {}): Record<string, unknown> {
  return { command: process.execPath, args: [FIXTURE, 'stdio'], env, ...extra }
}

/** An app (sandbox none) with these MCP servers. */
export function mcpApp (servers: Record<string, unknown>, overrides: Record<string, unknown> = {}): Promise<App> {
  return buildTestApp({ tools: { mcp_servers: servers }, ...overrides })
}

/** The text items of an MCP tool's result as the service returns it. */
export function textOf (result: { content?: Array<{ type: string, text?: string }> }): string {
  return (result.content ?? []).map((item) => item.text ?? '').join('')
}

/** The fixture's `stats` (through the service). */
export async function statsOf (app: App, server: string): Promise<{ cancelled: number, calls: number, sessions: number, pid: number, listings: number }> {
  const answer = await exec(app, `${server}__stats`, {})
  if (answer.status !== 200) throw new Error(`stats failed: ${JSON.stringify(answer.body)}`)
  return answer.body.result.structuredContent
}

/** Names in the native catalog, with an optional `allowed` query. */
export async function catalogNames (app: App, allowed?: string): Promise<string[]> {
  const url = allowed === undefined ? '/v1/tools' : `/v1/tools?allowed=${encodeURIComponent(allowed)}`
  return (await app.inject({ method: 'GET', url })).json().tools.map((t: { name: string }) => t.name)
}
