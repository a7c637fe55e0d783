/** The shipped examples/tools (a du shim and a weather tool with stub mode), through the service. */
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { buildTestApp, exec } from '../helper.ts'
import { expectProblem } from '../support/problem.ts'

const EXAMPLES = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'examples', 'tools')

function examplesApp (stub: boolean, mode = 'none') {
  return buildTestApp({ tools: { dirs: [EXAMPLES], stub, executable_timeout_seconds: 20 }, sandbox: { mode } })
}

describe('examples/tools', () => {
  it('are catalogued as executables with their own schemas', async () => {
    const app = await examplesApp(true)
    const tools = (await app.inject({ method: 'GET', url: '/v1/tools?allowed=disk_usage,get_weather' })).json().tools
    expect(tools.map((t: { name: string, source: string }) => [t.name, t.source])).toEqual([['disk_usage', 'executable'], ['get_weather', 'executable']])
    expect(tools[1].parameters.required).toEqual(['location'])
  })

  it('disk_usage measures a path inside the workspace with du', async () => {
    const app = await examplesApp(true)
    await exec(app, 'write_file', { path: 'data/big.bin', content: 'x'.repeat(64 * 1024) }, { workspace: 'du' })
    const data = await exec(app, 'disk_usage', { path: 'data' }, { workspace: 'du' })
    expect(data.status).toBe(200)
    expect(data.body.result).toEqual({ path: 'data', kilobytes: expect.any(Number) })
    expect(data.body.result.kilobytes).toBeGreaterThanOrEqual(64)
    const whole = await exec(app, 'disk_usage', {}, { workspace: 'du' })
    expect(whole.body.result.path).toBe('.')
    expect(whole.body.result.kilobytes).toBeGreaterThanOrEqual(data.body.result.kilobytes)
  })

  it('disk_usage refuses paths that leave the workspace, symlinks included', async () => {
    const app = await examplesApp(true)
    await exec(app, 'exec_shell', { command: 'ln -s /etc out && mkdir -p d && ln -s ../.. d/up' }, { workspace: 'esc' })
    const cases: Array<[string, RegExp]> = [
      ['/etc', /must be relative/],
      ['../', /must not contain "\.\."/],
      ['d/../../x', /must not contain "\.\."/],
      ['out', /leaves the workspace/],
      ['d/up', /leaves the workspace/],
      ['missing', /no such file or directory/],
    ]
    for (const [target, reason] of cases) {
      const body = expectProblem(await exec(app, 'disk_usage', { path: target }, { workspace: 'esc' }), 500, 'ExecutionFailed', 'disk_usage')
      expect(String(body['stderr']), target).toMatch(reason)
    }
  })

  it('get_weather answers a canned reading in stub mode', async () => {
    const app = await examplesApp(true)
    expect((await exec(app, 'get_weather', { location: 'Half Moon Bay' })).body.result)
      .toEqual({ location: 'Half Moon Bay', temperature: 15, unit: 'celsius', condition: 'Sunny', stub: true })
    expect((await exec(app, 'get_weather', { location: 'Oslo', unit: 'fahrenheit' })).body.result).toMatchObject({ temperature: 59, unit: 'fahrenheit' })
    expectProblem(await exec(app, 'get_weather', {}), 400, 'InvalidArgs', 'get_weather')
  })

  it('get_weather without stub mode and without network fails clearly (exit 1, reason on stderr)', async () => {
    // bwrap with sandbox.network false: no route out, so the test never reaches the internet.
    const app = await examplesApp(false, 'bwrap')
    const body = expectProblem(await exec(app, 'get_weather', { location: 'Oslo' }), 500, 'ExecutionFailed', 'get_weather')
    expect(body['exit_code']).toBe(1)
    expect(String(body['stderr'])).toMatch(/^get_weather: cannot reach wttr\.in \(this tool needs the internet; set SHELLCLAW_STUB=1/)
  })
})
