import { existsSync } from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { buildTestApp, exec } from '../helper.ts'
import { expectProblem } from '../support/problem.ts'
import { workspacesIn } from '../support/ephemeral.ts'

describe('POST /v1/tools/{name}/execute', () => {
  it('answers the envelope {tool, result, truncated, duration_ms, workspace}', async () => {
    const app = await buildTestApp()
    const answer = await exec(app, 'write_file', { path: 'a.txt', content: 'hello world' }, { workspace: 'env' })
    expect(answer.status).toBe(200)
    expect(answer.body).toEqual({ tool: 'write_file', result: { message: 'Successfully wrote 11 bytes to a.txt' }, truncated: false, duration_ms: expect.any(Number), workspace: 'env' })
    expect(answer.headers['x-request-id']).toEqual(expect.any(String))
  })

  it('matches built-in names case-insensitively and accepts arguments as a JSON string', async () => {
    const app = await buildTestApp()
    expect((await exec(app, 'Write_File', JSON.stringify({ path: 'c.txt', content: 'case' }), { workspace: 'ci' })).status).toBe(200)
    const read = await exec(app, 'READ_FILE', { path: 'c.txt' }, { workspace: 'ci' })
    expect(read.body).toMatchObject({ tool: 'read_file', result: { content: 'case' } })
    expectProblem(await exec(app, 'read_file', '{"path": '), 400, 'InvalidArgs', 'read_file')
    expectProblem(await exec(app, 'read_file', [1]), 400, 'InvalidArgs', 'read_file')
  })

  it('runs each call without workspace in a fresh workspace that is gone after the answer', async () => {
    const app = await buildTestApp()
    const ephemeralRoot = path.join(app.runtime.workspaces.root, 'ephemeral')
    const answer = await exec(app, 'exec_shell', { command: 'touch here.txt; pwd' })
    expect(answer.body.workspace).toBeNull()
    const dir = answer.body.result.stdout.trim()
    expect(dir.startsWith(ephemeralRoot)).toBe(true)
    expect(existsSync(dir)).toBe(false)
    expectProblem(await exec(app, 'read_file', { path: 'here.txt' }), 404, 'FileNotFound', 'read_file')
    expect(await workspacesIn(ephemeralRoot)).toEqual([])
  })

  it('removes the ephemeral workspace after an error too', async () => {
    const app = await buildTestApp()
    expectProblem(await exec(app, 'exec_shell', { command: 'touch x; true || sudo ls' }), 403, 'PermissionDenied', 'exec_shell')
    expectProblem(await exec(app, 'read_file', { path: 'x' }), 404, 'FileNotFound', 'read_file')
    expect(await workspacesIn(path.join(app.runtime.workspaces.root, 'ephemeral'))).toEqual([])
  })

  it('lowers the result limit on request but never raises it past the configured one', async () => {
    const app = await buildTestApp({ limits: { max_result_bytes: 8192 } })
    await exec(app, 'write_file', { path: 'big.txt', content: 'abcdefghij'.repeat(2000) }, { workspace: 'trunc' })
    const low = await exec(app, 'read_file', { path: 'big.txt' }, { workspace: 'trunc', max_result_bytes: 1000 })
    expect(low.body.truncated).toBe(true)
    expect(JSON.stringify(low.body.result).length).toBeLessThanOrEqual(1000)
    const high = await exec(app, 'read_file', { path: 'big.txt' }, { workspace: 'trunc', max_result_bytes: 1_000_000 })
    expect(high.body.truncated).toBe(true)
    expect(Buffer.byteLength(JSON.stringify(high.body.result))).toBeLessThanOrEqual(8192)
    expect(high.body.result._truncated_json.startsWith('{"content":"abcdefghij')).toBe(true)
  })

  it('refuses unknown members of the request body', async () => {
    const app = await buildTestApp()
    const body = expectProblem(await exec(app, 'read_file', { path: 'a' }, { argumnets: {} }), 400, 'BadRequest', 'read_file')
    expect(body['detail']).toMatch(/argumnets/)
  })

  it('counts calls by tool and code in /metrics', async () => {
    const app = await buildTestApp()
    await exec(app, 'read_file', { path: 'missing' })
    await exec(app, 'exec_shell', { command: 'true' })
    await exec(app, 'made_up_tool_name', {})
    const text = (await app.inject({ method: 'GET', url: '/metrics' })).body
    expect(text).toMatch(/toolport_tool_calls_total\{tool="read_file",code="FileNotFound"\} 1/)
    expect(text).toMatch(/toolport_tool_calls_total\{tool="exec_shell",code="ok"\} 1/)
    expect(text).toMatch(/toolport_tool_calls_total\{tool="\(unknown\)",code="NotFound"\} 1/)
    expect(text).not.toMatch(/made_up_tool_name/)
  })
})
