/**
 * The interfaces today's agent clients use: OpenAI Chat Completions with
 * strict mode, OpenAI Responses, Anthropic's user message, catalog ETags, and
 * each tool as an OpenAPI operation. Shapes are held against the `openai` and
 * `@anthropic-ai/sdk` packages' own types (checked by the typecheck).
 */
import SwaggerParser from '@apidevtools/swagger-parser'
import type { MessageParam } from '@anthropic-ai/sdk/resources/messages/messages'
import type { ChatCompletionTool } from 'openai/resources/chat/completions/completions'
import type { FunctionTool, ResponseInputItem } from 'openai/resources/responses/responses'
import { describe, expect, it } from 'vitest'
import { buildTestApp } from '../helper.ts'
import { FIXTURE } from '../sources/mcp-helpers.ts'
import { describeJson, placeTool, shTool, toolsDir } from '../sources/helpers.ts'
import net from 'node:net'
import { listening } from '../support/listening.ts'
import { strictViolations } from '../support/openai-strict.ts'

const ALL = { tools: { builtin: ['*'] } }

describe('OpenAI Chat Completions, strict mode', () => {
  it('makes every built-in strict where it can, each passing OpenAI\'s rules; the others stay as they are with strict false', async () => {
    const app = await buildTestApp(ALL)
    const response = await app.inject({ url: '/v1/tools?format=openai&strict=true' })
    expect(response.statusCode).toBe(200)
    const tools = response.json().tools as ChatCompletionTool[]
    expect(tools.length).toBeGreaterThan(10)
    for (const tool of tools) {
      if (tool.type !== 'function') throw new Error('not a function tool')
      expect(typeof tool.function.strict).toBe('boolean')
      if (tool.function.strict === true) expect(strictViolations(tool.function.parameters), tool.function.name).toEqual([])
    }
    // Every built-in has a strict form but web_fetch, whose headers are a map of free names: it is listed unchanged.
    const loose = tools.filter((tool) => tool.type === 'function' && tool.function.strict !== true)
    expect(loose.map((tool) => tool.type === 'function' && tool.function.name)).toEqual(['web_fetch'])
    const native = (await app.inject({ url: '/v1/tools/web_fetch' })).json()
    expect(loose[0]?.type === 'function' && loose[0].function.parameters).toEqual(native.parameters)
    // Without strict=true nothing is rewritten and no strict member is added.
    const plain = (await app.inject({ url: '/v1/tools?format=openai' })).json().tools as ChatCompletionTool[]
    expect(plain.every((tool) => tool.type === 'function' && tool.function.strict === undefined)).toBe(true)
  })

  it('takes null for an optional argument as absent, as a strict-mode model sends it', async () => {
    const app = await buildTestApp()
    await app.inject({ method: 'POST', url: '/v1/tools/write_file/execute', payload: { workspace: 'nulls', arguments: { path: 'a.txt', content: 'one\ntwo\nthree\n' } } })
    const response = await app.inject({
      method: 'POST',
      url: '/v1/tools/read_file/execute',
      payload: { workspace: 'nulls', arguments: JSON.stringify({ path: 'a.txt', offset: null, limit: null }) },
    })
    expect(response.statusCode).toBe(200)
    expect(response.json().result).toEqual({ content: 'one\ntwo\nthree\n' })
    // A required argument sent as null is still refused.
    const refused = await app.inject({ method: 'POST', url: '/v1/tools/read_file/execute', payload: { arguments: { path: null } } })
    expect(refused.json()).toMatchObject({ code: 'InvalidArgs' })
  })

  it('takes null as absent wherever strict mode made an argument nullable: in $defs, array items and anyOf branches', async () => {
    const app = await buildTestApp()
    const parameters = {
      type: 'object',
      required: ['item', 'list'],
      properties: {
        item: { $ref: '#/$defs/Item' },
        list: { type: 'array', items: { type: 'object', properties: { k: { type: 'string' }, v: { type: 'string' } }, required: ['k'] } },
        u: { anyOf: [{ type: 'object', properties: { p: { type: 'string' }, q: { type: 'integer' } }, required: ['p'] }, { type: 'string' }] },
        // References that lead back to the root through two branches each: the search for nulls stops.
        self: { anyOf: [{ $ref: '#' }, { $ref: '#' }] },
      },
      $defs: { Item: { type: 'object', properties: { label: { type: 'string' }, n: { type: 'integer', default: 5 } }, required: ['label'] } },
    }
    app.runtime.registry.setGroup('builtin', 'nested', [{ name: 'nested', description: 'echoes', parameters, source: 'builtin', execute: async (args: unknown) => args }])
    const call = async (args: unknown) => (await app.inject({ method: 'POST', url: '/v1/tools/nested/execute', payload: { arguments: args } })).json()
    expect((await call({ item: { label: 'a', n: null }, list: [] })).result).toEqual({ item: { label: 'a' }, list: [] })
    expect((await call({ item: { label: 'a' }, list: [{ k: 'x', v: null }, { k: 'y', v: 'z' }] })).result).toEqual({ item: { label: 'a' }, list: [{ k: 'x' }, { k: 'y', v: 'z' }] })
    expect((await call({ item: { label: 'a' }, list: [], u: { p: 'x', q: null } })).result).toEqual({ item: { label: 'a' }, list: [], u: { p: 'x' } })
    // Null stays refused where it is required, and where no rewriting made it optional.
    expect(await call({ item: { label: null }, list: [] })).toMatchObject({ code: 'InvalidArgs' })
    expect(await call({ item: { label: 'a' }, list: [], self: { item: 1, list: null } })).toMatchObject({ code: 'InvalidArgs' })
    // Through the references back to the root, and in as many array items as a model sends.
    expect((await call({ item: { label: 'a' }, list: [], self: { item: { label: 'b', n: null }, list: [] } })).result).toEqual({ item: { label: 'a' }, list: [], self: { item: { label: 'b' }, list: [] } })
    app.runtime.registry.setGroup('builtin', 'rows', [{ name: 'rows', description: 'counts', parameters, source: 'builtin', execute: async (args: { list: Array<Record<string, unknown>> }) => ({ rows: args.list.length, with_v: args.list.filter((row) => 'v' in row).length }) }])
    const rows = Array.from({ length: 6000 }, (_, i) => ({ k: `k${i}`, v: null }))
    const counted = await app.inject({ method: 'POST', url: '/v1/tools/rows/execute', payload: { arguments: { item: { label: 'a' }, list: rows } } })
    expect(counted.json().result).toEqual({ rows: 6000, with_v: 0 })
  })
})

