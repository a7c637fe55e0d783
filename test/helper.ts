/**
 * Test helpers: an app built from config overrides with its own temporary
 * workspace root, closed (and the root removed) after each test.
 */
import type { FastifyInstance } from 'fastify'
import { buildApp } from '../src/app.ts'
import { parseConfig } from '../src/config.ts'
import { onCleanup, tempDir } from './support/temp.ts'

export { onCleanup, tempDir }

type Overrides = Record<string, unknown>

/** Builds an app with `overrides` merged over a test config; ready when it resolves. */
export async function buildTestApp (overrides: Overrides = {}): Promise<FastifyInstance> {
  const root = await tempDir('toolport-ws-')
  const workspaces = { root, ...(overrides['workspaces'] as Overrides | undefined) }
  const sandbox = { mode: 'none', ...(overrides['sandbox'] as Overrides | undefined) }
  const config = parseConfig({ ...overrides, workspaces, sandbox })
  const app = await buildApp(config, { defaultMetrics: false })
  onCleanup(() => app.close())
  await app.runtime.whenReady()
  return app
}

/** POST /v1/tools/{name}/execute through inject. */
export async function exec (app: FastifyInstance, tool: string, args: unknown, extra: Overrides = {}) {
  const response = await app.inject({ method: 'POST', url: `/v1/tools/${encodeURIComponent(tool)}/execute`, payload: { arguments: args, ...extra } })
  return { status: response.statusCode, body: response.json(), headers: response.headers }
}
