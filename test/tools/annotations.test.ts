/**
 * The MCP hints of every built-in, as the native and mcp catalogs and /mcp
 * publish them: the contract's readOnlyHint and openWorldHint, and the
 * destructiveHint and idempotentHint each tool declares beside its schema.
 */
import { describe, expect, it } from 'vitest'
import { buildTestApp } from '../helper.ts'

type Hints = [readOnly: boolean, destructive: boolean, idempotent: boolean, openWorld: boolean]

/** Every built-in (the clawft set, omega's and message): [readOnlyHint, destructiveHint, idempotentHint, openWorldHint]. */
const EXPECTED: Record<string, Hints> = {
  read_file: [true, false, true, false],
  list_directory: [true, false, true, false],
  memory_read: [true, false, true, false],
  read: [true, false, true, false],
  web_search: [true, false, true, true],
  write_file: [false, true, true, false],
  write: [false, true, true, false],
  edit_file: [false, true, false, false],
  edit: [false, true, false, false],
  memory_write: [false, true, false, false],
  exec_shell: [false, true, false, false],
  spawn: [false, true, false, false],
  bash: [false, true, false, false],
  web_fetch: [false, true, false, true],
  message: [false, false, false, true],
  process_output: [true, false, true, false],
  process_list: [true, false, true, false],
  process_start: [false, true, false, false],
  process_input: [false, true, false, false],
  process_kill: [false, true, false, false],
}

const asObject = ([readOnlyHint, destructiveHint, idempotentHint, openWorldHint]: Hints) => ({ readOnlyHint, destructiveHint, idempotentHint, openWorldHint })

async function everyBuiltin () {
  return buildTestApp({ tools: { builtin: ['*'] }, channels: { ops: { webhook: 'http://127.0.0.1:9/hook' } } })
}

describe('annotations of the built-ins', () => {
  it('are the four hints, as the table says, in the native and mcp catalogs', async () => {
    const app = await everyBuiltin()
    for (const format of ['native', 'mcp']) {
      const tools = (await app.inject({ method: 'GET', url: `/v1/tools?format=${format}` })).json().tools as Array<{ name: string, annotations: unknown }>
      expect(tools.map((tool) => tool.name).sort()).toEqual(Object.keys(EXPECTED).sort())
      const published = Object.fromEntries(tools.map((tool) => [tool.name, tool.annotations]))
      expect(published).toEqual(Object.fromEntries(Object.entries(EXPECTED).map(([name, hints]) => [name, asObject(hints)])))
    }
    // One tool, as GET /v1/tools/{name} answers it, carries them too.
    for (const [name, hints] of Object.entries(EXPECTED)) {
      expect((await app.inject({ method: 'GET', url: `/v1/tools/${name}` })).json().annotations, name).toEqual(asObject(hints))
    }
  })
})