describe('OpenAI Responses', () => {
  it('lists flat function tools, strict false unless asked (the Responses API takes an absent strict as true)', async () => {
    const app = await buildTestApp()
    const tools = (await app.inject({ url: '/v1/tools?format=responses' })).json().tools as FunctionTool[]
    expect(tools.find((tool) => tool.name === 'read_file')).toMatchObject({ type: 'function', name: 'read_file', strict: false, parameters: { type: 'object' } })
    const strict = (await app.inject({ url: '/v1/tools?format=responses&strict=true' })).json().tools as FunctionTool[]
    for (const tool of strict) {
      expect(tool.strict, tool.name).toBe(tool.name !== 'web_fetch')
      if (tool.strict === true) expect(strictViolations(tool.parameters)).toEqual([])
    }
  })

  it('runs function_call items and answers function_call_output items keyed by call_id, not the item id', async () => {
    const app = await buildTestApp()
    const calls = [
      { type: 'function_call', id: 'fc_1', call_id: 'call_write', name: 'write_file', arguments: JSON.stringify({ path: 'r.txt', content: 'responses' }) },
      { type: 'function_call', id: 'fc_2', call_id: 'call_read', name: 'read_file', arguments: JSON.stringify({ path: 'r.txt' }) },
      { type: 'function_call', id: 'fc_3', call_id: 'call_missing', name: 'read_file', arguments: JSON.stringify({ path: 'nope.txt' }) },
    ]
    const response = await app.inject({ method: 'POST', url: '/v1/tool-calls', payload: { calls, format: 'responses' } })
    expect(response.statusCode).toBe(200)
    const body = response.json() as { results: Array<{ id: string }>, messages: ResponseInputItem.FunctionCallOutput[] }
    expect(body.results.map((result) => result.id)).toEqual(['call_write', 'call_read', 'call_missing'])
    expect(body.messages.map((message) => [message.type, message.call_id])).toEqual([
      ['function_call_output', 'call_write'], ['function_call_output', 'call_read'], ['function_call_output', 'call_missing'],
    ])
    expect(JSON.parse(body.messages[1]?.output as string)).toEqual({ content: 'responses' })
    expect(JSON.parse(body.messages[2]?.output as string)).toEqual({ error: expect.stringContaining('file not found') })
    // A function_call without call_id is refused by itself.
    const bad = await app.inject({ method: 'POST', url: '/v1/tool-calls', payload: { calls: [{ type: 'function_call', id: 'fc_9', name: 'read_file', arguments: '{}' }] } })
    expect(bad.json().results[0]).toMatchObject({ ok: false, status: 400 })
  })
})

