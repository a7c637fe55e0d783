import { describe, expect, it } from 'vitest'
import { buildTestApp, exec } from '../helper.ts'
import { expectProblem } from '../support/problem.ts'

type App = Awaited<ReturnType<typeof buildTestApp>>

async function batch (app: App, body: unknown) {
  const response = await app.inject({ method: 'POST', url: '/v1/tool-calls', payload: body as Record<string, unknown> })
  return { status: response.statusCode, body: response.json(), headers: response.headers }
}

const echo = (text: string) => ({ command: `echo ${text}` })

describe('POST /v1/tool-calls', () => {
  it('accepts the three call shapes, in order, with native messages by default', async () => {
    const app = await buildTestApp()
    const { status, body } = await batch(app, {
      calls: [
        { type: 'tool_use', id: 'z3', name: 'exec_shell', input: echo('first') },
        { id: 'a1', name: 'exec_shell', arguments: echo('second') },
        { id: 'm2', type: 'function', function: { name: 'exec_shell', arguments: JSON.stringify(echo('third')) } },
      ],
    })
    expect(status).toBe(200)
    expect(body.results.map((r: any) => [r.id, r.name, r.ok, r.status, r.result.stdout, r.truncated])).toEqual([
      ['z3', 'exec_shell', true, 200, 'first\n', false],
      ['a1', 'exec_shell', true, 200, 'second\n', false],
      ['m2', 'exec_shell', true, 200, 'third\n', false],
    ])
    expect(body.messages[0]).toEqual({ role: 'tool', tool_call_id: 'z3', content: JSON.stringify(body.results[0].result) })
  })

  it('shapes messages for openai and anthropic, errors as {"error": "..."}', async () => {
    const app = await buildTestApp()
    const calls = [{ id: 'ok', name: 'exec_shell', arguments: echo('x') }, { id: 'bad', name: 'read_file', arguments: { path: 'nope.txt' } }]
    const openai = (await batch(app, { calls, format: 'openai' })).body
    expect(openai.messages[0]).toMatchObject({ role: 'tool', tool_call_id: 'ok' })
    const anthropic = (await batch(app, { calls, format: 'anthropic' })).body
    expect(anthropic.messages.map((m: any) => [m.type, m.tool_use_id, m.is_error])).toEqual([['tool_result', 'ok', false], ['tool_result', 'bad', true]])
    expect(JSON.parse(anthropic.messages[1].content)).toEqual({ error: expect.stringMatching(/^file not found: nope.txt/) })
    expect(anthropic.message).toEqual({ role: 'user', content: anthropic.messages })
    // The contract's anthropic answer carries `message` always: for a batch of no calls, with no content.
    expect((await batch(app, { calls: [], format: 'anthropic' })).body).toEqual({ results: [], messages: [], message: { role: 'user', content: [] } })
  })

  it('keeps each failed call\'s status and problem, and runs the rest', async () => {
    const app = await buildTestApp()
    const { body } = await batch(app, {
      calls: [
        { id: 'e1', name: 'read_file', arguments: {} },
        { id: 'e2', name: 'exec_shell', arguments: { command: 'true || sudo id' } },
        { id: 'e3', name: 'no_such_tool', arguments: {} },
        { id: 'e4', arguments: {} },
        { id: 'fine', name: 'exec_shell', arguments: echo('still') },
      ],
    })
    expect(body.results.map((r: any) => [r.id, r.ok, r.status, r.error?.code])).toEqual([
      ['e1', false, 400, 'InvalidArgs'], ['e2', false, 403, 'PermissionDenied'], ['e3', false, 404, 'NotFound'], ['e4', false, 400, 'InvalidArgs'], ['fine', true, 200, undefined],
    ])
    expect(body.results[0].error).toMatchObject({ type: expect.any(String), title: expect.any(String), detail: expect.any(String), status: 400, tool: 'read_file' })
  })

  it('cuts an over-long id or name in its error result without splitting a character', async () => {
    const app = await buildTestApp()
    const long = `a${'😀'.repeat(200)}`
    const { body } = await batch(app, { calls: [{ id: long, name: 'list_directory', arguments: { path: '.' } }, { id: 'n', name: long, arguments: {} }] })
    const [byId, byName] = body.results
    expect(byId).toMatchObject({ ok: false, status: 400 })
    expect(byId.id).toBe(`a${'😀'.repeat(127)}…`)
    expect(byName).toMatchObject({ ok: false })
    expect(byName.name).toBe(`a${'😀'.repeat(127)}…`)
    // Strict JSON readers (and the model APIs the messages go to) refuse a lone surrogate.
    expect(JSON.stringify(body)).not.toMatch(/\\ud83d"|\\ud83d…/i)
  })

  it('shares one ephemeral workspace within a batch, gone afterwards', async () => {
    const app = await buildTestApp()
    const { body } = await batch(app, {
      calls: [
        { id: 'w', name: 'write_file', arguments: { path: 's.txt', content: 'shared' } },
        { id: 'r', name: 'exec_shell', arguments: { command: 'cat s.txt' } },
      ],
    })
    expect(body.results[1].result.stdout).toBe('shared')
    const next = (await batch(app, { calls: [{ id: 'r', name: 'read_file', arguments: { path: 's.txt' } }] })).body
    expect(next.results[0].status).toBe(404)
  })

  it('runs in order by default and concurrently with parallel: true', async () => {
    const app = await buildTestApp()
    const calls = [1, 2, 3].map((n) => ({ id: `p${n}`, name: 'exec_shell', arguments: { command: `sleep 0.4; echo ${n} >> order.txt; cat order.txt` } }))
    const sequential = (await batch(app, { calls, workspace: 'order' })).body
    expect(sequential.results[2].result.stdout).toBe('1\n2\n3\n')
    const started = Date.now()
    const parallel = (await batch(app, { calls: calls.map((c) => ({ ...c, arguments: { command: 'sleep 0.6; echo done' } })), parallel: true })).body
    expect(parallel.results.map((r: any) => r.id)).toEqual(['p1', 'p2', 'p3'])
    expect(Date.now() - started).toBeLessThan(1500)
  })

  it('uses a persistent workspace when named', async () => {
    const app = await buildTestApp()
    await batch(app, { workspace: 'kept', calls: [{ id: 'w', name: 'write_file', arguments: { path: 'k.txt', content: 'kept' } }] })
    expect((await exec(app, 'read_file', { path: 'k.txt' }, { workspace: 'kept' })).body.result.content).toBe('kept')
  })

  it('refuses a malformed batch', async () => {
    const app = await buildTestApp()
    expectProblem(await batch(app, { calls: 'not-a-list' }), 400, 'BadRequest')
    expectProblem(await batch(app, {}), 400, 'BadRequest')
    expectProblem(await batch(app, { calls: [], workspace: 'a/b' }), 400, 'InvalidArgs')
    // An id that is no string is refused for its call, never replaced by one the caller did not send.
    const numbered = (await batch(app, { format: 'openai', calls: [{ id: 5, name: 'read_file', arguments: { path: 'x' } }, { id: 'kept', name: 'read_file', arguments: { path: 'x' } }] })).body
    expect(numbered.results[0]).toMatchObject({ id: 'call_0', ok: false, status: 400, error: { code: 'InvalidArgs', detail: 'calls[0].id must be a string' } })
    expect(numbered.results[1]).toMatchObject({ id: 'kept', status: 404 })
    // Null is absent; a Responses item's own id (null, as a model dump writes it) is not its call id.
    const nulls = (await batch(app, { calls: [{ id: null, name: 'read_file', arguments: { path: 'x' } }, { type: 'function_call', id: null, call_id: 'c1', name: 'read_file', arguments: '{"path":"x"}' }] })).body
    expect(nulls.results.map((r: { id: string, status: number }) => [r.id, r.status])).toEqual([['call_0', 404], ['c1', 404]])
    const notObject = await app.inject({ method: 'POST', url: '/v1/tool-calls', headers: { 'content-type': 'application/json' }, payload: '[]' })
    expectProblem({ status: notObject.statusCode, body: notObject.json(), headers: notObject.headers }, 400, 'BadRequest')
  })
})
