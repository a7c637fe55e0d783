/**
 * The MCP hints of tools from other sources: an upstream MCP server's
 * annotations passed on (the fixture server, over stdio), an executable's
 * from `--describe`, and MCP's defaults for every hint a source leaves out.
 */
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { parseConfig } from '../../src/config.ts'
import type { AnyTool } from '../../src/execution/tool.ts'
import { createRunner } from '../../src/sandbox/index.ts'
import { ExecutableSource } from '../../src/sources/executables.ts'
import { buildTestApp, onCleanup } from '../helper.ts'
import { capturingLogger, describeJson, placeTool, shTool, toolsDir } from './helpers.ts'
import { stdioFixture } from './mcp-helpers.ts'

type App = Awaited<ReturnType<typeof buildTestApp>>

/** MCP's reading of a hint nobody gave. */
const DEFAULTS = { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: true }

async function annotationsIn (app: App, format: 'native' | 'mcp'): Promise<Record<string, unknown>> {
  const tools = (await app.inject({ method: 'GET', url: `/v1/tools?format=${format}` })).json().tools as Array<{ name: string, annotations: unknown }>
  return Object.fromEntries(tools.map((tool) => [tool.name, tool.annotations]))
}

describe('annotations from MCP servers and executables', () => {
  it("passes on an upstream MCP server's hints, and MCP's defaults for those it leaves out", async () => {
    const app = await buildTestApp({ tools: { builtin: [], mcp_servers: { fx: stdioFixture({ internal_only: false }) } } })
    for (const format of ['native', 'mcp'] as const) {
      const hints = await annotationsIn(app, format)
      // echo gives all four (and a title, which is not one of them).
      expect(hints['fx__echo']).toEqual({ readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false })
      // add gives two.
      expect(hints['fx__add']).toEqual({ ...DEFAULTS, readOnlyHint: true, openWorldHint: false })
      // fail gives none.
      expect(hints['fx__fail']).toEqual(DEFAULTS)
    }
  })

  it("reads an executable's hints from --describe; one without them gets MCP's defaults", async () => {
    const dir = await toolsDir()
    const describe = (name: string, annotations?: unknown) => JSON.stringify({ ...JSON.parse(describeJson(name)), ...(annotations === undefined ? {} : { annotations }) })
    await placeTool(dir, 'lookup', shTool(describe('lookup', { readOnlyHint: true, idempotentHint: true, openWorldHint: false, title: 'Look up' }), 'echo {}'))
    await placeTool(dir, 'plain', shTool(describe('plain'), 'echo {}'))
    const app = await buildTestApp({ tools: { builtin: [], dirs: [dir] } })
    for (const format of ['native', 'mcp'] as const) {
      expect(await annotationsIn(app, format)).toEqual({
        lookup: { readOnlyHint: true, destructiveHint: true, idempotentHint: true, openWorldHint: false },
        plain: DEFAULTS,
      })
    }
  })

  it('skips an executable whose annotations are not an object of boolean hints, saying why', async () => {
    const dir = await toolsDir()
    const describe = (name: string, annotations: unknown) => JSON.stringify({ ...JSON.parse(describeJson(name)), annotations })
    await placeTool(dir, 'stringly', shTool(describe('stringly', { readOnlyHint: 'yes' }), 'true'))
    await placeTool(dir, 'listed', shTool(describe('listed', ['readOnlyHint']), 'true'))
    await placeTool(dir, 'good', shTool(describe('good', { destructiveHint: false }), 'true'))
    const { log, lines } = capturingLogger()
    const runner = await createRunner(parseConfig({ sandbox: { mode: 'none' } }).sandbox, { log })
    let published: AnyTool[] = []
    const source = new ExecutableSource({ dirs: [dir], stub: false, timeoutSeconds: 1, runner, log, onChange: (tools) => { published = tools } })
    onCleanup(async () => source.close())
    await source.rescan()
    expect(published.map((tool) => [tool.name, tool.annotations])).toEqual([['good', { destructiveHint: false }]])
    expect(Object.fromEntries(lines.map((line) => [path.basename(String(line['file'])), line['reason']]))).toEqual({
      stringly: 'annotations.readOnlyHint must be true or false',
      listed: 'annotations must be an object of MCP hints',
    })
  })
})
