/**
 * Every built-in's real results, through the one execution path, held
 * against the `outputSchema` the mcp catalog publishes for it: whole
 * results, results the tool cut itself (a page, a listing, a process's
 * output, omega's notices), and results cut to the result limit (the
 * `_truncated_json` envelope).
 */
import { Ajv, type ValidateFunction } from 'ajv'
import * as ajvFormats from 'ajv-formats'
import type { FastifyInstance } from 'fastify'
import { describe, expect, it } from 'vitest'
import { buildTestApp, exec } from '../helper.ts'
import { startHttpServer } from '../support/servers.ts'

const addFormats = ajvFormats.default as unknown as (ajv: Ajv) => Ajv

type Result = Record<string, any>

interface Env {
  /** Runs a call in the test's workspace; answers its result once it has passed the tool's outputSchema. */
  run: (tool: string, args: Record<string, unknown>, maxResultBytes?: number) => Promise<{ result: Result, truncated: boolean }>
  /** The same, in an app built with other settings. */
  elsewhere: (overrides: Record<string, unknown>) => Promise<Env['run']>
  base: string
}

const ENVELOPE = { _truncated_json: expect.any(String), _original_bytes: expect.any(Number) }
/** The envelope of a result the tool gave only the start of (it read a bounded part): its whole size is not known. */
const PARTIAL = { _truncated_json: expect.any(String) }
/** A path of about 400 characters: a message that names it does not fit 256 bytes. */
const LONG_PATH = `${'d'.repeat(120)}/${'e'.repeat(120)}/${'f'.repeat(120)}/file.txt`

/** A local far end: a webhook sink, a SearXNG-like search, and pages to fetch. */
async function farEnd () {
  return startHttpServer((request, response) => {
    if (request.url.startsWith('/hook')) {
      response.writeHead(204).end()
    } else if (request.url.startsWith('/search')) {
      const results = Array.from({ length: 8 }, (_, i) => ({ title: `Result ${i}`, url: `https://example.org/${i}`, content: `snippet ${i} `.repeat(20) }))
      response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ results }))
    } else {
      const size = Number(new URL(request.url, 'http://x').searchParams.get('size') ?? '20')
      response.writeHead(200, { 'content-type': 'text/plain' }).end('p'.repeat(size))
    }
  })
}

async function runnerOf (app: FastifyInstance): Promise<Env['run']> {
  const tools = (await app.inject({ method: 'GET', url: '/v1/tools?format=mcp' })).json().tools as Array<{ name: string, outputSchema?: Record<string, unknown> }>
  const ajv = new Ajv({ allErrors: true, strict: true, strictTypes: false })
  addFormats(ajv)
  const validators = new Map<string, ValidateFunction>(tools.flatMap((tool) => (tool.outputSchema ? [[tool.name, ajv.compile(tool.outputSchema)]] : [])))
  const created = await app.inject({ method: 'POST', url: '/v1/workspaces', payload: {} })
  const workspace = created.json().id as string
  return async (tool, args, maxResultBytes) => {
    const answer = await exec(app, tool, args, { workspace, ...(maxResultBytes === undefined ? {} : { max_result_bytes: maxResultBytes }) })
    expect(answer.status, JSON.stringify(answer.body)).toBe(200)
    const validate = validators.get(tool)
    expect(validate, `${tool} has an outputSchema`).toBeDefined()
    const valid = validate?.(answer.body.result)
    expect(valid, `${tool} ${JSON.stringify(args).slice(0, 100)}: ${JSON.stringify(validate?.errors)}`).toBe(true)
    return { result: answer.body.result, truncated: answer.body.truncated }
  }
}

