import { describe, expect, it, vi } from 'vitest'
import { buildApp, type BuildOptions } from '../src/app.ts'
import { parseConfig } from '../src/config.ts'
import { onCleanup, tempDir } from './helper.ts'

/** A listening app whose calls of `runtime.finishStart` (the sandbox probes, the tool sources) are counted. */
async function listeningApp (options: BuildOptions) {
  const config = parseConfig({ workspaces: { root: await tempDir() }, sandbox: { mode: 'none' } })
  const app = await buildApp(config, { defaultMetrics: false, ...options })
  let finishStarts = 0
  const finishStart = app.runtime.finishStart.bind(app.runtime)
  app.runtime.finishStart = () => {
    finishStarts++
    return finishStart()
  }
  // Answers how often start-up work had begun when this request was handled.
  app.get('/test/finish-starts', async () => ({ finishStarts }))
  onCleanup(() => app.close())
  await app.listen({ host: '127.0.0.1', port: 0 })
  const { port } = app.server.address() as { port: number }
  return { app, base: `http://127.0.0.1:${port}`, finishStarts: () => finishStarts }
}

describe('the start-up work that can wait', () => {
  it('begins once the first request has been answered, not before it', async () => {
    const { app, base, finishStarts } = await listeningApp({ deferredStartMs: 60_000 })
    await new Promise((resolve) => setImmediate(resolve))
    expect(finishStarts()).toBe(0)
    expect(await (await fetch(`${base}/test/finish-starts`)).json()).toEqual({ finishStarts: 0 })
    await vi.waitFor(() => { expect(finishStarts()).toBe(1) })
    await vi.waitFor(() => { expect(app.runtime.readiness).toBe('ready') })
    await fetch(`${base}/healthz`)
    expect(finishStarts()).toBe(1)
  })

  it('begins shortly after listening when no request comes', async () => {
    const { app, finishStarts } = await listeningApp({ deferredStartMs: 20 })
    await vi.waitFor(() => { expect(app.runtime.readiness).toBe('ready') }, { timeout: 10_000 })
    expect(finishStarts()).toBe(1)
  })

  it('hands a failed start (a required sandbox that does not work) to startFailed', async () => {
    const failures: Error[] = []
    const config = parseConfig({ workspaces: { root: await tempDir() }, sandbox: { mode: 'none' } })
    const app = await buildApp(config, { defaultMetrics: false, deferredStartMs: 1, startFailed: (error) => { failures.push(error) } })
    onCleanup(() => app.close())
    app.runtime.finishStart = () => Promise.reject(new Error('bubblewrap does not work here'))
    await app.listen({ host: '127.0.0.1', port: 0 })
    const { port } = app.server.address() as { port: number }
    // The wait after listening ends, then the first answer comes: the failure is handed on once.
    await vi.waitFor(() => { expect(failures).toHaveLength(1) })
    await fetch(`http://127.0.0.1:${port}/healthz`)
    await new Promise((resolve) => setTimeout(resolve, 50))
    await vi.waitFor(() => { expect(failures.map((error) => error.message)).toEqual(['bubblewrap does not work here']) })
  })

  it('does not begin when the first answer ends after the app has closed', async () => {
    const config = parseConfig({ workspaces: { root: await tempDir() }, sandbox: { mode: 'none' } })
    const app = await buildApp(config, { defaultMetrics: false, deferredStartMs: 60_000 })
    onCleanup(() => app.close())
    let arrived: () => void = () => {}
    const arrival = new Promise<void>((resolve) => { arrived = resolve })
    app.get('/test/slow', async () => {
      arrived()
      return await new Promise(() => {})
    })
    await app.listen({ host: '127.0.0.1', port: 0 })
    const { port } = app.server.address() as { port: number }
    const slow = fetch(`http://127.0.0.1:${port}/test/slow`).catch(() => undefined)
    await arrival
    await app.close()
    await slow
    await new Promise((resolve) => setTimeout(resolve, 300))
    // No sandbox was chosen: the probes never ran.
    expect(app.runtime.runner).toBeUndefined()
  })

  it('does not begin after the app has closed', async () => {
    const { app, finishStarts } = await listeningApp({ deferredStartMs: 50 })
    await app.close()
    await new Promise((resolve) => setTimeout(resolve, 200))
    expect(finishStarts()).toBe(0)
  })
})
