/**
 * The Dockerfile, checked without a Docker engine: the dockerfile-utils linter
 * (the one behind VS Code's Docker support) finds no problem, and the image
 * follows the operations rules of issue 6.
 */
import { existsSync, readFileSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { validate } from 'dockerfile-utils'
import { describe, expect, it } from 'vitest'
import { parse as parseYaml } from 'yaml'
import { parseConfig } from '../../src/config.ts'

const ROOT = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..')
const dockerfile = readFileSync(path.join(ROOT, 'Dockerfile'), 'utf8')

interface Instruction { keyword: string, args: string }

/** Instructions with continuation lines joined, comments dropped. */
function instructions (text: string): Instruction[] {
  const joined = text.split('\n').filter((line) => !/^\s*#/.test(line)).join('\n').replace(/\\\n/g, ' ')
  return joined.split('\n').map((line) => line.trim()).filter(Boolean).map((line) => {
    const [keyword = '', ...rest] = line.split(/\s+/)
    return { keyword: keyword.toUpperCase(), args: rest.join(' ') }
  })
}

const all = instructions(dockerfile)
const stages = all.reduce<Instruction[][]>((list, instruction) => {
  if (instruction.keyword === 'FROM') list.push([])
  list.at(-1)?.push(instruction)
  return list
}, [])
const final = stages.at(-1) ?? []
const finalOf = (keyword: string) => final.filter((i) => i.keyword === keyword)

describe('Dockerfile', () => {
  it('passes the linter', () => {
    expect(validate(dockerfile).map((d) => `line ${d.range.start.line + 1}: ${d.message}`)).toEqual([])
  })

  it('lint would catch a broken Dockerfile', () => {
    const problems = validate('FROM node:24-bookworm-slim\nCMD ["a"]\nCMD ["b"]\nMAINTAINER someone\nEXPOSE 8080/sctpx\n')
    expect(problems.length).toBeGreaterThanOrEqual(2)
  })

  it('is multi-stage on Node 24 slim, and the runtime stage copies built output only', () => {
    expect(stages.length).toBeGreaterThanOrEqual(2)
    for (const stage of stages) expect(stage[0]?.args).toMatch(/^node:24-[a-z]+-slim\b/)
    expect(finalOf('COPY').every((c) => c.args.startsWith('--from=') || c.args.startsWith('package.json'))).toBe(true)
  })

  it('runs as a numeric non-root user with tini as PID 1', () => {
    const user = finalOf('USER').at(-1)?.args ?? ''
    expect(user).toMatch(/^[1-9]\d*(:\d+)?$/)
    expect(finalOf('ENTRYPOINT').at(-1)?.args).toMatch(/^\["\/usr\/bin\/tini", "--"\]$/)
    const run = finalOf('RUN').map((r) => r.args).join(' ')
    expect(run).toMatch(/apt-get install[^&]*\btini\b/)
  })

  it('installs bubblewrap, keeps apt lists out of the image, and declares the workspace volume', () => {
    const run = finalOf('RUN').map((r) => r.args).join(' ')
    expect(run).toMatch(/apt-get install[^&]*--no-install-recommends[^&]*\bbubblewrap\b/)
    expect(run).toMatch(/rm -rf \/var\/lib\/apt\/lists/)
    expect(finalOf('VOLUME').at(-1)?.args).toContain('/var/lib/toolport/workspaces')
  })

  it('is run (its header, DEPLOY.md) with a config that keeps workspaces on its volume and gives tokens, as it listens on 0.0.0.0', () => {
    const mounted = /-v \$PWD\/(\S+):\/etc\/toolport\/toolport\.yaml/.exec(dockerfile)?.[1] ?? ''
    expect(mounted).toBe('deploy/compose/toolport.yaml')
    const config = parseConfig(parseYaml(readFileSync(path.join(ROOT, mounted), 'utf8')))
    const volume = finalOf('VOLUME').at(-1)?.args ?? ''
    expect(volume).toContain(config.workspaces.root)
    expect(/\bHOST=(\S+)/.exec(finalOf('ENV').map((e) => e.args).join(' '))?.[1]).toBe('0.0.0.0')
    expect(config.auth.tokens.length).toBeGreaterThan(0)
  })

  it('gives HOME a directory that the compose file and the Deployment keep writable (npx writes its cache there)', () => {
    const home = /\bHOME=(\S+)/.exec(finalOf('ENV').map((e) => e.args).join(' '))?.[1]
    expect(home).toBe('/tmp')
    expect(readFileSync(path.join(ROOT, 'docker-compose.yml'), 'utf8')).toMatch(/tmpfs: \["\/tmp"\]/)
    expect(readFileSync(path.join(ROOT, 'deploy/kubernetes/deployment.yaml'), 'utf8')).toMatch(/mountPath: \/tmp \}/)
  })

  it('has a HEALTHCHECK on /healthz and starts the built server', () => {
    expect(finalOf('HEALTHCHECK').at(-1)?.args).toMatch(/\/healthz/)
    expect(finalOf('CMD').at(-1)?.args).toContain('dist/bundle/server.js')
  })

  it('starts node with the same flags as `npm start` (what the benchmark measures)', () => {
    const pkg = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { scripts: { start: string } }
    const flags = pkg.scripts.start.split(' ').filter((word) => word.startsWith('--'))
    expect(flags).toEqual(['--max-semi-space-size=8'])
    expect(JSON.parse(finalOf('CMD').at(-1)?.args ?? '[]')).toEqual(['node', ...flags, 'dist/bundle/server.js', '--config', '/etc/toolport/toolport.yaml'])
  })

  it('writes the compile cache as the runtime user, read-only, and ships it with the bundle', () => {
    // Node keeps a compile cache per uid: one written by another user would never be read.
    const build = stages.find((stage) => stage[0]?.args.endsWith(' AS build')) ?? []
    const writer = build.findIndex((i) => i.keyword === 'RUN' && i.args.includes('scripts/write-compile-cache.ts'))
    expect(writer).toBeGreaterThan(0)
    expect(build.slice(0, writer).filter((i) => i.keyword === 'USER').at(-1)?.args).toBe(finalOf('USER').at(-1)?.args)
    expect(build.slice(writer).some((i) => i.keyword === 'RUN' && /chown -R root:root dist\/bundle && chmod -R a\+rX,a-w dist\/bundle\/compile-cache/.test(i.args))).toBe(true)
    expect(finalOf('COPY').map((c) => c.args)).toContain('--from=build /app/dist/bundle ./dist/bundle')
  })

  it('copies only files that exist, and the build context is limited by .dockerignore', () => {
    for (const copy of all.filter((i) => i.keyword === 'COPY' && !i.args.startsWith('--from='))) {
      const sources = copy.args.split(/\s+/).slice(0, -1)
      for (const source of sources) expect(existsSync(path.join(ROOT, source)), `COPY ${source}`).toBe(true)
    }
    const ignore = readFileSync(path.join(ROOT, '.dockerignore'), 'utf8')
    expect(ignore).toMatch(/^\*$/m)
    expect(ignore).not.toMatch(/^!node_modules|^!dist/m)
  })
})
