/** Self-describing executables (shellclaw): discovery, calls, stub mode and live changes, with real files and processes. */
import { readFile, rm } from 'node:fs/promises'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { parseConfig } from '../../src/config.ts'
import { createRunner } from '../../src/sandbox/index.ts'
import { ExecutableSource } from '../../src/sources/executables.ts'
import type { AnyTool } from '../../src/execution/tool.ts'
import { buildTestApp, exec, onCleanup, tempDir } from '../helper.ts'
import { expectProblem } from '../support/problem.ts'
import { alive } from '../support/processes.ts'
import { capturingLogger, describeJson, eventually, placeTool, shTool, toolsDir } from './helpers.ts'

type App = Awaited<ReturnType<typeof buildTestApp>>

/** `leaf` wrapped `levels` times by `wrap`. */
function nested (levels: number, leaf: unknown, wrap: (inner: unknown) => unknown): unknown {
  let value = leaf
  for (let level = 0; level < levels; level++) value = wrap(value)
  return value
}

function appWith (dir: string, tools: Record<string, unknown> = {}, mode = 'none'): Promise<App> {
  return buildTestApp({ tools: { dirs: [dir], stub: true, executable_timeout_seconds: 1, ...tools }, sandbox: { mode } })
}

async function catalogNames (app: App): Promise<string[]> {
  const response = await app.inject({ method: 'GET', url: '/v1/tools' })
  return response.json().tools.filter((t: { source: string }) => t.source === 'executable').map((t: { name: string }) => t.name)
}

describe('executable tool discovery', () => {
  it('catalogs the tools that describe themselves and skips the rest with one warning each, naming file and reason', async () => {
    const dir = await toolsDir()
    await placeTool(dir, 'greet.sh', shTool(describeJson('greet', 'Say hello', { who: { type: 'string' } }), 'echo hello'))
    await placeTool(dir, 'not-json', shTool('this is not json', 'true'))
    await placeTool(dir, 'exits', '#!/bin/sh\necho "cannot describe: missing dependency" >&2\nexit 3\n')
    await placeTool(dir, 'no-params', shTool(JSON.stringify({ name: 'np', description: 'x' }), 'true'))
    await placeTool(dir, 'slow', '#!/bin/sh\nsleep 10\n')
    await placeTool(dir, 'plain.txt', shTool(describeJson('plain'), 'true'), 0o644)
    await placeTool(dir, '.hidden', shTool(describeJson('hidden'), 'true'))
    await placeTool(dir, 'dots', shTool(describeJson('..'), 'true'))
    // Past what can be serialised again, it would have broken the catalog for every caller.
    await placeTool(dir, 'deep', shTool(JSON.stringify({ name: 'deep', description: 'x', parameters: nested(300, { type: 'string' }, (inner) => ({ type: 'object', properties: { a: inner } })) }), 'true'))
    // Input schemas MCP's Tool does not take: one would make MCP clients refuse the whole catalog.
    const schemaOf = (name: string, parameters: unknown) => shTool(JSON.stringify({ name, description: 'x', parameters }), 'true')
    await placeTool(dir, 'huge', '#!/bin/sh\nhead -c 2097152 /dev/zero | tr "\\0" " "\n')
    await placeTool(dir, 'empty-schema', schemaOf('empty_schema', {}))
    await placeTool(dir, 'array-schema', schemaOf('array_schema', { type: 'array' }))
    await placeTool(dir, 'bad-properties', schemaOf('bad_properties', { type: 'object', properties: 'nope' }))
    await placeTool(dir, 'bad-required', schemaOf('bad_required', { type: 'object', required: 'x' }))
    const { log, lines } = capturingLogger()
    const runner = await createRunner(parseConfig({ sandbox: { mode: 'none' } }).sandbox, { log })
    let published: AnyTool[] = []
    const source = new ExecutableSource({ dirs: [dir], stub: false, timeoutSeconds: 1, runner, log, describeTimeoutMs: 500, onChange: (tools) => { published = tools } })
    onCleanup(async () => source.close())
    await source.start()
    await source.rescan()
    await source.rescan()

    expect(published.map((t) => [t.name, t.source, t.description])).toEqual([['greet', 'executable', 'Say hello']])
    expect(published[0]?.parameters).toEqual({ type: 'object', properties: { who: { type: 'string' } } })
    const reasons = Object.fromEntries(lines.map((line) => [path.basename(String(line['file'])), String(line['reason'])]))
    expect(reasons).toEqual({
      'not-json': '--describe did not print valid JSON',
      exits: '--describe exited with code 3: cannot describe: missing dependency',
      'no-params': 'parameters must be a JSON Schema object',
      slow: '--describe took longer than 500 ms',
      'plain.txt': 'the file is not executable',
      deep: 'parameters nest more than 200 levels deep',
      dots: 'name must be a string of 1 to 128 letters, digits, "_", "." or "-", not dots alone',
      huge: '--describe printed more than 1 MiB',
      'empty-schema': 'parameters must have "type": "object" at the top level',
      'array-schema': 'parameters must have "type": "object" at the top level',
      'bad-properties': 'parameters.properties must map each name to a schema object',
      'bad-required': 'parameters.required must be a list of property names',
    })
    // One warning per file, although the directory was scanned three times.
    expect(lines).toHaveLength(12)
    expect(lines.every((line) => line.level === 40 && String(line['file']).startsWith(dir))).toBe(true)
  })

  it('joins the service catalog with source "executable"; only catalogued names run', async () => {
    const dir = await toolsDir()
    await placeTool(dir, 'greet.sh', shTool(describeJson('greet'), 'echo hello'))
    await placeTool(dir, 'broken', '#!/bin/sh\nexit 1\n')
    const app = await appWith(dir)
    const entry = await app.inject({ method: 'GET', url: '/v1/tools/greet' })
    // An executable that declares no annotations has MCP's default hints.
    const defaults = { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: true }
    expect(entry.json()).toEqual({ name: 'greet', description: 'the greet tool', parameters: { type: 'object', properties: {} }, source: 'executable', annotations: defaults })
    expect((await exec(app, 'greet', {})).body.result).toBe('hello\n')
    // Default-deny: the file's name, a path to it, a skipped file and a system binary are not tools.
    for (const name of ['greet.sh', path.join(dir, 'greet.sh'), 'broken', '/bin/sh', '../tools/greet.sh', 'GREET']) {
      expectProblem(await exec(app, name, {}), 404, 'NotFound', name)
    }
  })
})