describe('Anthropic', () => {
  it('answers a batch with the one user message that holds the tool_result blocks', async () => {
    const app = await buildTestApp()
    const calls = [{ type: 'tool_use', id: 'toolu_1', name: 'list_directory', input: { path: '.' } }, { type: 'tool_use', id: 'toolu_2', name: 'read_file', input: { path: 'x' } }]
    const body = (await app.inject({ method: 'POST', url: '/v1/tool-calls', payload: { calls, format: 'anthropic' } })).json()
    const message: MessageParam = body.message
    expect(message.role).toBe('user')
    expect(message.content).toEqual(body.messages)
    expect(body.messages.map((block: { tool_use_id: string, is_error: boolean }) => [block.tool_use_id, block.is_error])).toEqual([['toolu_1', false], ['toolu_2', true]])
    // Other formats carry no such member.
    const native = (await app.inject({ method: 'POST', url: '/v1/tool-calls', payload: { calls } })).json()
    expect(native.message).toBeUndefined()
  })
})

describe('catalog ETags', () => {
  it('answers 304 to a matching If-None-Match; the tag depends on format, filters and scope, and changes with the catalog', async () => {
    const app = await buildTestApp()
    const first = await app.inject({ url: '/v1/tools' })
    const tag = first.headers['etag'] as string
    expect(tag).toMatch(/^"[A-Za-z0-9_-]+"$/)
    const again = await app.inject({ url: '/v1/tools', headers: { 'if-none-match': tag } })
    expect(again.statusCode).toBe(304)
    expect(again.body).toBe('')
    // No Content-Length of a body it does not have (RFC 9110: a 304's would be the 200's).
    expect([again.headers['content-length'], again.headers['content-type']]).toEqual([undefined, undefined])
    expect((await app.inject({ url: '/v1/tools', headers: { 'if-none-match': '"other", ' + tag } })).statusCode).toBe(304)
    expect((await app.inject({ url: '/v1/tools?format=openai', headers: { 'if-none-match': tag } })).statusCode).toBe(200)
    expect((await app.inject({ url: '/v1/tools?allowed=read_*', headers: { 'if-none-match': tag } })).statusCode).toBe(200)
    const one = await app.inject({ url: '/v1/tools/read_file' })
    expect((await app.inject({ url: '/v1/tools/read_file', headers: { 'if-none-match': one.headers['etag'] as string } })).statusCode).toBe(304)
    // The catalog changes: the old tag no longer matches.
    app.runtime.registry.setGroup('builtin', 'extra', [{ name: 'extra_tool', description: 'x', parameters: { type: 'object', properties: {} }, source: 'builtin', execute: async () => 'x' }])
    const changed = await app.inject({ url: '/v1/tools', headers: { 'if-none-match': tag } })
    expect(changed.statusCode).toBe(200)
    expect(changed.headers['etag']).not.toBe(tag)
  })
})

