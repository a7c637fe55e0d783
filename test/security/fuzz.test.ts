/**
 * Property-based fuzzing of every endpoint's input: whatever arrives — odd
 * methods, paths, query strings, content types, bodies, tool arguments —
 * the answer is a contract status, every error is problem+json without a
 * stack trace, the service keeps answering, and nothing lands outside the
 * workspace root.
 */
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import fc from 'fast-check'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { buildApp } from '../../src/app.ts'
import { parseConfig } from '../../src/config.ts'

type App = Awaited<ReturnType<typeof buildApp>>

const CONTRACT_STATUSES = new Set([200, 201, 204, 400, 401, 403, 404, 409, 413, 503, 504])
const STACK_FRAME = /\bat\s+\S+\s+\(?(file:|node:|\/)[^)]*:\d+:\d+/
/** Tools whose inputs are fuzzed: the ones that cannot reach a network or run a command. */
const SAFE_TOOLS = ['read_file', 'write_file', 'edit_file', 'list_directory', 'memory_read', 'memory_write', 'read', 'write', 'edit', 'web_search']
const RUNS = { numRuns: 250, seed: Number(process.env['FUZZ_SEED'] ?? 20261122) }

let app: App
let root: string
let outside: string

beforeAll(async () => {
  // One app for every property: a per-test app would cost more than the properties themselves.
  root = await mkdtemp(path.join(os.tmpdir(), 'toolport-fuzz-'))
  outside = path.join(root, 'outside')
  await mkdir(outside)
  await writeFile(path.join(outside, 'secret.txt'), 'FUZZ-SECRET')
  const config = parseConfig({
    workspaces: { root: path.join(root, 'workspaces'), max_bytes: 1024 * 1024 },
    sandbox: { mode: 'none' },
    server: { body_limit_bytes: 64 * 1024 },
    tools: { builtin: SAFE_TOOLS },
  })
  app = await buildApp(config, { defaultMetrics: false })
  await app.runtime.whenReady()
})

afterAll(async () => {
  await app.close()
  await rm(root, { recursive: true, force: true })
})

interface Answer { statusCode: number, headers: Record<string, unknown>, body: string }

/** The invariants every answer keeps. */
function checkAnswer (answer: Answer, what: string): void {
  expect(CONTRACT_STATUSES.has(answer.statusCode), `${what} → ${answer.statusCode} ${answer.body.slice(0, 300)}`).toBe(true)
  expect(answer.body, what).not.toMatch(STACK_FRAME)
  expect(answer.body).not.toContain('FUZZ-SECRET')
  if (answer.statusCode >= 400) {
    expect(String(answer.headers['content-type']), what).toMatch(/^application\/problem\+json/)
    const problem = JSON.parse(answer.body)
    expect(problem, what).toMatchObject({ status: answer.statusCode, code: expect.any(String), type: expect.any(String), title: expect.any(String), detail: expect.any(String), request_id: expect.any(String) })
  }
}

const jsonValue = fc.jsonValue({ maxDepth: 3 })
const nastyString = fc.oneof(
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.constantFrom('..', '../..', '/etc/passwd', 'a/../../b', '\u0000', '%2e%2e', '..%2f', '~', '.', '', ' ', 'memory/MEMORY.md', 'outside/secret.txt', 'a'.repeat(300), '\\..\\..'),
  fc.string({ maxLength: 20 }).map((s) => `${s}/../../${s}`)
)
const argsFor = fc.record({
  path: nastyString,
  file_path: nastyString,
  content: fc.string({ maxLength: 200 }),
  old_text: nastyString,
  new_text: fc.string({ maxLength: 50 }),
  old_string: nastyString,
  new_string: fc.string({ maxLength: 50 }),
  query: fc.string({ maxLength: 30 }),
  mode: fc.constantFrom('append', 'overwrite', 'bogus'),
  offset: fc.oneof(fc.integer(), fc.double(), fc.string()),
  limit: fc.oneof(fc.integer(), fc.double(), fc.string()),
}, { requiredKeys: [] })
const argumentsValue = fc.oneof(argsFor, jsonValue, argsFor.map((a) => JSON.stringify(a)), fc.string())
const toolName = fc.oneof(fc.constantFrom(...SAFE_TOOLS, 'READ_FILE', 'exec_shell', 'nope', '', '..', '%2F'), fc.string({ maxLength: 20 }))
const workspaceId = fc.option(fc.oneof(fc.constantFrom('ws', '..', 'a/b', 'a\\b', 'x'.repeat(257), '\u0001'), fc.string({ maxLength: 20 })), { nil: undefined })

async function outsideUntouched (): Promise<void> {
  expect(await readdir(outside)).toEqual(['secret.txt'])
  // Nothing but the service's own folders at the top of the root: no write escaped the workspaces.
  expect((await readdir(root)).sort()).toEqual(['outside', 'workspaces'])
}

