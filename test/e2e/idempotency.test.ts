/**
 * Idempotency-Key across two real server processes sharing one
 * workspaces.root: a key used on one is replayed by the other, a repeat
 * while the first runs is 409 on either, and a request whose client went
 * away runs to its end, so its retry replays instead of running twice.
 */
import { readFile, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { type RunningServer, startServer, waitReady } from '../support/server-process.ts'
import { tempDir } from '../support/temp.ts'

const EXECUTE = '/v1/tools/exec_shell/execute'

const post = (server: RunningServer, url: string, body: unknown, key?: string, signal?: AbortSignal) =>
  fetch(`${server.base}${url}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(key === undefined ? {} : { 'idempotency-key': key }) },
    body: JSON.stringify(body),
    signal,
  })

/** Two instances on one workspace root, each with its own ephemeral root. */
async function twoInstances (): Promise<{ root: string, a: RunningServer, b: RunningServer }> {
  const shared = await tempDir('toolport-shared-')
  const root = path.join(shared, 'workspaces')
  const start = (name: string) => startServer({ sandbox: { mode: 'none' }, workspaces: { root, ephemeral_root: path.join(shared, `ephemeral-${name}`) } })
  const [a, b] = await Promise.all([start('a'), start('b')])
  await Promise.all([waitReady(a), waitReady(b)])
  return { root, a, b }
}

const workspaceFile = (root: string, file: string) => path.join(root, 'tenants', 'default', 'ws', 'w', file)

async function untilFileExists (file: string): Promise<void> {
  while (!await readFile(file).then(() => true, () => false)) await new Promise((resolve) => setTimeout(resolve, 20))
}

describe('Idempotency-Key across instances', () => {
  it('replays on instance B the answer of a request made on instance A, running nothing again', async () => {
    const { root, a, b } = await twoInstances()
    const body = { workspace: 'w', arguments: { command: 'echo ran >> log.txt' } }
    const first = await post(a, EXECUTE, body, 'shared-key')
    expect(first.status).toBe(200)
    const firstBody = await first.json()
    const replayed = await post(b, EXECUTE, body, 'shared-key')
    expect(replayed.status).toBe(200)
    expect(replayed.headers.get('idempotent-replayed')).toBe('true')
    expect(await replayed.json()).toEqual(firstBody)
    const other = await post(b, EXECUTE, { ...body, arguments: { command: 'echo other >> log.txt' } }, 'shared-key')
    expect(other.status).toBe(422)
    expect(await other.json()).toMatchObject({ code: 'IdempotencyKeyReused' })
    expect(await readFile(workspaceFile(root, 'log.txt'), 'utf8')).toBe('ran\n')
  })

  it('runs a request whose client disconnected to its end: the retry replays it and the command ran once', async () => {
    const { root, a, b } = await twoInstances()
    const body = { workspace: 'w', arguments: { command: 'touch started; while [ ! -e release ]; do sleep 0.02; done; echo ran >> log.txt' } }
    const client = new AbortController()
    const first = post(a, EXECUTE, body, 'dropped', client.signal).catch(() => null)
    await untilFileExists(workspaceFile(root, 'started'))
    client.abort()
    expect(await first).toBeNull()
    // Still running on A: a repeat on either instance is a Conflict.
    for (const server of [a, b]) {
      const repeat = await post(server, EXECUTE, body, 'dropped')
      expect(repeat.status).toBe(409)
      expect(await repeat.json()).toMatchObject({ code: 'Conflict', tool: 'exec_shell' })
    }
    await writeFile(workspaceFile(root, 'release'), '')
    let retry = await post(b, EXECUTE, body, 'dropped')
    while (retry.status === 409) {
      await new Promise((resolve) => setTimeout(resolve, 50))
      retry = await post(b, EXECUTE, body, 'dropped')
    }
    expect(retry.status).toBe(200)
    expect(retry.headers.get('idempotent-replayed')).toBe('true')
    expect(await retry.json()).toMatchObject({ tool: 'exec_shell', result: { exit_code: 0 } })
    expect(await readFile(workspaceFile(root, 'log.txt'), 'utf8')).toBe('ran\n')
  })
})
