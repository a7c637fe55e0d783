/**
 * The files the service reads stay out of its tools' reach as they are
 * shipped: the config and the tokens file mounted the way the kubelet mounts
 * a ConfigMap and a Secret (a timestamped directory, a `..data` symlink to
 * it, a symlink per file), read through a real server process under
 * bubblewrap. Every hop of both chains, their directories and the real
 * files are tried from exec_shell, before and after the kubelet swaps in an
 * update. A root service says at start-up what its sandbox cannot hide.
 */
import { randomBytes } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { mkdir, mkdtemp, realpath, rename, rm, symlink, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { pino } from 'pino'
import { describe, expect, it } from 'vitest'
import { parseConfig } from '../../src/config.ts'
import { createRunner } from '../../src/sandbox/index.ts'
import { onCleanup, tempDir } from '../helper.ts'
import { type RunningServer, startServer, waitReady } from '../support/server-process.ts'

/**
 * Writes `files` into `dir` as the kubelet's atomic writer does: a new
 * timestamped directory, `..data` switched to it by a rename, `name →
 * ..data/name` for each file, and the previous timestamped directory removed.
 */
async function kubeletWrite (dir: string, files: Record<string, string>, previous?: string): Promise<string> {
  const stamp = `..2026_11_23_10_00_00.${randomBytes(5).readUIntBE(0, 5) % 1_000_000_000}`
  await mkdir(path.join(dir, stamp), { recursive: true })
  for (const [name, text] of Object.entries(files)) await writeFile(path.join(dir, stamp, name), text)
  await symlink(stamp, path.join(dir, '..data_tmp'))
  await rename(path.join(dir, '..data_tmp'), path.join(dir, '..data'))
  if (previous === undefined) {
    for (const name of Object.keys(files)) await symlink(path.join('..data', name), path.join(dir, name))
  } else {
    await rm(path.join(dir, previous), { recursive: true })
  }
  return stamp
}

async function shell (server: RunningServer, token: string, command: string): Promise<{ stdout: string, stderr: string }> {
  const answer = await fetch(`${server.base}/v1/tools/exec_shell/execute`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ arguments: { command, timeout: 20 } }),
  })
  const body = await answer.json() as { result: { stdout: string, stderr: string } }
  expect(answer.status, JSON.stringify(body)).toBe(200)
  return body.result
}