describe('executable tool calls', () => {
  it('passes the arguments as exactly one argv element ($1) and runs in the workspace', async () => {
    const dir = await toolsDir()
    await placeTool(dir, 'argv', shTool(describeJson('argv', 'x', { text: { type: 'string' } }),
      'printf "%s" "$1" > arg.json\npwd > cwd.txt\nprintf \'{"argc": %s}\' "$#"'))
    const app = await appWith(dir)
    const args = { text: 'two words; $(touch pwned) `id` \'q\' "d" * \n' }
    const answer = await exec(app, 'argv', args, { workspace: 'w1' })
    expect(answer.status).toBe(200)
    expect(answer.body.result).toEqual({ argc: 1 })
    expect((await exec(app, 'read_file', { path: 'arg.json' }, { workspace: 'w1' })).body.result.content).toBe(JSON.stringify(args))
    const cwd = (await exec(app, 'read_file', { path: 'cwd.txt' }, { workspace: 'w1' })).body.result.content.trim()
    expect(cwd.startsWith(app.runtime.workspaces.root)).toBe(true)
    expect(path.basename(cwd)).toBe('w1')
    expectProblem(await exec(app, 'read_file', { path: 'pwned' }, { workspace: 'w1' }), 404, 'FileNotFound')
  })

  it('parses JSON stdout and keeps any other stdout as a string', async () => {
    const dir = await toolsDir()
    await placeTool(dir, 'json', shTool(describeJson('json_out'), 'echo \'{"a": [1, 2], "b": null}\''))
    await placeTool(dir, 'text', shTool(describeJson('text_out'), 'printf "line one\\n{not json"'))
    const app = await appWith(dir)
    expect((await exec(app, 'json_out', {})).body.result).toEqual({ a: [1, 2], b: null })
    expect((await exec(app, 'text_out', {})).body.result).toBe('line one\n{not json')
    // JSON nested past what a result may be is text too.
    await placeTool(dir, 'deep', shTool(describeJson('deep_out'), `printf '%s' '${'['.repeat(5000)}1${']'.repeat(5000)}'`))
    await eventually(async () => (await catalogNames(app)).includes('deep_out'))
    const deep = await exec(app, 'deep_out', {})
    expect(deep.status).toBe(200)
    expect(deep.body.result).toMatch(/^\[{5000}1\]{5000}$/)
    // So is JSON whose numbers a double cannot keep (a 64-bit id, 34 digits, past a double): never changed in silence.
    const lossy = '{"id":1234567890123456789,"amount":0.1000000000000000055511151231257827,"huge":1e400}'
    await placeTool(dir, 'lossy', shTool(describeJson('lossy_out'), `printf '%s' '${lossy}'`))
    await placeTool(dir, 'exact', shTool(describeJson('exact_out'), 'printf \'%s\' \'{"id":9007199254740991,"f":1.50,"e":-1.25E+3,"z":-0.0,"n":123e-2}\''))
    await eventually(async () => (await catalogNames(app)).includes('lossy_out') && (await catalogNames(app)).includes('exact_out'))
    expect((await exec(app, 'lossy_out', {})).body.result).toBe(lossy)
    expect((await exec(app, 'exact_out', {})).body.result).toEqual({ id: 9007199254740991, f: 1.5, e: -1250, z: 0, n: 1.23 })
  })

  it('keeps of stdout four times the result limit: a longer output is its text, cut, never parsed; arguments too long to pass are 400', async () => {
    const dir = await toolsDir()
    // 1 MiB of `[],[],…`: parsed whole, a few MiB of this became a GiB of arrays in the service.
    await placeTool(dir, 'bomb', shTool(describeJson('json_bomb'), 'printf "["; head -c 1048576 /dev/zero | sed "s/./[],/g" | tr -d "\\n"; printf "0]"'))
    await placeTool(dir, 'fits', shTool(describeJson('json_fits'), 'printf "["; i=0; while [ $i -lt 1000 ]; do printf "[],"; i=$((i+1)); done; printf "0]"'))
    await placeTool(dir, 'echo', shTool(describeJson('echo_arg', 'x', { pad: { type: 'string' } }), 'printf "{}"'))
    const app = await appWith(dir)
    const bomb = await exec(app, 'json_bomb', {}, { max_result_bytes: 4096 })
    expect(bomb.status).toBe(200)
    expect(bomb.body).toMatchObject({ truncated: true })
    expect(typeof bomb.body.result).toBe('string')
    expect(bomb.body.result).toMatch(/^\[\[\],\[\],/)
    // The notice names what the tool printed (3 MiB and 3 bytes), not what was kept of it.
    expect(bomb.body.result).toMatch(/\n\.\.\. \(output truncated: 3145731 total bytes, showing first \d+\)$/)
    expect(JSON.stringify(bomb.body.result).length).toBeLessThanOrEqual(4096)
    // Within the limit's fourfold, JSON is still JSON (cut as an array is).
    const fits = await exec(app, 'json_fits', {}, { max_result_bytes: 4096 })
    expect(Array.isArray(fits.body.result)).toBe(true)
    const long = expectProblem(await exec(app, 'echo_arg', { pad: 'a'.repeat(140_000) }), 400, 'InvalidArgs', 'echo_arg')
    expect(long['detail']).toMatch(/^arguments: one argument is 140\d{3} bytes, .*pass long content through a file in the workspace$/)
  })

  it('answers a non-zero exit with 500 ExecutionFailed carrying stderr, capped', async () => {
    const dir = await toolsDir()
    await placeTool(dir, 'fails', shTool(describeJson('fails'), 'echo "partial output"\necho "the widget is jammed" >&2\nexit 3'))
    await placeTool(dir, 'noisy', shTool(describeJson('noisy'), 'head -c 100000 /dev/zero | tr "\\0" "e" >&2\nexit 1'))
    const app = await appWith(dir)
    const failed = expectProblem(await exec(app, 'fails', {}), 500, 'ExecutionFailed', 'fails')
    expect(failed['detail']).toBe('fails exited with code 3: the widget is jammed')
    expect(failed).toMatchObject({ exit_code: 3, stderr: 'the widget is jammed\n' })
    const noisy = expectProblem(await exec(app, 'noisy', {}), 500, 'ExecutionFailed', 'noisy')
    expect(Buffer.byteLength(String(noisy['stderr']))).toBeLessThanOrEqual(4100)
    expect(String(noisy['stderr'])).toMatch(/^e{4000,}/)
  })

  it('answers an executable killed by a signal with the code a shell gives, naming the signal, with or without bubblewrap', async () => {
    const dir = await toolsDir()
    await placeTool(dir, 'crashes', shTool(describeJson('crashes'), 'kill -SEGV $$'))
    const plain = expectProblem(await exec(await appWith(dir), 'crashes', {}), 500, 'ExecutionFailed', 'crashes')
    expect(plain).toMatchObject({ detail: 'crashes was killed by SIGSEGV (code 139)', exit_code: 139 })
    const sandboxed = expectProblem(await exec(await appWith(dir, {}, 'bwrap'), 'crashes', {}), 500, 'ExecutionFailed', 'crashes')
    expect(sandboxed).toMatchObject({ exit_code: 139 })
  })

  it('answers a call that outlives the timeout with 504 Timeout and kills it', async () => {
    const dir = await toolsDir()
    await placeTool(dir, 'sleepy', shTool(describeJson('sleepy'), 'echo $$ > pid\nexec sleep 30'))
    const app = await appWith(dir)
    const body = expectProblem(await exec(app, 'sleepy', {}, { workspace: 'slow' }), 504, 'Timeout', 'sleepy')
    expect(body['detail']).toMatch(/timed out after 1s/)
    const pid = Number((await exec(app, 'read_file', { path: 'pid' }, { workspace: 'slow' })).body.result.content)
    expect(pid).toBeGreaterThan(1)
    expect(await eventually(async () => !(await alive(pid)))).toBe(true)
  })

  it('sets SHELLCLAW_STUB=1 for every executable when tools.stub is true, and only then', async () => {
    const dir = await toolsDir()
    await placeTool(dir, 'stub', shTool(describeJson('stub_probe'), '[ -n "$SHELLCLAW_STUB" ] || SHELLCLAW_STUB=unset\nprintf \'{"stub": "%s"}\' "$SHELLCLAW_STUB"'))
    const stubbed = await appWith(dir, { stub: true })
    expect((await exec(stubbed, 'stub_probe', {})).body.result).toEqual({ stub: '1' })
    const live = await appWith(dir, { stub: false })
    expect((await exec(live, 'stub_probe', {})).body.result).toEqual({ stub: 'unset' })
  })

  it('runs executables inside bubblewrap when the sandbox is bwrap', async () => {
    const dir = await toolsDir()
    await placeTool(dir, 'who', shTool(describeJson('who'), `id -u > uid.txt
if touch "${dir}/planted" 2>/dev/null; then echo '{"tool_dir_writable": true}'; else echo '{"tool_dir_writable": false}'; fi`))
    const app = await appWith(dir, {}, 'bwrap')
    expect(app.runtime.runner.mode).toBe('bwrap')
    expect((await app.inject({ method: 'GET', url: '/v1/tools/who' })).json().source).toBe('executable')
    const answer = await exec(app, 'who', {}, { workspace: 'sb' })
    expect(answer.body.result).toEqual({ tool_dir_writable: false })
    expect((await exec(app, 'read_file', { path: 'uid.txt' }, { workspace: 'sb' })).body.result.content.trim()).toBe('65534')
  })
})

describe('executable tool discovery, many at once', () => {
  it('describes several executables at a time: one slow --describe does not hold back the others', async () => {
    const dir = await toolsDir()
    const trace = path.join(await tempDir('toolport-trace-'), 'describes')
    for (const name of ['a', 'b', 'c']) {
      await placeTool(dir, name, `#!/bin/sh
if [ "$1" = "--describe" ]; then
  echo "start ${name}" >> "${trace}"
  sleep 1
  echo "end ${name}" >> "${trace}"
  echo '${describeJson(`slow_${name}`)}'
fi
`)
    }
    const app = await appWith(dir, { executable_timeout_seconds: 5 })
    expect(await eventually(async () => (await catalogNames(app)).length === 3, 10_000)).toBe(true)
    // Every describe started before any ended: they ran side by side.
    const lines = (await readFile(trace, 'utf8')).split('\n').filter(Boolean)
    expect(lines.slice(0, 3).every((line) => line.startsWith('start'))).toBe(true)
  })
})

describe('executable tool changes while the service runs', () => {
  it('sees a tool added, changed and removed within 5 s, without running --describe per request', async () => {
    const dir = await toolsDir()
    const counter = path.join(await tempDir('toolport-count-'), 'describes')
    const tool = (description: string) => `#!/bin/sh
if [ "$1" = "--describe" ]; then
  echo describe >> "${counter}"
  echo '${describeJson('live', description)}'
  exit 0
fi
echo '"${description}"'
`
    const describes = async () => (await readFile(counter, 'utf8').catch(() => '')).split('\n').filter(Boolean).length
    const app = await appWith(dir)
    expect(await catalogNames(app)).toEqual([])

    await placeTool(dir, 'live', tool('first'))
    expect(await eventually(async () => (await catalogNames(app)).includes('live'))).toBe(true)
    for (let i = 0; i < 5; i++) {
      expect((await exec(app, 'live', {})).body.result).toBe('first')
      await app.inject({ method: 'GET', url: '/v1/tools' })
    }
    expect(await describes()).toBe(1)

    await placeTool(dir, 'live', tool('second'))
    expect(await eventually(async () => (await app.inject({ method: 'GET', url: '/v1/tools/live' })).json().description === 'second')).toBe(true)
    expect((await exec(app, 'live', {})).body.result).toBe('second')
    expect(await describes()).toBe(2)

    await rm(path.join(dir, 'live'))
    expect(await eventually(async () => !(await catalogNames(app)).includes('live'))).toBe(true)
    expectProblem(await exec(app, 'live', {}), 404, 'NotFound', 'live')
  })
})

describe('a call whose workspace is deleted while it runs', () => {
  it('answers NotFound, as a call after the deletion would, not the failure the tool met there', async () => {
    const dir = await toolsDir()
    // Fails once its workspace is gone: what a command, or a file tool, meets when the files go from under it.
    await placeTool(dir, 'needs-dir', shTool(describeJson('needs_dir'), 'touch "$PWD/mine"; sleep 0.5; test -f "$PWD/mine" || { echo "no workspace" >&2; exit 1; }; echo ok'))
    const app = await appWith(dir, { executable_timeout_seconds: 10 })
    expect(await eventually(async () => (await catalogNames(app)).includes('needs_dir'))).toBe(true)
    expect((await exec(app, 'needs_dir', {}, { workspace: 'kept' })).body.result).toBe('ok\n')
    // Deleted, and deleted and made again (as another instance may, by then), while the call runs.
    for (const madeAgain of [false, true]) {
      expect((await app.inject({ method: 'POST', url: '/v1/workspaces', payload: { id: 'doomed' } })).statusCode).toBe(201)
      const call = exec(app, 'needs_dir', {}, { workspace: 'doomed' })
      await new Promise((resolve) => setTimeout(resolve, 150))
      expect((await app.inject({ method: 'DELETE', url: '/v1/workspaces/doomed' })).statusCode).toBe(204)
      if (madeAgain) expect((await app.inject({ method: 'POST', url: '/v1/workspaces', payload: { id: 'doomed' } })).statusCode).toBe(201)
      expectProblem(await call, 404, 'NotFound', 'needs_dir')
      if (madeAgain) expect((await app.inject({ method: 'DELETE', url: '/v1/workspaces/doomed' })).statusCode).toBe(204)
    }
  })
})
