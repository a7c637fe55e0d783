/** Where a real socket matters: streamed archives and client disconnects, with supertest. */
import { readdir } from 'node:fs/promises'
import path from 'node:path'
import { gunzipSync } from 'node:zlib'
import request from 'supertest'
import { describe, expect, it } from 'vitest'
import { buildTestApp, exec } from '../helper.ts'
import { tarEntries } from '../support/tarball.ts'

describe('over a real socket', () => {
  it('streams a workspace archive', async () => {
    const app = await buildTestApp()
    await exec(app, 'write_file', { path: 'big/data.txt', content: 'z'.repeat(2_000_000) }, { workspace: 'stream' })
    await app.ready()
    const response = await request(app.server).get('/v1/workspaces/stream/archive').buffer(true).parse((res, done) => {
      const chunks: Buffer[] = []
      res.on('data', (chunk: Buffer) => chunks.push(chunk))
      res.on('end', () => done(null, Buffer.concat(chunks)))
    })
    expect(response.status).toBe(200)
    expect(response.headers['content-type']).toMatch(/^application\/gzip/)
    expect(response.headers['content-disposition']).toBe('attachment; filename="stream.tar.gz"')
    expect(tarEntries(gunzipSync(response.body as Buffer))['big/data.txt']?.length).toBe(2_000_000)
  })

  it('answers problems with supertest too (content type, request id)', async () => {
    const app = await buildTestApp()
    await app.ready()
    const response = await request(app.server).post('/v1/tools/read_file/execute').send({ arguments: { path: '/etc/passwd' } })
    expect(response.status).toBe(400)
    expect(response.headers['content-type']).toMatch(/^application\/problem\+json/)
    expect(response.body).toMatchObject({ code: 'InvalidPath', tool: 'read_file', request_id: response.headers['x-request-id'] })
  })

  it('cancels the call of a client that disconnects and leaves no workspace behind', async () => {
    const app = await buildTestApp()
    await app.listen({ host: '127.0.0.1', port: 0 })
    const address = app.server.address() as { port: number }
    const controller = new AbortController()
    const started = Date.now()
    const call = fetch(`http://127.0.0.1:${address.port}/v1/tools/exec_shell/execute`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ arguments: { command: 'touch left-behind.txt; sleep 10' } }),
      signal: controller.signal,
    }).catch(() => 'aborted')
    const ephemeral = path.join(app.runtime.workspaces.root, 'ephemeral')
    while ((await readdir(ephemeral)).length === 0 && Date.now() - started < 3000) await new Promise((resolve) => setTimeout(resolve, 20))
    await new Promise((resolve) => setTimeout(resolve, 200))
    controller.abort()
    expect(await call).toBe('aborted')
    while ((app.runtime.limiter.inFlight > 0 || (await readdir(ephemeral)).length > 0) && Date.now() - started < 5000) await new Promise((resolve) => setTimeout(resolve, 20))
    expect(app.runtime.limiter.inFlight).toBe(0)
    expect(await readdir(ephemeral)).toEqual([])
    expect(Date.now() - started).toBeLessThan(5000)
  })
})
