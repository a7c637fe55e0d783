/**
 * The limits that keep one caller from degrading the answers of others:
 * error bodies within the result limit, parallel batches that wait instead of
 * being refused, the batch size cap.
 */
import { gzipSync } from 'node:zlib'
import { describe, expect, it } from 'vitest'
import { buildTestApp } from '../helper.ts'
import { eventually } from '../sources/helpers.ts'
import { heldCommand } from '../support/held.ts'

/** What a problem body may add around its members (type, title, status, code, ids). */
const ENVELOPE = 512

describe('error bodies stay within the result limit', () => {
  it('a timed-out command that printed NULs on both streams answers within max_result_bytes', async () => {
    const app = await buildTestApp()
    for (const limit of [1000, 4096]) {
      const response = await app.inject({
        method: 'POST',
        url: '/v1/tools/exec_shell/execute',
        payload: { arguments: { command: 'cat /dev/zero & cat /dev/zero >&2', timeout: 1 }, max_result_bytes: limit },
      })
      expect(response.statusCode).toBe(504)
      const body = response.json()
      expect(body.code).toBe('Timeout')
      expect(Buffer.byteLength(response.body)).toBeLessThanOrEqual(limit + ENVELOPE)
      // Both streams keep a share of the room, and the totals say how much was printed.
      expect(body.partial_stdout.length).toBeGreaterThan(0)
      expect(body.partial_stderr.length).toBeGreaterThan(0)
      expect(body.stdout_bytes).toBeGreaterThan(limit)
    }
  })

  it('the configured limit bounds a Timeout too, in a batch as in a single call', async () => {
    const app = await buildTestApp({ limits: { max_result_bytes: 2048 } })
    const response = await app.inject({
      method: 'POST',
      url: '/v1/tool-calls',
      payload: { calls: [{ id: 'a', name: 'exec_shell', arguments: { command: 'cat /dev/zero', timeout: 1 } }] },
    })
    expect(response.statusCode).toBe(200)
    const [result] = response.json().results
    expect(result.status).toBe(504)
    expect(Buffer.byteLength(JSON.stringify(result.error))).toBeLessThanOrEqual(2048 + ENVELOPE)
  })
})

describe('batches', () => {
  it('never echo a huge call id or tool name: such a call is refused and its id and name come back cut', async () => {
    const app = await buildTestApp({ limits: { max_result_bytes: 2048 } })
    const calls = [
      { id: 'x'.repeat(100_000), name: 'read_file', arguments: { path: 'a' } },
      { id: 'short', name: 'n'.repeat(1_000_000), arguments: {} },
      { id: 'fine', name: 'list_directory', arguments: { path: '.' } },
    ]
    const response = await app.inject({ method: 'POST', url: '/v1/tool-calls', payload: { calls, format: 'anthropic' } })
    expect(response.statusCode).toBe(200)
    // Three results, each within the limit plus its envelope, twice (results and messages).
    expect(Buffer.byteLength(response.body)).toBeLessThanOrEqual(2 * 3 * (2048 + ENVELOPE))
    const { results } = response.json() as { results: Array<{ id: string, name: string, status: number, error?: { code: string } }> }
    expect(results.map((r) => r.status)).toEqual([400, 400, 200])
    expect(results[0]?.id.length).toBeLessThanOrEqual(257)
    expect(results[1]?.name.length).toBeLessThanOrEqual(257)
    expect(results[1]?.error?.code).toBe('InvalidArgs')
  })

  it('a parallel batch larger than the limiter runs whole: its calls wait for each other, none is refused', async () => {
    const app = await buildTestApp({ limits: { max_concurrent: 2, max_queue: 0 } })
    const calls = Array.from({ length: 12 }, (_, i) => ({ id: `c${i}`, name: 'exec_shell', arguments: { command: `sleep 0.05; echo ${i}` } }))
    const response = await app.inject({ method: 'POST', url: '/v1/tool-calls', payload: { calls, parallel: true } })
    expect(response.statusCode).toBe(200)
    const results = response.json().results as Array<{ id: string, status: number, result: { stdout: string } }>
    expect(results.map((r) => r.status)).toEqual(calls.map(() => 200))
    expect(results.map((r) => r.result.stdout)).toEqual(calls.map((_, i) => `${i}\n`))
  })

  it('a parallel batch of more calls of a tool than the tool\'s own limit (spawn refuses at once when full) runs whole too', async () => {
    const app = await buildTestApp({ tools: { spawn: { max_concurrent: 2 } } })
    const calls = Array.from({ length: 6 }, (_, i) => ({ id: `s${i}`, name: 'spawn', arguments: { command: 'sh', args: ['-c', `sleep 0.2; echo ${i}`] } }))
    const response = await app.inject({ method: 'POST', url: '/v1/tool-calls', payload: { calls, parallel: true } })
    const results = response.json().results as Array<{ status: number, result?: unknown, error?: { detail: string } }>
    expect(results.map((r) => r.error?.detail ?? r.status)).toEqual(calls.map(() => 200))
    expect(JSON.stringify(results.map((r) => r.result))).toMatch(/5\\n/)
  })

  it('holds at most 256 calls: more is a 400 BadRequest that says so', async () => {
    const app = await buildTestApp()
    const calls = Array.from({ length: 257 }, (_, i) => ({ id: `c${i}`, name: 'list_directory', arguments: { path: '.' } }))
    const response = await app.inject({ method: 'POST', url: '/v1/tool-calls', payload: { calls } })
    expect(response.statusCode).toBe(400)
    expect(response.json()).toMatchObject({ code: 'BadRequest', detail: expect.stringContaining('256') })
    const ok = await app.inject({ method: 'POST', url: '/v1/tool-calls', payload: { calls: calls.slice(0, 256) } })
    expect(ok.statusCode).toBe(200)
  })
})

