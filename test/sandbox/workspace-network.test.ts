/**
 * One loopback network per workspace, under real bubblewrap with
 * `sandbox.network` off: a server a process starts on 127.0.0.1 answers the
 * same workspace's exec_shell and other processes, and no other workspace,
 * ephemeral call or the host; the network is gone (no descriptor, no
 * process holds it) once the workspace is deleted, the service closes, or
 * it has been idle. On /mcp the session's workspace shares one network from
 * its first process on.
 */
import { spawnSync } from 'node:child_process'
import { readdirSync, readlinkSync } from 'node:fs'
import { mkdtemp, realpath } from 'node:fs/promises'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import type { Client } from '@modelcontextprotocol/sdk/client/index.js'
import type { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js'
import type { FastifyInstance } from 'fastify'
import { describe, expect, it } from 'vitest'
import { WorkspaceNetworks } from '../../src/sandbox/workspace-network.ts'
import { buildTestApp } from '../helper.ts'
import { listening, mcpClient } from '../support/listening.ts'

type Json = Record<string, any>

const port = 20_000 + Math.floor(Math.random() * 20_000)

/** A python server on 127.0.0.1:`port` that says `ready` once it listens. */
const SERVER = `python3 -u -c "import http.server as h; s = h.HTTPServer(('127.0.0.1', ${port}), h.SimpleHTTPRequestHandler); print('ready'); s.serve_forever()"`
/** Prints the server's status code, or the reason it could not be reached. */
const CLIENT = `python3 -c "
import urllib.request
try: print(urllib.request.urlopen('http://127.0.0.1:${port}/', timeout=5).status)
except Exception as e: print('unreachable', e)"`

async function app (): Promise<FastifyInstance> {
  return buildTestApp({ sandbox: { mode: 'bwrap', network: false }, tools: { builtin: ['*'] } })
}

/** Calls a tool in one workspace and answers its result. */
type Caller = (tool: string, args: Json) => Promise<Json>

/** Over REST, in the persistent `workspace` (an ephemeral one when undefined). */
const rest = (service: FastifyInstance, workspace?: string): Caller => async (tool, args) => {
  const response = await service.inject({ method: 'POST', url: `/v1/tools/${tool}/execute`, payload: { arguments: args, workspace } })
  const body = response.json<Json>()
  expect(response.statusCode, JSON.stringify(body)).toBe(200)
  return body['result'] as Json
}

/** Over /mcp, in the session's workspace. */
const mcp = (client: Client): Caller => async (tool, args) => {
  const result = await client.callTool({ name: tool, arguments: args })
  expect(result.isError, JSON.stringify(result.content)).toBeFalsy()
  return result.structuredContent as Json
}

const shell = async (call: Caller, command: string): Promise<string> => String((await call('exec_shell', { command }))['stdout']).trim()

/** Starts the server as a process and waits until it listens. */
async function startServer (call: Caller): Promise<void> {
  const started = await call('process_start', { command: SERVER, yield_ms: 0 })
  let output = String(started['output'])
  while (!output.includes('ready')) {
    const got = await call('process_output', { process_id: started['process_id'], wait_ms: 5000, after: 0 })
    expect(got['state'], String(got['output'])).toBe('running')
    output = String(got['output'])
  }
}

/** Runs the client as a process and answers its output once it ended. */
async function clientProcess (call: Caller): Promise<string> {
  const started = await call('process_start', { command: CLIENT, yield_ms: 10_000 })
  expect(started['state']).toBe('exited')
  return String(started['output']).trim()
}

function hostConnects (): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port })
    socket.once('connect', () => { socket.destroy(); resolve(true) })
    socket.once('error', () => resolve(false))
  })
}

/** What on the host still holds the network namespace `id` ("net:[…]"): our descriptors and processes in it. */
function holdersOf (id: string): string[] {
  const found: string[] = []
  const look = (link: string): void => {
    try {
      if (readlinkSync(link) === id) found.push(link)
    } catch {
      // Gone meanwhile, or not ours to read.
    }
  }
  for (const fd of readdirSync('/proc/self/fd')) look(`/proc/self/fd/${fd}`)
  for (const pid of readdirSync('/proc')) if (/^\d+$/.test(pid)) look(`/proc/${pid}/ns/net`)
  return found
}

/** Waits (a few seconds at most) until nothing holds the namespace; answers what still does. */
async function holdersAfterEnd (id: string): Promise<string[]> {
  for (let attempt = 0; attempt < 100; attempt++) {
    if (holdersOf(id).length === 0) return []
    await sleep(50)
  }
  return holdersOf(id)
}