describe('each tool as an OpenAPI operation', () => {
  it('describes one invoke operation per tool of the caller\'s catalog, valid OpenAPI 3.1, and every operation can be invoked', async () => {
    const app = await buildTestApp({ auth: { tokens: [{ token: 'reader', tenant: 'acme', allowed_tools: ['read_*', 'list_*', 'write_file'] }] } })
    const headers = { authorization: 'Bearer reader' }
    const document = (await app.inject({ url: '/v1/openapi/tools.json', headers })).json()
    const parsed = await SwaggerParser.validate(structuredClone(document)) as { paths: Record<string, { post: { operationId: string, summary: string } }> }
    const operations = Object.entries(parsed.paths).map(([route, item]) => ({ route, operationId: item.post.operationId }))
    expect(operations.map((op) => op.operationId).sort()).toEqual(['list_directory', 'read_file', 'write_file'])
    const argumentsFor: Record<string, unknown> = { write_file: { path: 'o.txt', content: 'openapi' }, read_file: { path: 'o.txt' }, list_directory: { path: '.' } }
    for (const op of operations.sort((a) => (a.operationId === 'write_file' ? -1 : 1))) {
      const response = await app.inject({ method: 'POST', url: op.route, headers: { ...headers, 'toolport-workspace': 'openapi' }, payload: argumentsFor[op.operationId] as object })
      expect(response.statusCode, op.operationId).toBe(200)
    }
    const read = await app.inject({ method: 'POST', url: '/v1/tools/read_file/invoke', headers: { ...headers, 'toolport-workspace': 'openapi' }, payload: { path: 'o.txt' } })
    expect(read.json()).toEqual({ content: 'openapi' })
    // Errors are problem+json; a tool outside the scope is 403.
    const missing = await app.inject({ method: 'POST', url: '/v1/tools/read_file/invoke', headers, payload: { path: 'none' } })
    expect(missing.headers['content-type']).toContain('application/problem+json')
    expect(missing.json()).toMatchObject({ code: 'FileNotFound', tool: 'read_file' })
    expect((await app.inject({ method: 'POST', url: '/v1/tools/exec_shell/invoke', headers, payload: { command: 'true' } })).json()).toMatchObject({ code: 'PermissionDenied' })
  })

  it('works as Open WebUI calls it: the workspace as a query parameter it also copies into the body, which is not passed on to the tool', async () => {
    const dir = await toolsDir()
    // Prints the arguments it was given; its schema, as zod writes them, takes no other property.
    await placeTool(dir, 'strict', shTool(JSON.stringify({ name: 'strict_args', description: 'x', parameters: { type: 'object', properties: { a: { type: 'string' } }, additionalProperties: false } }), 'printf "%s" "$1"'))
    const app = await buildTestApp({ tools: { builtin: ['*'], dirs: [dir] } })
    await app.runtime.whenReady()
    const document = (await app.inject({ url: '/v1/openapi/tools.json' })).json()
    for (const [route, item] of Object.entries(document.paths as Record<string, { post: { parameters: Array<{ name: string, in: string }> } }>)) {
      expect(item.post.parameters, route).toEqual([expect.objectContaining({ name: 'toolport_workspace', in: 'query' })])
    }
    // The body is required only of a tool that requires arguments.
    expect(document.paths['/v1/tools/process_list/invoke'].post.requestBody.required).toBe(false)
    expect(document.paths['/v1/tools/read_file/invoke'].post.requestBody.required).toBe(true)
    // What Open WebUI sends for the model's {path, content, toolport_workspace}: the query parameter in the query,
    // and every argument, the query parameter's too, in the body (backend/open_webui/utils/tools.py, execute_tool_server).
    const written = await app.inject({ method: 'POST', url: '/v1/tools/write_file/invoke?toolport_workspace=owui', payload: { path: 'keep.txt', content: 'kept', toolport_workspace: 'owui' } })
    expect(written.statusCode, written.body).toBe(200)
    const read = await app.inject({ method: 'POST', url: '/v1/tools/read_file/invoke?toolport_workspace=owui', payload: { path: 'keep.txt', toolport_workspace: 'owui' } })
    expect(read.json()).toEqual({ content: 'kept' })
    // The body's copy is not an argument: a tool whose schema takes no other property runs, given only its own.
    const strict = await app.inject({ method: 'POST', url: '/v1/tools/strict_args/invoke?toolport_workspace=owui', payload: { a: 'x', toolport_workspace: 'owui' } })
    expect(strict.statusCode, strict.body).toBe(200)
    expect(strict.json()).toEqual({ a: 'x' })
    // A copy the model gave as a number is the query's text all the same.
    const numbered = await app.inject({ method: 'POST', url: '/v1/tools/strict_args/invoke?toolport_workspace=42', payload: { a: 'y', toolport_workspace: 42 } })
    expect(numbered.json()).toEqual({ a: 'y' })
    // Another query parameter (a misspelt one) is refused, not dropped.
    const misspelt = await app.inject({ method: 'POST', url: '/v1/tools/strict_args/invoke?workspace=owui', payload: { a: 'x' } })
    expect(misspelt.statusCode).toBe(400)
    expect(misspelt.json().detail).toMatch(/querystring.*"workspace"/)
    // A process tool, which needs a persistent workspace, has one.
    const listed = await app.inject({ method: 'POST', url: '/v1/tools/process_list/invoke?toolport_workspace=owui', payload: { toolport_workspace: 'owui' } })
    expect(listed.statusCode, listed.body).toBe(200)
    expect(listed.json()).toMatchObject({ processes: [] })
    // No body, or an empty one with its Content-Type, is no arguments.
    expect((await app.inject({ method: 'POST', url: '/v1/tools/process_list/invoke?toolport_workspace=owui' })).statusCode).toBe(200)
    expect((await app.inject({ method: 'POST', url: '/v1/tools/process_list/invoke?toolport_workspace=owui', headers: { 'content-type': 'application/json' }, payload: '' })).statusCode).toBe(200)
    // The header still names it; both naming different ones is refused.
    expect((await app.inject({ method: 'POST', url: '/v1/tools/read_file/invoke', headers: { 'toolport-workspace': 'owui' }, payload: { path: 'keep.txt' } })).json()).toEqual({ content: 'kept' })
    const both = await app.inject({ method: 'POST', url: '/v1/tools/read_file/invoke?toolport_workspace=other', headers: { 'toolport-workspace': 'owui' }, payload: { path: 'keep.txt' } })
    expect(both.statusCode).toBe(400)
    expect(both.json().detail).toMatch(/name different workspaces/)
  })

  it('keeps a schema whose references point into its own $defs resolvable inside the document (Pydantic writes them so)', async () => {
    const app = await buildTestApp({ tools: { mcp_servers: { odd: { command: process.execPath, args: [FIXTURE, 'stdio', 'odd'], internal_only: false } } } })
    await app.runtime.whenReady()
    const document = (await app.inject({ url: '/v1/openapi/tools.json' })).json()
    // `#/$defs/Item` would resolve from the document's root, which has no $defs.
    const dereferenced = await SwaggerParser.dereference(structuredClone(document)) as unknown as { paths: Record<string, { post: { requestBody: { content: { 'application/json': { schema: { properties: { item: { properties: Record<string, unknown>, required: string[] } } } } } } } }> }
    const schema = dereferenced.paths['/v1/tools/odd__nested/invoke']?.post.requestBody.content['application/json'].schema
    expect(schema?.properties.item.required).toEqual(['label'])
    expect(Object.keys(schema?.properties.item.properties ?? {})).toEqual(['label', 'child'])
    await SwaggerParser.validate(structuredClone(document))
    // A schema without references stays inline, as before.
    expect(document.paths['/v1/tools/read_file/invoke'].post.requestBody.content['application/json'].schema.properties).toHaveProperty('path')
    const item = { label: 'a', child: { label: 'b', child: null } }
    const answer = await app.inject({ method: 'POST', url: '/v1/tools/odd__nested/invoke', payload: { item } })
    expect(JSON.parse(answer.json().content[0].text)).toEqual({ item })
    // An answer nested past what can be serialised again is a failed call, said so, never a crash.
    const deep = await app.inject({ method: 'POST', url: '/v1/tools/odd__deep_result/invoke', payload: {} })
    expect(deep.statusCode).toBe(500)
    expect(deep.json()).toMatchObject({ code: 'ExecutionFailed', detail: 'the tool\'s result is nested more than 200 levels deep' })
    // A result its server's own SDK refuses to send (InvalidParams, as for bad arguments) is the server's failure, not the caller's.
    const refused = await app.inject({ method: 'POST', url: '/v1/tools/odd__array_result/invoke', payload: {} })
    expect(refused.statusCode).toBe(500)
    expect(refused.json()).toMatchObject({ code: 'ExecutionFailed', detail: expect.stringMatching(/^MCP server odd: Invalid tools\/call result/) })
  })
})

