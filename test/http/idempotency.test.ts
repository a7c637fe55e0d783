/**
 * Idempotency-Key on the POSTs (contract "Repeatable requests"): replays
 * that run nothing again, 422 for another request with the key, 409 while
 * the first runs, keys per tenant, malformed keys, expiry, and which answers
 * are kept.
 */
import { readdir, readFile, rm, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { buildTestApp } from '../helper.ts'
import { expectProblem } from '../support/problem.ts'
import { requestAs } from '../support/requests.ts'
import { describeJson, eventually, placeTool, shTool, toolsDir } from '../sources/helpers.ts'

type App = Awaited<ReturnType<typeof buildTestApp>>

const EXECUTE = '/v1/tools/exec_shell/execute'

const post = (app: App, url: string, body: unknown, key?: string, token: string | null = null) =>
  requestAs(app, token, 'POST', url, body, key === undefined ? {} : { 'idempotency-key': key })

/** An exec_shell call that appends one line to log.txt of a persistent workspace. */
const appendLine = (workspace = 'w') => ({ workspace, arguments: { command: 'echo ran >> log.txt' } })

/** The lines of a workspace file, read with read_file (no key). */
async function linesOf (app: App, file: string, token: string | null = null, workspace = 'w'): Promise<string[]> {
  const answer = await post(app, '/v1/tools/read_file/execute', { workspace, arguments: { path: file } }, undefined, token)
  expect(answer.status, JSON.stringify(answer.body)).toBe(200)
  return String(answer.body.result.content).trim().split('\n')
}

/** Waits for `file` to exist in the workspace: the command that makes it is running. */
async function untilExists (app: App, file: string, workspace = 'w'): Promise<void> {
  for (;;) {
    const answer = await post(app, '/v1/tools/exec_shell/execute', { workspace, arguments: { command: `test -e ${file}` } })
    if (answer.body.result?.exit_code === 0) return
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
}

/** A command that says it started, then waits for the test to create `release`. */
const heldCommand = (then = 'echo ran >> log.txt') => `touch started; while [ ! -e release ]; do sleep 0.02; done; ${then}`

describe('Idempotency-Key', () => {
  it('replays the first answer (same status and body, Idempotent-Replayed) and runs nothing again', async () => {
    const app = await buildTestApp()
    const first = await post(app, EXECUTE, appendLine(), 'k-1')
    expect(first.status).toBe(200)
    expect(first.headers['idempotent-replayed']).toBeUndefined()
    const again = await post(app, EXECUTE, appendLine(), 'k-1')
    expect(again.status).toBe(200)
    expect(again.headers['idempotent-replayed']).toBe('true')
    expect(again.headers['content-type']).toBe(first.headers['content-type'])
    expect(again.body).toEqual(first.body)
    expect(await linesOf(app, 'log.txt')).toEqual(['ran'])
  })

  it('keeps for a tenant at most as much as one of its workspaces may hold: past it a new key is 413 and nothing runs; replays go on', async () => {
    const app = await buildTestApp({ workspaces: { tenant_quotas: { default: { max_workspace_bytes: 4096 } } } })
    const bigAnswer = { workspace: 'w', arguments: { command: 'head -c 3000 /dev/zero | tr "\\000" x; echo ran >> log.txt' } }
    expect((await post(app, EXECUTE, bigAnswer, 'first')).status).toBe(200)
    expect((await post(app, EXECUTE, bigAnswer, 'second')).status).toBe(200)
    // Two answers of over 3000 bytes each: the next key goes over the 4096 bytes.
    const refused = await post(app, EXECUTE, bigAnswer, 'third')
    expect(String(expectProblem(refused, 413, 'PayloadTooLarge')['detail'])).toContain('Idempotency-Key')
    expect(await linesOf(app, 'log.txt')).toEqual(['ran', 'ran'])
    const replayed = await post(app, EXECUTE, bigAnswer, 'first')
    expect(replayed.status).toBe(200)
    expect(replayed.headers['idempotent-replayed']).toBe('true')
    // Without a key the call runs as ever.
    expect((await post(app, EXECUTE, bigAnswer)).status).toBe(200)
    expect(await linesOf(app, 'log.txt')).toEqual(['ran', 'ran', 'ran'])
  })

  it('counts the answers of keyed requests running together against that bound: of a burst past it, one runs', async () => {
    const app = await buildTestApp({ workspaces: { tenant_quotas: { default: { max_workspace_bytes: 4096 } } } })
    const answers = await Promise.all(Array.from({ length: 12 }, (_, i) => post(app, EXECUTE, appendLine(), `burst-${i}`)))
    expect(answers.filter((answer) => answer.status === 200)).toHaveLength(1)
    expect(answers.filter((answer) => answer.status === 413)).toHaveLength(11)
    expect(await linesOf(app, 'log.txt')).toEqual(['ran'])
  })

  it('sets aside room for each call of a batch, so that batches claiming together cannot pass the bound either', async () => {
    const app = await buildTestApp({ workspaces: { tenant_quotas: { default: { max_workspace_bytes: 300_000 } } } })
    const batch = { workspace: 'w', calls: Array.from({ length: 4 }, (_, i) => ({ id: `c${i}`, name: 'exec_shell', arguments: { command: 'echo ran >> log.txt' } })) }
    const answers = await Promise.all(Array.from({ length: 8 }, (_, i) => post(app, '/v1/tool-calls', batch, `batch-${i}`)))
    expect(answers.filter((answer) => answer.status === 200)).toHaveLength(1)
    expect(await linesOf(app, 'log.txt')).toEqual(['ran', 'ran', 'ran', 'ran'])
  })

  it('takes the same body in another key order or spacing as the same request', async () => {
    const app = await buildTestApp()
    const first = await requestAs(app, null, 'POST', EXECUTE, JSON.stringify({ workspace: 'w', arguments: { command: 'echo ran >> log.txt' } }),
      { 'idempotency-key': 'k-order', 'content-type': 'application/json' })
    expect(first.status).toBe(200)
    const reordered = await requestAs(app, null, 'POST', EXECUTE, '{ "arguments": {"command": "echo ran >> log.txt"},\n "workspace": "w" }',
      { 'idempotency-key': 'k-order', 'content-type': 'application/json' })
    expect(reordered.headers['idempotent-replayed']).toBe('true')
    expect(await linesOf(app, 'log.txt')).toEqual(['ran'])
  })

  it('is 422 IdempotencyKeyReused for the same key with another body or another path, and keeps the first answer', async () => {
    const app = await buildTestApp()
    const first = await post(app, EXECUTE, appendLine(), 'k-2')
    expectProblem(await post(app, EXECUTE, { workspace: 'w', arguments: { command: 'echo other >> log.txt' } }, 'k-2'), 422, 'IdempotencyKeyReused', 'exec_shell')
    expectProblem(await post(app, '/v1/tools/read_file/execute', appendLine(), 'k-2'), 422, 'IdempotencyKeyReused', 'read_file')
    expectProblem(await post(app, '/v1/tool-calls', { workspace: 'w', calls: [] }, 'k-2'), 422, 'IdempotencyKeyReused')
    const again = await post(app, EXECUTE, appendLine(), 'k-2')
    expect(again.headers['idempotent-replayed']).toBe('true')
    expect(again.body).toEqual(first.body)
    expect(await linesOf(app, 'log.txt')).toEqual(['ran'])
  })

  it('is 409 Conflict while the first request still runs, then replays its answer', async () => {
    const app = await buildTestApp()
    const body = { workspace: 'w', arguments: { command: heldCommand() } }
    const first = post(app, EXECUTE, body, 'k-3')
    await untilExists(app, 'started')
    expectProblem(await post(app, EXECUTE, body, 'k-3'), 409, 'Conflict', 'exec_shell')
    // Another request with the key is still 422, running or not.
    expectProblem(await post(app, EXECUTE, appendLine(), 'k-3'), 422, 'IdempotencyKeyReused')
    await post(app, '/v1/tools/write_file/execute', { workspace: 'w', arguments: { path: 'release', content: '' } })
    const answered = await first
    expect(answered.status).toBe(200)
    const again = await post(app, EXECUTE, body, 'k-3')
    expect(again.headers['idempotent-replayed']).toBe('true')
    expect(again.body).toEqual(answered.body)
    expect(await linesOf(app, 'log.txt')).toEqual(['ran'])
  })

  it('keeps keys per tenant: two tokens with the same key both run', async () => {
    const app = await buildTestApp({ auth: { tokens: [{ token: 'acme', tenant: 'acme' }, { token: 'beta', tenant: 'beta' }] } })
    const acme = await post(app, EXECUTE, appendLine(), 'shared-key', 'acme')
    const beta = await post(app, EXECUTE, appendLine(), 'shared-key', 'beta')
    expect([acme.status, beta.status]).toEqual([200, 200])
    expect(beta.headers['idempotent-replayed']).toBeUndefined()
    expect(await linesOf(app, 'log.txt', 'acme')).toEqual(['ran'])
    expect(await linesOf(app, 'log.txt', 'beta')).toEqual(['ran'])
    expect((await post(app, EXECUTE, appendLine(), 'shared-key', 'beta')).headers['idempotent-replayed']).toBe('true')
    expect(await linesOf(app, 'log.txt', 'beta')).toEqual(['ran'])
  })

  it('replays only to a token that may call the request\'s tools: another token of the tenant gets 403, never the stored answer', async () => {
    const app = await buildTestApp({
      tools: { builtin: ['*'] },
      auth: {
        tokens: [
          { token: 'all', tenant: 'acme', allowed_tools: ['*'] },
          { token: 'shell', tenant: 'acme', allowed_tools: ['exec_shell', 'process_*'] },
          { token: 'reader', tenant: 'acme', allowed_tools: ['read_file'] },
          { token: 'upper', tenant: 'acme', allowed_tools: ['EXEC_SHELL'] },
        ],
      },
    })
    const secret = { workspace: 'w', arguments: { command: 'echo PRIVATE-OUTPUT >> log.txt; cat log.txt' } }
    const batch = { workspace: 'w', calls: [{ name: 'read_file', arguments: { path: 'log.txt' } }, { name: 'exec_shell', arguments: { command: 'echo PRIVATE-BATCH' } }] }
    const processStart = { command: 'echo PRIVATE-PROCESS' }
    const requests = [[EXECUTE, secret, 'k-scope'], ['/v1/tool-calls', batch, 'k-scope-batch'], ['/v1/workspaces/w/processes', processStart, 'k-scope-process']] as const
    for (const [url, body, key] of requests) expect((await post(app, url, body, key, 'all')).status, url).toBeLessThan(300)
    for (const [url, body, key] of requests) {
      const narrower = await post(app, url, body, key, 'reader')
      expectProblem(narrower, 403, 'PermissionDenied')
      expect(JSON.stringify(narrower.body)).not.toContain('PRIVATE')
    }
    // Another token that may call the tools gets the replay.
    for (const [url, body, key] of [requests[0], requests[2]]) expect((await post(app, url, body, key, 'shell')).headers['idempotent-replayed'], url).toBe('true')
    // The batch names read_file too, which `shell` may not call: refused; `all` gets it again.
    expectProblem(await post(app, '/v1/tool-calls', batch, 'k-scope-batch', 'shell'), 403, 'PermissionDenied')
    expect((await post(app, '/v1/tool-calls', batch, 'k-scope-batch', 'all')).headers['idempotent-replayed']).toBe('true')
    expect(await linesOf(app, 'log.txt', 'all')).toEqual(['PRIVATE-OUTPUT'])
    // A tool named in another letter case is the tool the registry finds, which `upper`'s glob does not allow.
    expect((await post(app, '/v1/tools/EXEC_SHELL/execute', secret, 'k-case', 'all')).status).toBe(200)
    expectProblem(await post(app, '/v1/tools/EXEC_SHELL/execute', secret, 'k-case', 'upper'), 403, 'PermissionDenied')
  })

  it('replays to the token that made the request whatever its scope says of the tools, and names no tool it cannot find', async () => {
    const app = await buildTestApp({ auth: { tokens: [{ token: 'shell', tenant: 'acme', allowed_tools: ['exec_shell'] }, { token: 'other', tenant: 'acme', allowed_tools: ['write_file'] }] } })
    // The first answer held a 403 for the item out of scope; the retry gets that answer again.
    const batch = { workspace: 'w', calls: [{ name: 'exec_shell', arguments: { command: 'echo ran >> log.txt' } }, { name: 'read_file', arguments: { path: 'log.txt' } }, 42] }
    const first = await post(app, '/v1/tool-calls', batch, 'k-own', 'shell')
    const again = await post(app, '/v1/tool-calls', batch, 'k-own', 'shell')
    expect([first.status, again.headers['idempotent-replayed']]).toEqual([200, 'true'])
    expect(again.body).toEqual(first.body)
    // A name no tool had is checked as sent: the registry may know it later, or on another instance.
    const missing = await post(app, '/v1/tools/nonexistent/execute', { arguments: {} }, 'k-missing', 'shell')
    expectProblem(missing, 404, 'NotFound')
    expect((await post(app, '/v1/tools/nonexistent/execute', { arguments: {} }, 'k-missing', 'shell')).headers['idempotent-replayed']).toBe('true')
    expectProblem(await post(app, '/v1/tools/nonexistent/execute', { arguments: {} }, 'k-missing', 'other'), 403, 'PermissionDenied')
  })

  it('checks a replay against the tools as they were when the answer was made, not as the registry knows them now', async () => {
    const dir = await toolsDir()
    await placeTool(dir, 'secret', shTool(describeJson('secret'), 'echo TOP-SECRET'))
    const app = await buildTestApp({ tools: { dirs: [dir] }, auth: { tokens: [{ token: 'all', tenant: 'acme', allowed_tools: ['*'] }, { token: 'reader', tenant: 'acme', allowed_tools: ['read_file'] }] } })
    expect(JSON.stringify((await post(app, '/v1/tools/secret/execute', { arguments: {} }, 'k-gone', 'all')).body)).toContain('TOP-SECRET')
    // The tool goes (here; another instance sharing the root may never have had it).
    await rm(path.join(dir, 'secret'))
    expect(await eventually(async () => (await post(app, '/v1/tools/secret/execute', { arguments: {} }, undefined, 'all')).status === 404)).toBe(true)
    const replay = await post(app, '/v1/tools/secret/execute', { arguments: {} }, 'k-gone', 'reader')
    expectProblem(replay, 403, 'PermissionDenied')
    expect(JSON.stringify(replay.body)).not.toContain('TOP-SECRET')
  })

  it('refuses a malformed key with 400 BadRequest and runs nothing', async () => {
    const app = await buildTestApp()
    for (const key of ['', 'k'.repeat(256), 'a b', 'caf\u00e9', 'tab\there']) {
      const answer = await app.inject({ method: 'POST', url: EXECUTE, payload: appendLine(), headers: { 'idempotency-key': key } })
      expectProblem({ status: answer.statusCode, body: answer.json(), headers: answer.headers }, 400, 'BadRequest', 'exec_shell')
    }
    const longest = await post(app, EXECUTE, appendLine(), '!'.repeat(200) + '~'.repeat(55))
    expect(longest.status).toBe(200)
    expect(await linesOf(app, 'log.txt')).toEqual(['ran'])
  })

  it('forgets a key after server.idempotency_ttl_seconds: the request runs again', async () => {
    const app = await buildTestApp({ server: { idempotency_ttl_seconds: 1 } })
    expect((await post(app, EXECUTE, appendLine(), 'k-ttl')).status).toBe(200)
    expect((await post(app, EXECUTE, appendLine(), 'k-ttl')).headers['idempotent-replayed']).toBe('true')
    await new Promise((resolve) => setTimeout(resolve, 1100))
    const later = await post(app, EXECUTE, appendLine(), 'k-ttl')
    expect(later.status).toBe(200)
    expect(later.headers['idempotent-replayed']).toBeUndefined()
    expect(await linesOf(app, 'log.txt')).toEqual(['ran', 'ran'])
  })

  it('replays POST /v1/workspaces: the same 201 body and Location, one workspace', async () => {
    const app = await buildTestApp()
    const first = await post(app, '/v1/workspaces', {}, 'k-ws')
    expect(first.status).toBe(201)
    const again = await post(app, '/v1/workspaces', {}, 'k-ws')
    expect(again.status).toBe(201)
    expect(again.headers['idempotent-replayed']).toBe('true')
    expect(again.body).toEqual(first.body)
    expect(again.headers['location']).toBe(first.headers['location'])
    const tenantDir = path.join(app.runtime.config.workspaces.root, 'tenants', 'default', 'meta')
    expect(await readdir(tenantDir)).toEqual([`${first.body.id}.json`])
  })

  it('replays POST /v1/tool-calls, errors included, with nothing run again', async () => {
    const app = await buildTestApp()
    const body = { workspace: 'w', calls: [{ name: 'exec_shell', arguments: { command: 'echo ran >> log.txt' } }, { name: 'no_such_tool', arguments: {} }] }
    const first = await post(app, '/v1/tool-calls', body, 'k-batch')
    expect(first.status).toBe(200)
    const again = await post(app, '/v1/tool-calls', body, 'k-batch')
    expect(again.headers['idempotent-replayed']).toBe('true')
    expect(again.body).toEqual(first.body)
    expect(await linesOf(app, 'log.txt')).toEqual(['ran'])
    // An error answer of the route itself (404 for an unknown tool) is kept and replayed too.
    const missing = await post(app, '/v1/tools/no_such_tool/execute', {}, 'k-404')
    expectProblem(missing, 404, 'NotFound')
    const missingAgain = await post(app, '/v1/tools/no_such_tool/execute', {}, 'k-404')
    expect(missingAgain.headers['idempotent-replayed']).toBe('true')
    expect(missingAgain.body).toEqual(missing.body)
  })

  it('does not keep a 503 Overloaded refusal: the retry with the key runs', async () => {
    const app = await buildTestApp({ limits: { max_concurrent: 1, max_queue: 0 } })
    const holder = post(app, EXECUTE, { workspace: 'w', arguments: { command: heldCommand('true') } })
    await untilExistsWhileFull(app, holder)
    expectProblem(await post(app, EXECUTE, appendLine(), 'k-busy'), 503, 'Overloaded', 'exec_shell')
    await readyToRelease(app)
    expect((await holder).status).toBe(200)
    const retried = await post(app, EXECUTE, appendLine(), 'k-busy')
    expect(retried.status).toBe(200)
    expect(retried.headers['idempotent-replayed']).toBeUndefined()
    // The retry's answer is the one kept.
    expect((await post(app, EXECUTE, appendLine(), 'k-busy')).headers['idempotent-replayed']).toBe('true')
    expect(await linesOf(app, 'log.txt')).toEqual(['ran'])
  })

  it('keeps the key of a batch some of whose calls ran, though another was refused: none runs twice (one all of whose calls were refused is released: test/e2e/shutdown.test.ts)', async () => {
    const app = await buildTestApp({ limits: { max_concurrent: 2, max_queue: 0 } })
    const holder = post(app, EXECUTE, { workspace: 'w', arguments: { command: heldCommand('true') } })
    await untilExistsWhileFull(app, holder)
    // One slot left: of two calls at once, one runs and one is refused.
    const mixed = { workspace: 'w', parallel: true, calls: [{ id: 'a', name: 'exec_shell', arguments: { command: 'echo a >> log.txt' } }, { id: 'b', name: 'exec_shell', arguments: { command: 'echo b >> log.txt' } }] }
    const first = await post(app, '/v1/tool-calls', mixed, 'k-mixed')
    expect(first.body.results.map((result: { status: number }) => result.status).sort()).toEqual([200, 503])
    const again = await post(app, '/v1/tool-calls', mixed, 'k-mixed')
    expect(again.headers['idempotent-replayed']).toBe('true')
    expect(again.body).toEqual(first.body)
    expect(await linesOf(app, 'log.txt')).toHaveLength(1)
    await readyToRelease(app)
    expect((await holder).status).toBe(200)
  })

  it('keeps its records under workspaces.root, per tenant, named by the key digest', async () => {
    const app = await buildTestApp()
    await post(app, EXECUTE, appendLine(), 'k-file')
    const dir = path.join(app.runtime.config.workspaces.root, 'idempotency', 'default')
    const [name] = await readdir(dir)
    expect(name).toMatch(/^[0-9a-f]{64}\.json$/)
    const record = JSON.parse(await readFile(path.join(dir, name as string), 'utf8'))
    expect(record).toMatchObject({ state: 'done', answer: { status: 200 } })
  })
})

/**
 * With one slot and no queue, the held call fills the limiter: its `started`
 * file is looked for on disk, since a call to look would be refused.
 */
async function untilExistsWhileFull (app: App, holder: Promise<unknown>): Promise<void> {
  const file = path.join(app.runtime.config.workspaces.root, 'tenants', 'default', 'ws', 'w', 'started')
  for (;;) {
    if (await readFile(file).then(() => true, () => false)) return
    const settled = await Promise.race([holder.then(() => true), new Promise((resolve) => setTimeout(() => resolve(false), 20))])
    if (settled) throw new Error('the held call ended early')
  }
}

/** Creates the `release` file of a held command on disk (the limiter is full, so not through a call). */
async function readyToRelease (app: App): Promise<void> {
  await writeFile(path.join(app.runtime.config.workspaces.root, 'tenants', 'default', 'ws', 'w', 'release'), '')
}
