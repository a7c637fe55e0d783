/** One test per row of the contract's error table, through the HTTP API. */
import { chmod, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { buildTestApp, exec, tempDir } from '../helper.ts'
import { eventually } from '../sources/helpers.ts'
import { heldCommand } from '../support/held.ts'
import { expectProblem } from '../support/problem.ts'

describe('error table', () => {
  it('InvalidArgs 400: a schema violation', async () => {
    const app = await buildTestApp()
    expectProblem(await exec(app, 'read_file', { path: 42 }), 400, 'InvalidArgs', 'read_file')
  })

  it('InvalidArgs 400: edit with two matches names the count', async () => {
    const app = await buildTestApp()
    await exec(app, 'write_file', { path: 'two.txt', content: 'x and x' }, { workspace: 'w1' })
    const body = expectProblem(await exec(app, 'edit_file', { path: 'two.txt', old_text: 'x', new_text: 'y' }, { workspace: 'w1' }), 400, 'InvalidArgs', 'edit_file')
    expect(body['detail']).toMatch(/\b2\b/)
  })

  it('InvalidArgs 400: a bad workspace id', async () => {
    const app = await buildTestApp()
    expectProblem(await exec(app, 'read_file', { path: 'a' }, { workspace: '../x' }), 400, 'InvalidArgs', 'read_file')
  })

  it('InvalidPath 400: a path leaving the workspace', async () => {
    const app = await buildTestApp()
    expectProblem(await exec(app, 'read_file', { path: '../../etc/passwd' }), 400, 'InvalidPath', 'read_file')
  })

  it('PermissionDenied 403: the shell denylist', async () => {
    const app = await buildTestApp()
    expectProblem(await exec(app, 'exec_shell', { command: 'true || sudo id' }), 403, 'PermissionDenied', 'exec_shell')
  })

  it('PermissionDenied 403: a tool outside the token scope', async () => {
    const app = await buildTestApp({ auth: { tokens: [{ token: 'reader', tenant: 't', allowed_tools: ['read_*'] }] } })
    const response = await app.inject({ method: 'POST', url: '/v1/tools/write_file/execute', headers: { authorization: 'Bearer reader' }, payload: { arguments: { path: 'a', content: 'b' } } })
    expectProblem({ status: response.statusCode, body: response.json(), headers: response.headers }, 403, 'PermissionDenied', 'write_file')
    // A built-in named in another case is reported by its registered name.
    const upper = await app.inject({ method: 'POST', url: '/v1/tools/WRITE_FILE/execute', headers: { authorization: 'Bearer reader' }, payload: { arguments: { path: 'a', content: 'b' } } })
    expectProblem({ status: upper.statusCode, body: upper.json(), headers: upper.headers }, 403, 'PermissionDenied', 'write_file')
  })

  it('NotFound 404: no such tool, no such workspace', async () => {
    const app = await buildTestApp()
    expectProblem(await exec(app, 'no_such_tool', {}), 404, 'NotFound', 'no_such_tool')
    const response = await app.inject({ method: 'GET', url: '/v1/workspaces/never-made' })
    expectProblem({ status: response.statusCode, body: response.json(), headers: response.headers }, 404, 'NotFound')
  })

  it('quotes the path in file errors, so an empty one reads as empty', async () => {
    const app = await buildTestApp()
    const empty = expectProblem(await exec(app, 'read_file', { path: '' }), 400, 'InvalidArgs', 'read_file')
    expect(empty['detail']).toBe('"" is a directory')
    const missing = expectProblem(await exec(app, 'read_file', { path: 'no such.txt' }), 404, 'FileNotFound', 'read_file')
    expect(missing['detail']).toBe('no such.txt does not exist')
    const spaced = expectProblem(await exec(app, 'read_file', { path: ' x ' }), 404, 'FileNotFound', 'read_file')
    expect(spaced['detail']).toBe('" x " does not exist')
  })

  it('FileNotFound 404: a contained path that does not exist', async () => {
    const app = await buildTestApp()
    expectProblem(await exec(app, 'read_file', { path: 'nope.txt' }), 404, 'FileNotFound', 'read_file')
  })

  it('Timeout 504: with the output captured so far', async () => {
    const app = await buildTestApp({ tools: { exec_shell: { timeout_max: 1 } } })
    const body = expectProblem(await exec(app, 'exec_shell', { command: 'echo started; sleep 5', timeout: 30 }), 504, 'Timeout', 'exec_shell')
    expect(body['partial_stdout']).toBe('started\n')
  })

  it('ExecutionFailed 500: an executable tool exiting non-zero, with its stderr', async () => {
    const dir = await tempDir()
    const script = path.join(dir, 'fails.sh')
    await writeFile(script, '#!/bin/sh\nif [ "$1" = --describe ]; then echo \'{"name":"fails","description":"d","parameters":{"type":"object","properties":{}}}\'; exit 0; fi\necho "disk on fire" >&2\nexit 3\n')
    await chmod(script, 0o755)
    const app = await buildTestApp({ tools: { dirs: [dir] } })
    const body = expectProblem(await exec(app, 'fails', {}), 500, 'ExecutionFailed', 'fails')
    expect(body['detail']).toMatch(/disk on fire/)
  })

  it('BadRequest 400: malformed JSON and a body that is not an object', async () => {
    const app = await buildTestApp()
    for (const payload of ['{"arguments": ', '[1,2]', '"text"']) {
      const response = await app.inject({ method: 'POST', url: '/v1/tools/read_file/execute', headers: { 'content-type': 'application/json' }, payload })
      expectProblem({ status: response.statusCode, body: response.json(), headers: response.headers }, 400, 'BadRequest', 'read_file')
    }
  })

  it('Unauthorized 401: missing or wrong bearer token', async () => {
    const app = await buildTestApp({ auth: { tokens: [{ token: 's3cret', tenant: 'acme', allowed_tools: ['*'] }] } })
    for (const headers of [{}, { authorization: 'Bearer wrong' }, { authorization: 'Basic czNjcmV0' }]) {
      const response = await app.inject({ method: 'GET', url: '/v1/tools', headers })
      expectProblem({ status: response.statusCode, body: response.json(), headers: response.headers }, 401, 'Unauthorized')
    }
    const ok = await app.inject({ method: 'GET', url: '/v1/tools', headers: { authorization: 'Bearer s3cret' } })
    expect(ok.statusCode).toBe(200)
    expect((await app.inject({ method: 'GET', url: '/healthz' })).statusCode).toBe(200)
  })

  it('PayloadTooLarge 413: a body over the limit', async () => {
    const app = await buildTestApp({ server: { body_limit_bytes: 2048 } })
    const body = expectProblem(await exec(app, 'write_file', { path: 'big', content: 'x'.repeat(5000) }), 413, 'PayloadTooLarge')
    expect(body['tool']).toBe('write_file')
  })

  it('Conflict 409: a workspace id that exists', async () => {
    const app = await buildTestApp()
    expect((await app.inject({ method: 'POST', url: '/v1/workspaces', payload: { id: 'dup' } })).statusCode).toBe(201)
    const response = await app.inject({ method: 'POST', url: '/v1/workspaces', payload: { id: 'dup' } })
    expectProblem({ status: response.statusCode, body: response.json(), headers: response.headers }, 409, 'Conflict')
  })

  it('Overloaded 503: the limiter is full, with Retry-After', async () => {
    const app = await buildTestApp({ limits: { max_concurrent: 1, max_queue: 0, queue_timeout_ms: 2000 } })
    // The call holds the only slot until the refusal is in.
    const held = await heldCommand('done')
    const slow = exec(app, 'exec_shell', { command: held.command })
    expect(await eventually(() => app.runtime.limiter.inFlight === 1)).toBe(true)
    const refused = await exec(app, 'read_file', { path: 'x' })
    const body = expectProblem(refused, 503, 'Overloaded', 'read_file')
    expect(refused.headers['retry-after']).toBe('2')
    expect(body['detail']).toMatch(/concurrency limit/)
    await held.release()
    expect((await slow).status).toBe(200)
  })

  it('Overloaded in a batch (answered 200): the batch carries the Retry-After of its refused calls', async () => {
    const app = await buildTestApp({ limits: { max_concurrent: 1, max_queue: 0, queue_timeout_ms: 2000 } })
    // The call holds the only slot until the batch is answered.
    const held = await heldCommand('done')
    const slow = exec(app, 'exec_shell', { command: held.command })
    expect(await eventually(() => app.runtime.limiter.inFlight === 1)).toBe(true)
    const batch = await app.inject({ method: 'POST', url: '/v1/tool-calls', payload: { format: 'anthropic', calls: [{ type: 'tool_use', id: 'a', name: 'read_file', input: { path: 'x' } }] } })
    expect(batch.statusCode).toBe(200)
    expect(batch.json().results).toMatchObject([{ id: 'a', ok: false, status: 503, error: { code: 'Overloaded' } }])
    expect(batch.headers['retry-after']).toBe('2')
    await held.release()
    expect((await slow).status).toBe(200)
    // A batch with no call refused so has none.
    expect((await app.inject({ method: 'POST', url: '/v1/tool-calls', payload: { calls: [{ id: 'b', name: 'read_file', arguments: { path: 'x' } }] } })).headers['retry-after']).toBeUndefined()
  })
})