describe('the files the service reads, mounted as Kubernetes does', () => {
  it('cannot be read from exec_shell through any hop of their symlink chains, nor listed, also after an update', async () => {
    // Not under /tmp: the sandbox's private /tmp would hide them whatever the service did.
    const dir = await mkdtemp('/var/tmp/toolport-secrets-')
    onCleanup(() => rm(dir, { recursive: true, force: true }))
    const tokensDir = path.join(dir, 'tokens')
    const configDir = path.join(dir, 'config')
    const token = `tok-${randomBytes(8).toString('hex')}`
    const tokensLink = path.join(tokensDir, 'tokens.yaml')
    const tokensStamp = await kubeletWrite(tokensDir, { 'tokens.yaml': `- { token: "${token}", tenant: acme }\n` })
    // The config's own chain starts in another directory: /etc/toolport.json → …/config/toolport.json → ..data/…
    const configMarker = `conf-${randomBytes(8).toString('hex')}`
    const config = { auth: { tokens_file: tokensLink }, sandbox: { mode: 'bwrap' }, logging: { level: 'info' }, workspaces: { root: path.join(await tempDir('toolport-secrets-ws-'), configMarker) } }
    const configStamp = await kubeletWrite(configDir, { 'toolport.json': JSON.stringify(config) })
    await mkdir(path.join(dir, 'etc'))
    const configLink = path.join(dir, 'etc', 'toolport.json')
    await symlink(path.join(configDir, 'toolport.json'), configLink)

    const server = await startServer(null, { TOOLPORT_CONFIG: configLink })
    await waitReady(server)
    const hops = (stamp: string) => [
      tokensLink, path.join(tokensDir, '..data', 'tokens.yaml'), path.join(tokensDir, stamp, 'tokens.yaml'),
      configLink, path.join(configDir, 'toolport.json'), path.join(configDir, '..data', 'toolport.json'), path.join(configDir, configStamp, 'toolport.json'),
    ]
    const tryEverything = (stamp: string) => [
      ...hops(stamp).map((hop) => `cat '${hop}'`),
      `ls -la '${tokensDir}' '${tokensDir}/..data/' '${configDir}' '${path.join(dir, 'etc')}'`,
      `find '${dir}' -type f -exec cat {} +`,
      'echo end',
    ].join('; ')

    const before = await shell(server, token, tryEverything(tokensStamp))
    const seen = before.stdout + before.stderr
    expect(seen).toContain('end')
    expect(seen).not.toContain(token)
    expect(seen).not.toContain(configMarker)
    // Listings show no timestamped directory (the command's own error messages name it).
    expect(before.stdout).not.toContain(tokensStamp)

    // An update: a new timestamped directory with a new token, the old one gone (the service reads tokens at start only).
    const newToken = `tok-${randomBytes(8).toString('hex')}`
    const newStamp = await kubeletWrite(tokensDir, { 'tokens.yaml': `- { token: "${newToken}", tenant: acme }\n` }, tokensStamp)
    expect(readFileSync(tokensLink, 'utf8')).toContain(newToken)
    const after = await shell(server, token, tryEverything(newStamp))
    expect(after.stdout + after.stderr).toContain('end')
    expect(after.stdout + after.stderr).not.toContain(newToken)
    expect(after.stdout).not.toContain(newStamp)
  })

  it('under a directory tools need whole (/etc), hides only the real file and leaves the directory readable', async () => {
    const dir = await mkdtemp('/var/tmp/toolport-secrets-')
    onCleanup(() => rm(dir, { recursive: true, force: true }))
    await mkdir(path.join(dir, 'conf'))
    const link = path.join(dir, 'conf', 'tokens.yaml')
    await symlink('/etc/hostname', link)
    expect(readFileSync(link, 'utf8').length).toBeGreaterThan(0)
    const runner = await createRunner(parseConfig({ sandbox: { mode: 'bwrap' } }).sandbox, { log: pino({ level: 'silent' }), secretFiles: [link] })
    const cwd = await realpath(await tempDir())
    const result = await runner.run({
      command: 'sh',
      args: ['-c', `cat /etc/hostname | wc -c; cat '${link}' | wc -c; ls -A '${path.join(dir, 'conf')}' | wc -l; test -s /etc/passwd && echo etc-readable`],
      cwd,
      timeoutMs: 15_000,
      signal: new AbortController().signal,
      maxOutputBytes: 65_536,
    })
    expect(result.stdout).toBe('0\n0\n0\netc-readable\n')
  })

  it('says at start-up, when the service runs as root, what its sandbox cannot hide', async () => {
    const server = await startServer({ sandbox: { mode: 'bwrap' } })
    await waitReady(server)
    const warningsOf = () => server.output().split('\n').filter((line) => line.includes('running as root with the sandbox on'))
    // Log lines leave in batches: the start-up lines are all out once the sandbox's choice is.
    for (let i = 0; i < 100 && !server.output().includes('sandbox chosen'); i++) await new Promise((resolve) => setTimeout(resolve, 50))
    const warnings = warningsOf()
    if (process.getuid?.() === 0) {
      expect(warnings).toHaveLength(1)
      expect(JSON.parse(warnings[0] as string)).toMatchObject({ level: 40 })
      expect(warnings[0]).toMatch(/root-owned file.*uid maps to the host's root.*uid 10001/)
    } else {
      expect(warnings).toEqual([])
    }
  })
})