const CASES: Record<string, (env: Env) => Promise<void>> = {
  async read_file ({ run }) {
    await run('write_file', { path: 'lines.txt', content: 'one\ntwo\nthree\n' })
    expect((await run('read_file', { path: 'lines.txt' })).result).toEqual({ content: 'one\ntwo\nthree\n' })
    expect((await run('read_file', { path: 'lines.txt', offset: 2, limit: 1 })).result).toEqual({ content: 'two\n', offset: 2, lines: 1, next_offset: 3 })
    expect((await run('read_file', { path: 'lines.txt', offset: 3 })).result).toEqual({ content: 'three\n', offset: 3, lines: 1 })
    await run('write_file', { path: 'long.txt', content: `${'x'.repeat(5000)}\nnext\n` })
    const cutLine = await run('read_file', { path: 'long.txt', offset: 1 }, 300)
    expect(cutLine.result).toMatchObject({ offset: 1, lines: 1, next_offset: 2, line_truncated: true })
    expect(cutLine.truncated).toBe(true)
    expect(await run('read_file', { path: 'long.txt' }, 300)).toEqual({ result: PARTIAL, truncated: true })
    // A file the limit (and a byte) carries whole: the size of the whole result is known.
    expect(await run('read_file', { path: 'lines.txt' }, 256)).toEqual({ result: { content: expect.any(String) }, truncated: false })
  },
  async write_file ({ run }) {
    expect((await run('write_file', { path: 'a.txt', content: 'hello' })).result).toEqual({ message: 'Successfully wrote 5 bytes to a.txt' })
    expect(await run('write_file', { path: LONG_PATH, content: 'hello' }, 256)).toEqual({ result: ENVELOPE, truncated: true })
  },
  async edit_file ({ run }) {
    await run('write_file', { path: 'a.txt', content: 'hello world' })
    expect((await run('edit_file', { path: 'a.txt', old_text: 'world', new_text: 'there' })).result).toEqual({ message: 'Successfully edited a.txt' })
    await run('write_file', { path: LONG_PATH, content: 'hello world' })
    expect(await run('edit_file', { path: LONG_PATH, old_text: 'world', new_text: 'there' }, 256)).toEqual({ result: ENVELOPE, truncated: true })
  },
  async list_directory ({ run }) {
    for (let i = 0; i < 30; i++) await run('write_file', { path: `many/file-${String(i).padStart(2, '0')}.txt`, content: 'x' })
    await run('write_file', { path: 'many/sub/inner.txt', content: 'x' })
    const whole = await run('list_directory', { path: 'many' })
    expect(whole.result['entries']).toHaveLength(31)
    expect(whole.result['entries']).toContainEqual({ name: 'sub', is_dir: true, size: expect.any(Number) })
    const cut = await run('list_directory', { path: 'many' }, 400)
    expect(cut.result).toMatchObject({ truncated: true, total_entries: 31 })
    expect(cut.truncated).toBe(true)
  },
  async exec_shell ({ run }) {
    expect((await run('exec_shell', { command: 'echo out; echo err >&2; exit 3' })).result).toEqual({ exit_code: 3, stdout: 'out\n', stderr: 'err\n', duration_ms: expect.any(Number) })
    const cut = await run('exec_shell', { command: 'head -c 5000 /dev/zero | tr "\\0" o; head -c 5000 /dev/zero | tr "\\0" e >&2' }, 600)
    expect(cut.result).toMatchObject({ stdout_truncated: true, stdout_bytes: 5000, stderr_truncated: true, stderr_bytes: 5000 })
    expect(cut.truncated).toBe(true)
  },
  async spawn ({ run }) {
    expect((await run('spawn', { command: 'echo', args: ['hi'] })).result).toEqual({ exit_code: 0, stdout: 'hi\n', stderr: '', command: 'echo', description: '(no description)' })
    const cut = await run('spawn', { command: 'head', args: ['-c', '5000', '/dev/zero'], description: 'zeros' }, 300)
    expect(cut.result).toMatchObject({ stdout_truncated: true, stdout_bytes: 5000, command: 'head', description: 'zeros' })
    // A description longer than the limit leaves no room for the process fields: the envelope.
    expect(await run('spawn', { command: 'true', description: 'd'.repeat(400) }, 256)).toEqual({ result: ENVELOPE, truncated: true })
  },
  async bash ({ run }) {
    expect((await run('bash', { command: 'echo a; echo b >&2; exit 1' })).result).toEqual({ content: 'a\nb\n', is_error: true, exit_code: 1 })
    const long = await run('bash', { command: 'head -c 40000 /dev/zero | tr "\\0" z' })
    expect(long.result['content']).toMatch(/\(output truncated: 40000 total chars, showing first 30000\)$/)
    expect(long.truncated).toBe(true)
    expect(await run('bash', { command: 'head -c 2000 /dev/zero | tr "\\0" z' }, 300)).toEqual({ result: ENVELOPE, truncated: true })
  },
  async memory_read ({ run }) {
    expect((await run('memory_read', {})).result).toEqual({ content: '', message: 'No memory file found' })
    await run('memory_write', { content: 'the cat sat\n\nthe dog ran' })
    expect((await run('memory_read', {})).result).toEqual({ content: 'the cat sat\n\nthe dog ran' })
    expect((await run('memory_read', { query: 'DOG' })).result).toEqual({ query: 'DOG', matches: ['the dog ran'], count: 1 })
    await run('memory_write', { content: 'm'.repeat(2000) })
    expect(await run('memory_read', {}, 300)).toEqual({ result: PARTIAL, truncated: true })
    expect(await run('memory_read', { query: 'm' }, 300)).toEqual({ result: PARTIAL, truncated: true })
  },
  async memory_write ({ run }) {
    expect((await run('memory_write', { content: 'note' })).result).toEqual({ message: 'Successfully wrote 4 bytes to memory (mode: append)', path: 'memory/MEMORY.md' })
    expect((await run('memory_write', { content: 'new', mode: 'overwrite' })).result).toEqual({ message: 'Successfully wrote 3 bytes to memory (mode: overwrite)', path: 'memory/MEMORY.md' })
  },
  async read ({ run }) {
    await run('write', { file_path: 'a.txt', content: 'hello' })
    expect((await run('read', { file_path: 'a.txt' })).result).toEqual({ content: 'hello' })
    await run('write', { file_path: 'big.txt', content: 'r'.repeat(60_000) })
    const long = await run('read', { file_path: 'big.txt' })
    expect(long.result['content']).toMatch(/\(output truncated: 60000 total chars, showing first 50000\)$/)
    expect(await run('read', { file_path: 'big.txt' }, 300)).toEqual({ result: PARTIAL, truncated: true })
  },
  async write ({ run }) {
    expect((await run('write', { file_path: 'a.txt', content: 'hello' })).result).toEqual({ content: 'Wrote 5 bytes to a.txt', bytes: 5 })
    expect(await run('write', { file_path: LONG_PATH, content: 'hello' }, 256)).toEqual({ result: ENVELOPE, truncated: true })
  },
  async edit ({ run }) {
    await run('write', { file_path: 'a.txt', content: 'ab ab' })
    expect((await run('edit', { file_path: 'a.txt', old_string: 'ab', new_string: 'cd' })).result).toEqual({ content: 'Edited a.txt: replaced the first of 2 occurrence(s)', occurrences: 2 })
    await run('write', { file_path: LONG_PATH, content: 'ab' })
    expect(await run('edit', { file_path: LONG_PATH, old_string: 'ab', new_string: 'cd' }, 256)).toEqual({ result: ENVELOPE, truncated: true })
  },
  async web_fetch ({ run, base }) {
    expect((await run('web_fetch', { url: `${base}/page?size=20` })).result).toEqual({ status: 200, content_type: 'text/plain', body: 'p'.repeat(20), url: `${base}/page?size=20`, bytes: 20 })
    // Longer than tools.web_fetch.max_bytes (1000 here): the body says it was cut.
    expect((await run('web_fetch', { url: `${base}/page?size=3000` })).result['body']).toMatch(/\(body truncated: showing first 1000 bytes\)$/)
    expect(await run('web_fetch', { url: `${base}/page?size=900` }, 300)).toEqual({ result: ENVELOPE, truncated: true })
  },
  async web_search ({ run, elsewhere }) {
    expect((await run('web_search', { query: 'q', num_results: 2 })).result).toEqual({ query: 'q', results: [0, 1].map((i) => ({ title: `Result ${i}`, url: `https://example.org/${i}`, snippet: `snippet ${i} `.repeat(20) })) })
    expect(await run('web_search', { query: 'q', num_results: 8 }, 300)).toEqual({ result: ENVELOPE, truncated: true })
    const unconfigured = await elsewhere({ tools: { builtin: ['*'] } })
    expect((await unconfigured('web_search', { query: 'q' })).result).toMatchObject({ error: 'web search not configured', query: 'q' })
  },
  async process_start ({ run }) {
    expect((await run('process_start', { command: 'echo hi; exit 3', yield_ms: 5000 })).result).toEqual({ process_id: expect.any(String), state: 'exited', exit_code: 3, output: 'hi\n', next: 3 })
    expect((await run('process_start', { command: 'head -c 5000 /dev/zero | tr "\\0" o', yield_ms: 5000 }, 600)).truncated).toBe(true)
  },
  async process_output ({ run }) {
    const { result } = await run('process_start', { command: 'head -c 5000 /dev/zero | tr "\\0" o', yield_ms: 5000 }, 600)
    const cut = await run('process_output', { process_id: result['process_id'] }, 600)
    expect(cut).toMatchObject({ truncated: true, result: { state: 'exited', dropped_bytes: 0 } })
    expect((await run('process_output', { process_id: result['process_id'], after: 4990 })).result).toMatchObject({ output: 'o'.repeat(10), next: 5000 })
    // A small limit is filled, not cut to a byte: all of it but the other fields (and the escaping of the output).
    for (const [text, jsonBytesEach] of [['o', 1], ['\\001', 6]] as const) {
      const { result: flood } = await run('process_start', { command: `head -c 5000 /dev/zero | tr "\\0" "${text}"`, yield_ms: 5000 }, 256)
      const page = (await run('process_output', { process_id: flood['process_id'], after: 0 }, 256)).result
      const bytes = Buffer.byteLength(JSON.stringify(page))
      expect(bytes).toBeLessThanOrEqual(256)
      expect(String(page['output']).length * jsonBytesEach).toBeGreaterThan(256 - 150)
      expect(page['next']).toBe(String(page['output']).length)
    }
  },
  async process_input ({ run }) {
    const { result } = await run('process_start', { command: 'cat', stdin: true, yield_ms: 0 })
    expect((await run('process_input', { process_id: result['process_id'], input: 'x\n', eof: true, wait_ms: 5000 })).result).toMatchObject({ output: 'x\n', next: 2 })
  },
  async process_kill ({ run }) {
    // It writes once the start has answered (or the start would return its output), and is killed once it has.
    const { result } = await run('process_start', { command: 'while [ ! -e go ]; do sleep 0.01; done; echo a; touch written; sleep 60', yield_ms: 0 })
    await run('exec_shell', { command: 'touch go; while [ ! -e written ]; do sleep 0.01; done' })
    expect((await run('process_kill', { process_id: result['process_id'], signal: 'KILL' })).result).toMatchObject({ state: 'killed', output: 'a\n', next: 2 })
  },
  async process_list ({ run }) {
    await run('process_start', { command: 'true', yield_ms: 5000 })
    expect((await run('process_list', {})).result).toEqual({ processes: [expect.objectContaining({ command: 'true', state: 'exited', exit_code: 0 })] })
  },
  async message ({ run }) {
    expect((await run('message', { channel: 'ops', chat_id: 'C1', content: 'hi' })).result).toEqual({ status: 'sent', channel: 'ops', chat_id: 'C1', content_length: 2 })
    expect(await run('message', { channel: 'ops', chat_id: 'c'.repeat(400), content: 'hi' }, 256)).toEqual({ result: ENVELOPE, truncated: true })
  },
}

