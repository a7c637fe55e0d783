/**
 * Auth as an operator sets it up: tokens from a mounted file named by
 * TOOLPORT_TOKENS_FILE, the refusal to expose an unauthenticated service,
 * and the one warning when auth is off. Starts the built server.
 */
import { writeFile } from 'node:fs/promises'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { tempDir } from '../helper.ts'
import { startServer, waitReady } from '../support/server-process.ts'

describe('auth, end to end', () => {
  it('takes tokens from TOOLPORT_TOKENS_FILE and never prints them', async () => {
    const dir = await tempDir('toolport-tokens-')
    const file = path.join(dir, 'tokens.yaml')
    await writeFile(file, '- { token: "file-token-9f2c", tenant: ops, allowed_tools: ["read_*"] }\n')
    const server = await startServer({ logging: { level: 'debug' } }, { TOOLPORT_TOKENS_FILE: file })
    await waitReady(server)
    expect((await fetch(`${server.base}/v1/tools`)).status).toBe(401)
    const answer = await fetch(`${server.base}/v1/tools`, { headers: { authorization: 'Bearer file-token-9f2c' } })
    expect(answer.status).toBe(200)
    expect(((await answer.json()) as { tools: Array<{ name: string }> }).tools.map((t) => t.name)).toEqual(['read_file'])
    await fetch(`${server.base}/v1/tools/read_file/execute`, { method: 'POST', headers: { authorization: 'Bearer file-token-9f2c', 'content-type': 'application/json' }, body: '{"arguments":{"path":"x"}}' })
    expect(server.output()).not.toContain('file-token-9f2c')
    expect(server.output()).not.toMatch(/auth is off/)
  })

  it('stops with one line naming auth.tokens_file when the file is missing', async () => {
    const server = await startServer({}, { TOOLPORT_TOKENS_FILE: '/nonexistent/tokens.yaml' })
    expect((await server.exited).code).toBe(1)
    expect(server.output()).toMatch(/^toolport: config: auth\.tokens_file: cannot read \/nonexistent\/tokens\.yaml: ENOENT\n$/)
  })

  it('stops with one line, quoting no token, when the file repeats a configured token', async () => {
    const dir = await tempDir('toolport-tokens-')
    const file = path.join(dir, 'tokens.yaml')
    await writeFile(file, '- { token: "twice-token-77", tenant: ops }\n')
    const server = await startServer({ auth: { tokens: [{ token: 'twice-token-77', tenant: 'acme' }] } }, { TOOLPORT_TOKENS_FILE: file })
    expect((await server.exited).code).toBe(1)
    expect(server.output()).toBe('toolport: config: auth.tokens_file entry 0: the same token as auth.tokens entry 0; each token names one tenant and scope\n')
  })

  it('warns once when auth is off, and listens on a non-loopback address only when auth.disabled says so', async () => {
    const server = await startServer({ auth: { disabled: true } }, { HOST: '0.0.0.0' })
    await waitReady(server)
    expect(server.output().match(/auth is off/g)).toHaveLength(1)
  })
})