describe('POST /v1/tools/{name}/invoke, as its OpenAPI document says', () => {
  it('answers a text result as the JSON string it is, as every other result', async () => {
    const dir = await toolsDir()
    await placeTool(dir, 'texty', shTool(describeJson('texty'), 'case "$1" in *str*) echo \'"a json string"\';; *empty*) ;; *) echo "plain text, not json";; esac'))
    const app = await buildTestApp({ tools: { dirs: [dir] } })
    for (const [mode, result] of [['text', 'plain text, not json\n'], ['str', 'a json string'], ['empty', '']] as const) {
      const answer = await app.inject({ method: 'POST', url: '/v1/tools/texty/invoke', payload: { mode } })
      expect(answer.statusCode, answer.body).toBe(200)
      expect(answer.headers['content-type']).toMatch(/^application\/json/)
      expect(answer.json()).toBe(result)
    }
  })

  /** An invoke sent as raw bytes (`headers` are lines of Latin-1 text, as they go on the wire), and the whole answer. */
  async function rawInvoke (base: string, tool: string, headers: string, body: string): Promise<string> {
    const { port } = new URL(base)
    const payload = Buffer.from(body)
    return new Promise<string>((resolve, reject) => {
      const socket = net.connect(Number(port), '127.0.0.1', () => {
        socket.write(Buffer.from(`POST /v1/tools/${tool}/invoke HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n${headers}Content-Length: ${payload.length}\r\nConnection: close\r\n\r\n`, 'latin1'))
        // Not ended: a client that closes its side has gone, and its call is cancelled. `Connection: close` ends it.
        socket.write(payload)
      })
      let answer = ''
      socket.on('data', (chunk: Buffer) => { answer += chunk.toString('utf8') })
      socket.on('close', () => resolve(answer))
      socket.on('error', reject)
    })
  }

  it('refuses Toolport-Workspace given twice (Node would join the two into a third workspace)', async () => {
    const app = await buildTestApp()
    const raw = await rawInvoke(await listening(app), 'exec_shell', 'Toolport-Workspace: a\r\ntoolport-workspace: b\r\n', JSON.stringify({ command: 'pwd' }))
    expect(raw).toMatch(/^HTTP\/1\.1 400 /)
    expect(raw).toContain('Toolport-Workspace must be given once')
    expect((await app.inject({ method: 'GET', url: '/v1/workspaces/a,%20b' })).statusCode).toBe(404)
  })

  it('reads Toolport-Workspace as UTF-8, as an id in a URL or a body (Node reads header bytes as Latin-1), and refuses other bytes', async () => {
    const app = await buildTestApp()
    const written = await app.inject({ method: 'POST', url: '/v1/tools/write_file/execute', payload: { workspace: 'café', arguments: { path: 'x.txt', content: 'in café' } } })
    expect(written.statusCode).toBe(200)
    const base = await listening(app)
    const utf8 = Buffer.from('café').toString('latin1')
    const raw = await rawInvoke(base, 'read_file', `Toolport-Workspace: ${utf8}\r\n`, JSON.stringify({ path: 'x.txt' }))
    expect(raw).toMatch(/^HTTP\/1\.1 200 /)
    expect(raw).toContain('in café')
    expect((await app.inject({ method: 'GET', url: `/v1/workspaces/${encodeURIComponent('cafÃ©')}` })).statusCode).toBe(404)
    const latin1 = await rawInvoke(base, 'read_file', 'Toolport-Workspace: caf\u00e9\r\n', JSON.stringify({ path: 'x.txt' }))
    expect(latin1).toMatch(/^HTTP\/1\.1 400 /)
    expect(latin1).toContain('Toolport-Workspace must be UTF-8')
  })
})
