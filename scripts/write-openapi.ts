/**
 * Writes the OpenAPI document of a default-configured app to
 * openapi/openapi.json (`npm run openapi`). A test fails when the committed
 * document and the served one drift apart.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { buildApp } from '../src/app.ts'
import { parseConfig } from '../src/config.ts'

const root = await mkdtemp(path.join(os.tmpdir(), 'toolport-openapi-'))
const app = await buildApp(parseConfig({ workspaces: { root }, sandbox: { mode: 'none' } }), { defaultMetrics: false })
const target = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'openapi', 'openapi.json')
await writeFile(target, `${JSON.stringify(await app.openApiDocument(), null, 2)}\n`)
await app.close()
await rm(root, { recursive: true, force: true })
process.stdout.write(`wrote ${target}\n`)