describe('fuzzing (fast-check)', () => {
  it('POST /v1/tools/{name}/execute with any name, arguments, workspace and limit', async () => {
    const seen = new Set<number>()
    await fc.assert(fc.asyncProperty(toolName, argumentsValue, workspaceId, fc.option(fc.oneof(fc.integer(), fc.double(), fc.string()), { nil: undefined }), async (name, args, workspace, limit) => {
      const payload: Record<string, unknown> = { arguments: args }
      if (workspace !== undefined) payload['workspace'] = workspace
      if (limit !== undefined) payload['max_result_bytes'] = limit
      const answer = await app.inject({ method: 'POST', url: `/v1/tools/${encodeURIComponent(name)}/execute`, payload })
      seen.add(answer.statusCode)
      checkAnswer({ statusCode: answer.statusCode, headers: answer.headers, body: answer.body }, `execute ${JSON.stringify(name)} ${JSON.stringify(payload).slice(0, 200)}`)
    }), RUNS)
    await outsideUntouched()
    // The generators reach both the tools and their refusals.
    expect([...seen]).toEqual(expect.arrayContaining([200, 400, 404]))
  }, 120_000)

  it('POST /v1/tool-calls with any calls, in any shape', async () => {
    const call = fc.oneof(
      fc.record({ id: fc.string(), name: toolName, arguments: argumentsValue }, { requiredKeys: [] }),
      fc.record({ id: fc.string(), type: fc.constant('function'), function: fc.record({ name: toolName, arguments: argumentsValue }, { requiredKeys: [] }) }, { requiredKeys: [] }),
      fc.record({ type: fc.constant('tool_use'), id: fc.string(), name: toolName, input: argumentsValue }, { requiredKeys: [] }),
      jsonValue
    )
    const body = fc.oneof(
      fc.record({ calls: fc.array(call, { maxLength: 5 }), workspace: workspaceId, format: fc.oneof(fc.constantFrom('native', 'openai', 'anthropic'), fc.string()), parallel: fc.oneof(fc.boolean(), jsonValue) }, { requiredKeys: ['calls'] }),
      jsonValue
    )
    await fc.assert(fc.asyncProperty(body, async (payload) => {
      const answer = await app.inject({ method: 'POST', url: '/v1/tool-calls', payload: JSON.stringify(payload), headers: { 'content-type': 'application/json' } })
      checkAnswer({ statusCode: answer.statusCode, headers: answer.headers, body: answer.body }, `batch ${JSON.stringify(payload).slice(0, 200)}`)
      if (answer.statusCode === 200) {
        for (const result of answer.json().results as Array<{ ok: boolean, status: number, error?: Record<string, unknown> }>) {
          expect(CONTRACT_STATUSES.has(result.status)).toBe(true)
          if (!result.ok) expect(result.error).toMatchObject({ status: result.status, code: expect.any(String), detail: expect.any(String) })
        }
      }
    }), RUNS)
    await outsideUntouched()
  }, 120_000)

  it('any method, path, query, content type and raw body on any route', async () => {
    const route = fc.constantFrom('/v1/tools', '/v1/tools/read_file', '/v1/tools/read_file/execute', '/v1/tool-calls', '/v1/workspaces', '/v1/workspaces/ws', '/v1/workspaces/ws/archive', '/healthz', '/readyz', '/mcp', '/v1', '/')
    const suffix = fc.oneof(fc.constant(''), fc.string({ maxLength: 20 }).map((s) => `/${encodeURIComponent(s)}`))
    const query = fc.oneof(fc.constant(''), fc.record({ format: fc.string({ maxLength: 10 }), allowed: fc.string({ maxLength: 20 }) }, { requiredKeys: [] }).map((q) => `?${new URLSearchParams(q as Record<string, string>).toString()}`))
    const method = fc.constantFrom<Array<'GET' | 'POST' | 'PUT' | 'DELETE' | 'PATCH' | 'OPTIONS' | 'HEAD'>>('GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS', 'HEAD')
    const contentType = fc.constantFrom('application/json', 'text/plain', 'application/gzip', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'application/json; charset=latin1', '')
    const body = fc.oneof(fc.string({ maxLength: 100 }), jsonValue.map((v) => JSON.stringify(v)), fc.uint8Array({ maxLength: 100 }).map((bytes) => Buffer.from(bytes)))
    await fc.assert(fc.asyncProperty(method, route, suffix, query, contentType, body, async (m, r, s, q, type, payload) => {
      // The MCP endpoint speaks JSON-RPC: its answers are checked by the MCP tests; here only that it never fails with a 500.
      const url = `${r}${r === '/mcp' ? '' : s}${q}`
      const headers: Record<string, string> = type === '' ? {} : { 'content-type': type }
      const answer = await app.inject({ method: m, url, headers, ...(m === 'GET' || m === 'HEAD' ? {} : { payload }) })
      if (r === '/mcp') {
        expect(answer.statusCode, `${m} ${url}`).toBeLessThan(500)
        expect(answer.body).not.toMatch(STACK_FRAME)
        return
      }
      if (m === 'HEAD' || m === 'OPTIONS') {
        expect(answer.statusCode).toBeLessThan(500)
        return
      }
      checkAnswer({ statusCode: answer.statusCode, headers: answer.headers, body: answer.body }, `${m} ${url} (${type})`)
    }), RUNS)
    await outsideUntouched()
    expect((await app.inject({ method: 'GET', url: '/healthz' })).json()).toEqual({ status: 'ok' })
  }, 120_000)
})