describe('outputSchema of the built-ins', () => {
  it('covers every built-in, each with a schema that refuses what is not its result', async () => {
    const app = await buildTestApp({ tools: { builtin: ['*'] }, channels: { ops: { webhook: 'http://127.0.0.1:9/hook' } } })
    const tools = (await app.inject({ method: 'GET', url: '/v1/tools?format=mcp' })).json().tools as Array<{ name: string, outputSchema: Record<string, unknown> }>
    expect(Object.keys(CASES).sort()).toEqual(tools.map((tool) => tool.name))
    const ajv = new Ajv({ strict: true, strictTypes: false })
    for (const tool of tools) {
      const validate = ajv.compile(tool.outputSchema)
      for (const stranger of [{}, { unexpected: true }, { _truncated_json: 1, _original_bytes: 1 }, 'text', [1]]) {
        expect(validate(stranger), `${tool.name} refuses ${JSON.stringify(stranger)}`).toBe(false)
      }
    }
  })

  it.each(Object.keys(CASES))('%s: every result, whole or cut, satisfies the published schema', async (name) => {
    const far = await farEnd()
    const config = (overrides: Record<string, unknown> = {}) => buildTestApp({
      tools: { builtin: ['*'], web_search: { endpoint: `${far.base}/search` }, web_fetch: { allow_private_networks: true, max_bytes: 1000 } },
      channels: { ops: { webhook: `${far.base}/hook` } },
      ...overrides,
    })
    const env: Env = { run: await runnerOf(await config()), elsewhere: async (overrides) => runnerOf(await config(overrides)), base: far.base }
    await CASES[name]?.(env)
  })
})
