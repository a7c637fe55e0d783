/**
 * One loopback network per workspace, under real bubblewrap with
 * `sandbox.network` off: a server a process starts on 127.0.0.1 answers the
 * same workspace's exec_shell and other processes, and no other workspace,
 * ephemeral call or the host; the network is gone (no descriptor, no
 * process holds it) once the workspace is deleted, the service closes, or
 * it has been idle.
 */
import { readdirSync, readlinkSync } from 'node:fs'
import { mkdtemp, realpath } from 'node:fs/promises'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import type { FastifyInstance } from 'fastify'
import { describe, expect, it } from 'vitest'
import { WorkspaceNetworks } from '../../src/sandbox/workspace-network.ts'
import { buildTestApp } from '../helper.ts'

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

async function call (service: FastifyInstance, tool: string, args: Json, workspace?: string): Promise<Json> {
  const response = await service.inject({ method: 'POST', url: `/v1/tools/${tool}/execute`, payload: { arguments: args, workspace } })
  const body = response.json<Json>()
  expect(response.statusCode, JSON.stringify(body)).toBe(200)
  return body['result'] as Json
}

const shell = async (service: FastifyInstance, command: string, workspace?: string): Promise<string> =>
  String((await call(service, 'exec_shell', { command }, workspace))['stdout']).trim()

/** Starts the server as a process of `workspace` and waits until it listens. */
async function startServer (service: FastifyInstance, workspace: string): Promise<void> {
  const started = await call(service, 'process_start', { command: SERVER, yield_ms: 0 }, workspace)
  let output = String(started['output'])
  while (!output.includes('ready')) {
    const got = await call(service, 'process_output', { process_id: started['process_id'], wait_ms: 5000, after: 0 }, workspace)
    expect(got['state'], String(got['output'])).toBe('running')
    output = String(got['output'])
  }
}

/** Runs the client as a process of `workspace` and answers its output once it ended. */
async function clientProcess (service: FastifyInstance, workspace: string): Promise<string> {
  const started = await call(service, 'process_start', { command: CLIENT, yield_ms: 10_000 }, workspace)
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
async function serveInA (service: FastifyInstance): Promise<string> {
  await startServer(service, 'a')
  expect(await shell(service, CLIENT, 'a')).toBe('200')
  expect(await clientProcess(service, 'a')).toBe('200')
  expect(await shell(service, CLIENT, 'b')).toMatch(/^unreachable .*Connection refused/)
  expect(await shell(service, CLIENT)).toMatch(/^unreachable .*Connection refused/)
  expect(await hostConnects()).toBe(false)
  const inA = await shell(service, 'readlink /proc/self/ns/net', 'a')
  expect(inA).toMatch(/^net:\[\d+\]$/)
  expect(await shell(service, 'readlink /proc/self/ns/net', 'a')).toBe(inA)
  expect(await shell(service, 'readlink /proc/self/ns/net', 'b')).not.toBe(inA)
  expect(holdersOf(inA).length).toBeGreaterThan(0)
  return inA
}

describe('one network per workspace (bubblewrap, network off)', () => {
  it('a process\'s server on 127.0.0.1 answers its own workspace only; deleting the workspace ends the network', async () => {
    const service = await app()
    const inA = await serveInA(service)
    const deleted = await service.inject({ method: 'DELETE', url: '/v1/workspaces/a' })
    expect(deleted.statusCode).toBe(204)
    expect(await holdersAfterEnd(inA)).toEqual([])
    // A workspace made again under the same id starts with a network of its own, empty.
    expect(await shell(service, CLIENT, 'a')).toMatch(/^unreachable .*Connection refused/)
  })

  it('closing the service ends every workspace network', async () => {
    const service = await app()
    const inA = await serveInA(service)
    await service.close()
    expect(await holdersAfterEnd(inA)).toEqual([])
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
})