/** Workspace a's server reached from a (exec_shell and a process) and from nowhere else; answers a's network namespace. */
async function serveIn (service: FastifyInstance, a: Caller): Promise<string> {
  await startServer(a)
  expect(await shell(a, CLIENT)).toBe('200')
  expect(await clientProcess(a)).toBe('200')
  expect(await shell(rest(service, 'b'), CLIENT)).toMatch(/^unreachable .*Connection refused/)
  expect(await shell(rest(service), CLIENT)).toMatch(/^unreachable .*Connection refused/)
  expect(await hostConnects()).toBe(false)
  const inA = await shell(a, 'readlink /proc/self/ns/net')
  expect(inA).toMatch(/^net:\[\d+\]$/)
  expect(await shell(a, 'readlink /proc/self/ns/net')).toBe(inA)
  expect(await shell(rest(service, 'b'), 'readlink /proc/self/ns/net')).not.toBe(inA)
  expect(holdersOf(inA).length).toBeGreaterThan(0)
  return inA
}

describe('one network per workspace (bubblewrap, network off)', () => {
  it('a process\'s server on 127.0.0.1 answers its own workspace only; deleting the workspace ends the network', async () => {
    const service = await app()
    const inA = await serveIn(service, rest(service, 'a'))
    const deleted = await service.inject({ method: 'DELETE', url: '/v1/workspaces/a' })
    expect(deleted.statusCode).toBe(204)
    expect(await holdersAfterEnd(inA)).toEqual([])
    // A workspace made again under the same id starts with a network of its own, empty.
    expect(await shell(rest(service, 'a'), CLIENT)).toMatch(/^unreachable .*Connection refused/)
  })

  it('closing the service ends every workspace network', async () => {
    const service = await app()
    const inA = await serveIn(service, rest(service, 'a'))
    await service.close()
    expect(await holdersAfterEnd(inA)).toEqual([])
  })

  it('on /mcp, the session\'s workspace shares one network once a process runs there, which ends with the session', async () => {
    const service = await app()
    const client = await mcpClient(await listening(service))
    const inSession = await serveIn(service, mcp(client))
    await (client.transport as StreamableHTTPClientTransport).terminateSession()
    expect(await holdersAfterEnd(inSession)).toEqual([])
  })

  it('an idle network is closed, and a later command gets a fresh one', async () => {
    const dir = await realpath(await mkdtemp(path.join(os.tmpdir(), 'toolport-net-')))
    const networks = new WorkspaceNetworks({ sharedByEveryCommand: (each) => each === dir, idleMs: 50 })
    expect(await networks.join(path.join(dir, 'elsewhere'), false)).toBeUndefined()
    const [first, second] = await Promise.all([networks.join(dir, false), networks.join(dir, false)])
    expect(first?.prefix).toEqual(second?.prefix)
    expect(networks.size).toBe(1)
    first?.release()
    await sleep(200)
    // Still in use by the second command: kept.
    expect(networks.size).toBe(1)
    second?.release()
    for (let attempt = 0; attempt < 100 && networks.size > 0; attempt++) await sleep(20)
    expect(networks.size).toBe(0)
    const again = await networks.join(dir, false)
    expect(again).toBeDefined()
    networks.close()
    again?.release()
  })

  it('a network that ends while it is being made is never leased, and its descriptors are closed', async () => {
    const dir = await realpath(await mkdtemp(path.join(os.tmpdir(), 'toolport-net-')))
    const networks = new WorkspaceNetworks({ sharedByEveryCommand: (each) => each === dir })
    const namespaces = (): string[] => readdirSync('/proc/self/fd').flatMap((fd) => {
      try {
        const target = readlinkSync(`/proc/self/fd/${fd}`)
        return target.startsWith('net:[') || target.startsWith('user:[') ? [target] : []
      } catch {
        return []
      }
    })
    const before = namespaces()
    const joining = networks.join(dir, false)
    networks.close()
    expect(await joining).toBeUndefined()
    expect(namespaces()).toEqual(before)
  })
})

describe('a workspace network that cannot be made', () => {
  it('fails the command that needed it, not the service, when no descriptor is left for bubblewrap\'s pipes', () => {
    // In a process of its own, whose descriptors this fills up: an unhandled rejection there would end it.
    const script = `
      import { openSync } from 'node:fs'
      import { WorkspaceNetworks } from ${JSON.stringify(new URL('../../src/sandbox/workspace-network.ts', import.meta.url).pathname)}
      const networks = new WorkspaceNetworks({ sharedByEveryCommand: () => true })
      const held = []
      try { for (;;) held.push(openSync('/dev/null', 'r')) } catch {}
      const failed = await networks.join('/nowhere', true).then(() => 'made', (error) => error.code)
      await new Promise((resolve) => setTimeout(resolve, 200))
      console.log(failed, 'alive')
    `
    const run = spawnSync('prlimit', ['--nofile=64:64', process.execPath, '--input-type=module', '-e', script], { encoding: 'utf8', timeout: 20_000 })
    expect(run.stderr).toBe('')
    expect(run.stdout.trim()).toBe('EMFILE alive')
  })
})
