/**
 * /mcp's tool metadata and structured results, through the MCP SDK's own
 * client over a real socket: tools/list carries annotations and the
 * built-ins' outputSchema, and every tools/call answers structuredContent
 * that the client validates against that schema (it throws when a result
 * does not match), with the same JSON as text. Non-object results (an
 * executable's string or array) come as `{result}`; errors stay isError
 * without structuredContent.
 */
import { Client } from '@modelcontextprotocol/sdk/client/index.js'
import { describe, expect, it } from 'vitest'
import { buildTestApp } from '../helper.ts'
import { listening, mcpClient } from '../support/listening.ts'
import { describeJson, placeTool, shTool, toolsDir } from '../sources/helpers.ts'

type App = Awaited<ReturnType<typeof buildTestApp>>
type CallResult = Awaited<ReturnType<Client['callTool']>>

/** A limit low enough for a modest file or output to be cut on /mcp (there is no per-call limit there). */
const LIMIT = 1024

async function session (overrides: Record<string, unknown> = {}): Promise<{ app: App, client: Client }> {
  const app = await buildTestApp({ tools: { builtin: ['*'] }, limits: { max_result_bytes: LIMIT }, ...overrides })
  return { app, client: await mcpClient(await listening(app)) }
}

const textOf = (result: CallResult): string => (result.content as Array<{ text?: string }>).map((c) => c.text ?? '').join('')

/** A successful call's structuredContent, after checking that the text is its JSON. */
async function structured (client: Client, name: string, args: Record<string, unknown>): Promise<Record<string, any>> {
  const result = await client.callTool({ name, arguments: args })
  expect(result.isError, textOf(result)).toBeFalsy()
  expect(result.structuredContent).toBeDefined()
  expect(JSON.parse(textOf(result))).toEqual(result.structuredContent)
  return result.structuredContent as Record<string, any>
}

describe('/mcp: annotations and structured results', () => {
  it('lists every built-in with its four hints and an object outputSchema that admits the truncation envelope', async () => {
    const { client } = await session()
    const { tools } = await client.listTools()
    expect(tools).toHaveLength(19)
    for (const tool of tools) {
      expect(Object.keys(tool.annotations ?? {}).sort(), tool.name).toEqual(['destructiveHint', 'idempotentHint', 'openWorldHint', 'readOnlyHint'])
      expect(tool.outputSchema?.type, tool.name).toBe('object')
      expect(tool.outputSchema?.['anyOf'], tool.name).toContainEqual(expect.objectContaining({ required: ['_truncated_json'] }))
    }
    expect(tools.find((tool) => tool.name === 'read_file')?.annotations).toEqual({ readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false })
    expect(tools.find((tool) => tool.name === 'exec_shell')?.annotations).toEqual({ readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: false })
  })

  it('answers built-in calls, whole and cut, with structuredContent the SDK client validates against outputSchema', async () => {
    const { client } = await session()
    // The client validates structuredContent only for tools it has seen listed with an outputSchema.
    const { tools } = await client.listTools()
    const validated = tools.filter((tool) => tool.outputSchema !== undefined).map((tool) => tool.name)
    expect(validated).toEqual(expect.arrayContaining(['write_file', 'read_file', 'list_directory', 'memory_read', 'exec_shell', 'bash', 'write', 'read']))
    expect(await structured(client, 'write_file', { path: 'notes/a.txt', content: 'one\ntwo\n' })).toEqual({ message: 'Successfully wrote 8 bytes to notes/a.txt' })
    expect(await structured(client, 'read_file', { path: 'notes/a.txt', offset: 2 })).toEqual({ content: 'two\n', offset: 2, lines: 1 })
    expect(await structured(client, 'list_directory', { path: 'notes' })).toEqual({ entries: [{ name: 'a.txt', is_dir: false, size: 8 }] })
    expect(await structured(client, 'memory_read', {})).toEqual({ content: '', message: 'No memory file found' })
    expect(await structured(client, 'exec_shell', { command: 'echo hi' })).toMatchObject({ exit_code: 0, stdout: 'hi\n', stderr: '' })
    expect(await structured(client, 'bash', { command: 'exit 2' })).toEqual({ content: 'exit code: 2', is_error: true, exit_code: 2 })

    // Cut by the tool: the process result keeps its shape and says so.
    expect(await structured(client, 'exec_shell', { command: 'head -c 4000 /dev/zero | tr "\\0" o' })).toMatchObject({ stdout_truncated: true, stdout_bytes: 4000 })
    for (let i = 0; i < 40; i++) await structured(client, 'write_file', { path: `many/file-${i}.txt`, content: 'x' })
    expect(await structured(client, 'list_directory', { path: 'many' })).toMatchObject({ truncated: true, total_entries: 40 })
    // Cut to the limit by the execution path: the envelope.
    await structured(client, 'write', { file_path: 'big.txt', content: 'b'.repeat(4000) })
    // Read in part (the file is larger than the limit): how large its whole result would be is not known, and not said.
    expect(await structured(client, 'read_file', { path: 'big.txt' })).toEqual({ _truncated_json: expect.stringMatching(/^\{"content":"bbb/) })
    expect(await structured(client, 'read', { file_path: 'big.txt' })).toMatchObject({ _truncated_json: expect.any(String) })
  })

  it('keeps errors as isError without structuredContent', async () => {
    const { client } = await session()
    await client.listTools()
    const missing = await client.callTool({ name: 'read_file', arguments: { path: 'nope.txt' } })
    expect(missing.isError).toBe(true)
    expect(missing.structuredContent).toBeUndefined()
    expect(textOf(missing)).toMatch(/nope\.txt/)
  })

  it('wraps an executable result that is not an object as {result}, its text unchanged', async () => {
    const dir = await toolsDir()
    await placeTool(dir, 'words', shTool(describeJson('words'), 'printf "plain words"'))
    await placeTool(dir, 'list', shTool(describeJson('list'), 'printf "[1, 2, 3]"'))
    await placeTool(dir, 'obj', shTool(describeJson('obj'), 'printf \'{"ok": true}\''))
    const { client } = await session({ tools: { builtin: [], dirs: [dir] } })
    const { tools } = await client.listTools()
    // Executables declare no result schema, so none is published.
    expect(tools.map((tool) => [tool.name, tool.outputSchema])).toEqual([['list', undefined], ['obj', undefined], ['words', undefined]])
    const words = await client.callTool({ name: 'words', arguments: {} })
    expect(words.structuredContent).toEqual({ result: 'plain words' })
    expect(textOf(words)).toBe('plain words')
    const list = await client.callTool({ name: 'list', arguments: {} })
    expect(list.structuredContent).toEqual({ result: [1, 2, 3] })
    expect(textOf(list)).toBe('[1,2,3]')
    const obj = await client.callTool({ name: 'obj', arguments: {} })
    expect(obj.structuredContent).toEqual({ ok: true })
    expect(textOf(obj)).toBe('{"ok":true}')
  })
})