describe('request bodies', () => {
  it('refuses prototype-poisoning keys with a message that names them, not as "not valid JSON"', async () => {
    const app = await buildTestApp()
    for (const payload of ['{"arguments":{"__proto__":{"polluted":1}}}', '{"arguments":{"constructor":{"prototype":{"polluted":1}}}}']) {
      const response = await app.inject({ method: 'POST', url: '/v1/tools/read_file/execute', headers: { 'content-type': 'application/json' }, payload })
      expect(response.statusCode).toBe(400)
      expect(response.json()).toMatchObject({ code: 'BadRequest', tool: 'read_file', detail: expect.stringContaining('__proto__') })
      expect(response.json().detail).not.toMatch(/not valid JSON/)
    }
    expect(({} as Record<string, unknown>)['polluted']).toBeUndefined()
    const broken = await app.inject({ method: 'POST', url: '/v1/tools/read_file/execute', headers: { 'content-type': 'application/json' }, payload: '{"arguments":' })
    expect(broken.json()).toMatchObject({ code: 'BadRequest', detail: expect.stringContaining('not valid JSON') })
  })

  it('refuses prototype-poisoning keys in arguments sent as a JSON string too', async () => {
    const app = await buildTestApp()
    const response = await app.inject({
      method: 'POST',
      url: '/v1/tools/write_file/execute',
      payload: { arguments: JSON.stringify({ path: 'a', content: 'x' }).replace('}', ',"__proto__":{"polluted":1}}') },
    })
    expect(response.statusCode).toBe(400)
    expect(response.json()).toMatchObject({ code: 'InvalidArgs', detail: expect.stringContaining('__proto__') })
  })

  it('refuses JSON nested more than 200 levels deep, in a body or in arguments sent as a string', async () => {
    const app = await buildTestApp()
    const deep = `${'['.repeat(201)}${']'.repeat(201)}`
    const body = await app.inject({ method: 'POST', url: '/v1/tools/read_file/execute', headers: { 'content-type': 'application/json' }, payload: `{"arguments":{"path":"a","x":${deep}}}` })
    expect(body.statusCode).toBe(400)
    expect(body.json()).toMatchObject({ code: 'BadRequest', detail: 'the body is nested more than 200 levels deep' })
    const batch = await app.inject({ method: 'POST', url: '/v1/tool-calls', headers: { 'content-type': 'application/json', 'idempotency-key': 'deep' }, payload: `{"calls":[{"id":"c","name":"read_file","arguments":{"x":${deep}}}]}` })
    expect(batch.json()).toMatchObject({ code: 'BadRequest', detail: 'the body is nested more than 200 levels deep' })
    const asString = await app.inject({ method: 'POST', url: '/v1/tools/read_file/execute', payload: { arguments: `{"path":"a","x":${deep}}` } })
    expect(asString.json()).toMatchObject({ code: 'InvalidArgs', detail: expect.stringContaining('nested more than 200 levels deep') })
    // 200 levels are taken (on to the tool: no such file).
    const fits = await app.inject({ method: 'POST', url: '/v1/tools/read_file/execute', headers: { 'content-type': 'application/json' }, payload: `{"arguments":{"path":"a","x":${'['.repeat(198)}${']'.repeat(198)}}}` })
    expect(fits.json().code).toBe('FileNotFound')
  })

  it('refuses a number no 64-bit float holds (1e400 would reach a tool as Infinity, and go back out as null), in a body or in arguments sent as a string', async () => {
    const app = await buildTestApp()
    for (const number of ['1e400', '-1e400', '[1, 2e999]']) {
      const body = await app.inject({ method: 'POST', url: '/v1/tools/read_file/execute', headers: { 'content-type': 'application/json' }, payload: `{"workspace":"w","arguments":{"path":"a","offset":${number}}}` })
      expect(body.statusCode).toBe(400)
      expect(body.json()).toMatchObject({ code: 'BadRequest', detail: 'the body holds a number too large for a 64-bit float (such as 1e400)' })
    }
    const asString = await app.inject({ method: 'POST', url: '/v1/tools/read_file/execute', payload: { arguments: '{"path":"a","offset":1e400}' } })
    expect(asString.statusCode).toBe(400)
    expect(asString.json()).toMatchObject({ code: 'InvalidArgs', detail: expect.stringContaining('too large for a 64-bit float') })
    // The largest float is a number like any other (on to the tool, which finds no file).
    const largest = await app.inject({ method: 'POST', url: '/v1/tools/read_file/execute', headers: { 'content-type': 'application/json' }, payload: '{"arguments":{"path":"a","x":1.7976931348623157e308}}' })
    expect(largest.json().code).toBe('FileNotFound')
  })

  it('refuses a compressed body or another charset as such, not as "not valid JSON"', async () => {
    const app = await buildTestApp()
    const url = '/v1/tools/read_file/execute'
    const json = JSON.stringify({ arguments: { path: 'a' } })
    const gzipped = await app.inject({ method: 'POST', url, headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' }, payload: gzipSync(json) })
    expect(gzipped.statusCode).toBe(400)
    expect(gzipped.json()).toMatchObject({ code: 'BadRequest', detail: 'Content-Encoding "gzip" is not supported: send the body uncompressed' })
    const utf16 = await app.inject({ method: 'POST', url, headers: { 'content-type': 'application/json; charset=utf-16le' }, payload: Buffer.from(json, 'utf16le') })
    expect(utf16.json()).toMatchObject({ code: 'BadRequest', detail: 'charset "utf-16le" is not supported: send JSON in UTF-8' })
    expect((await app.inject({ method: 'POST', url, headers: { 'content-type': 'application/json; charset=UCS-4' }, payload: json })).json().code).toBe('BadRequest')
    // What reads as UTF-8 goes on to the tool (no workspace file: FileNotFound), whatever its label.
    for (const charset of ['UTF-8', '"utf8"', 'us-ascii', 'ISO-8859-1', '']) {
      const plain = await app.inject({ method: 'POST', url, headers: { 'content-type': `application/json; charset=${charset}`, 'content-encoding': 'identity' }, payload: json })
      expect(plain.json().code, charset).toBe('FileNotFound')
    }
    // A body-less DELETE is not refused for its headers.
    expect((await app.inject({ method: 'POST', url: '/v1/workspaces', payload: { id: 'encoded' } })).statusCode).toBe(201)
    expect((await app.inject({ method: 'DELETE', url: '/v1/workspaces/encoded', headers: { 'content-type': 'application/json', 'content-encoding': 'gzip' }, payload: '' })).statusCode).toBe(204)
  })

  it('refuses bytes that are not UTF-8, never reading them as U+FFFD (other bytes, and one fingerprint for two bodies)', async () => {
    const app = await buildTestApp()
    const url = '/v1/tools/write_file/execute'
    for (const [label, bytes] of [['a stray byte', '\xff'], ['an overlong "/"', '\xc0\xaf'], ['an encoded surrogate', '\xed\xa0\x80'], ['Latin-1 é', '\xe9']] as const) {
      const payload = Buffer.concat([Buffer.from('{"workspace":"bytes","arguments":{"path":"f.txt","content":"a'), Buffer.from(bytes, 'latin1'), Buffer.from('"}}')])
      const response = await app.inject({ method: 'POST', url, headers: { 'content-type': 'application/json; charset=ISO-8859-1', 'idempotency-key': 'one-key' }, payload })
      expect(response.statusCode, label).toBe(400)
      expect(response.json(), label).toMatchObject({ code: 'BadRequest', detail: 'the body is not UTF-8 text: send JSON in UTF-8' })
    }
    expect((await app.inject({ method: 'GET', url: '/v1/workspaces/bytes' })).statusCode).toBe(404)
    // UTF-8 text, multi-byte characters and all, is taken.
    const text = await app.inject({ method: 'POST', url, headers: { 'content-type': 'application/json' }, payload: Buffer.from('{"workspace":"bytes","arguments":{"path":"f.txt","content":"é😀"}}') })
    expect(text.statusCode).toBe(200)
    const read = await app.inject({ method: 'POST', url: '/v1/tools/read_file/execute', payload: { workspace: 'bytes', arguments: { path: 'f.txt' } } })
    expect(read.json().result).toMatchObject({ content: 'é😀' })
  })

  it('takes an empty JSON body of a bodiless request as no body (a DELETE as the Python MCP SDK sends it)', async () => {
    const app = await buildTestApp()
    expect((await app.inject({ method: 'POST', url: '/v1/workspaces', payload: { id: 'emptied' } })).statusCode).toBe(201)
    const response = await app.inject({ method: 'DELETE', url: '/v1/workspaces/emptied', headers: { 'content-type': 'application/json' }, payload: '' })
    expect(response.statusCode).toBe(204)
    // A POST still needs its body.
    const post = await app.inject({ method: 'POST', url: '/v1/tools/read_file/execute', headers: { 'content-type': 'application/json' }, payload: '' })
    expect(post.json()).toMatchObject({ code: 'BadRequest', detail: expect.stringContaining('empty') })
  })
})

describe('tenants sharing the service limiter', () => {
  it('a tenant that fills the queue does not shut another out: the other takes the place of its newest call, and the next free slot', async () => {
    const tokens = [{ token: 'hog', tenant: 'hog' }, { token: 'other', tenant: 'other' }]
    const app = await buildTestApp({ auth: { tokens }, limits: { max_concurrent: 1, max_queue: 2, queue_timeout_ms: 20_000 } })
    const call = (token: string, command: string) => app.inject({
      method: 'POST',
      url: '/v1/tools/exec_shell/execute',
      headers: { authorization: `Bearer ${token}` },
      payload: { arguments: { command } },
    })
    const order: string[] = []
    const noted = async (name: string, answer: ReturnType<typeof call>): Promise<number> => {
      const { statusCode } = await answer
      order.push(`${name} ${statusCode}`)
      return statusCode
    }
    // The running call holds the only slot until the queue is built: each step waits for the last to be in.
    const held = await heldCommand('done')
    const { limiter } = app.runtime
    const running = noted('hog running', call('hog', held.command))
    expect(await eventually(() => limiter.inFlight === 1)).toBe(true)
    const queued = [noted('hog 1', call('hog', 'true'))]
    expect(await eventually(() => limiter.queued === 1)).toBe(true)
    queued.push(noted('hog 2', call('hog', 'true')))
    expect(await eventually(() => limiter.queued === 2)).toBe(true)
    const other = noted('other', call('other', 'true'))
    // The queue stays full as the other tenant comes in: what tells it is in is a call answered (which, the order says).
    await eventually(() => order.length > 0)
    await held.release()
    await Promise.all([running, ...queued, other])
    expect(order).toEqual(['hog 2 503', 'hog running 200', 'other 200', 'hog 1 200'])
  })
})
