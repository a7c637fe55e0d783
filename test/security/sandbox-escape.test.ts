/**
 * Sandbox escapes (issue 5): under bubblewrap a command cannot write outside
 * its workspace, reach the network, read the service's environment, config
 * or other workspaces, outgrow its process, file-size and memory limits, or
 * leave processes behind. Every check looks at the host afterwards.
 */
import { randomBytes } from 'node:crypto'
import { existsSync, readFileSync, statSync } from 'node:fs'
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { buildApp } from '../../src/app.ts'
import { parseConfig } from '../../src/config.ts'
import { buildTestApp, exec, onCleanup, tempDir } from '../helper.ts'
import { survivorsWith, uniqueSleepSeconds } from '../support/processes.ts'
import { startTcpServer } from '../support/servers.ts'

const BWRAP = { mode: 'bwrap' }
/** Where the default tenant's persistent workspace `id` lives on the host. */
const workspaceDir = (root: string, id: string): string => path.join(root, 'tenants', 'default', 'ws', id)
const tag = (): string => `toolport-escape-${randomBytes(6).toString('hex')}`

async function shell (app: Awaited<ReturnType<typeof buildTestApp>>, command: string, extra: Record<string, unknown> = {}) {
  return exec(app, 'exec_shell', { command, timeout: 20 }, extra)
}

describe('sandbox escapes under bubblewrap', () => {
  it('cannot write to the host /tmp, a sibling workspace, $HOME, /etc, /usr or /dev/shm', async () => {
    const app = await buildTestApp({ sandbox: BWRAP })
    const root = app.runtime.config.workspaces.root
    const outside = await tempDir('toolport-outside-')
    expect((await app.inject({ method: 'POST', url: '/v1/workspaces', payload: { id: 'victim' } })).statusCode).toBe(201)
    const name = tag()
    const targets = [
      path.join(outside, name),
      path.join(os.tmpdir(), name),
      path.join(workspaceDir(root, 'victim'), name),
      '../victim/' + name,
      path.join(os.homedir(), name),
      path.join('/etc', name),
      path.join('/usr', name),
      path.join('/dev/shm', name),
      path.join(root, name),
    ]
    const attempts = targets.map((target) => `(echo pwned > '${target}') 2>/dev/null; mkdir -p '${target}.d' 2>/dev/null`).join('; ')
    const answer = await shell(app, `${attempts}; echo contained > mine.txt; echo done`, { workspace: 'attacker' })
    expect(answer.status, JSON.stringify(answer.body)).toBe(200)
    expect(answer.body.result.stdout).toContain('done')
    for (const target of targets) {
      const onHost = path.resolve(workspaceDir(root, 'attacker'), target)
      expect(existsSync(onHost), onHost).toBe(false)
      expect(existsSync(`${onHost}.d`), `${onHost}.d`).toBe(false)
    }
    // The positive control: the workspace itself is writable and shared with the host.
    expect(readFileSync(path.join(workspaceDir(root, 'attacker'), 'mine.txt'), 'utf8')).toBe('contained\n')
  })

  it("cannot leave a key in the kernel's keyrings, make a user namespace, lease a file, or see other runs' cgroups: in a call and in a process", async () => {
    const app = await buildTestApp({ sandbox: BWRAP, tools: { builtin: ['*'] } })
    const description = tag()
    // add_key(2) into the user's keyring (KEY_SPEC_USER_KEYRING, -4), which every run of the host user would share
    // (perl's syscall takes its string arguments from variables).
    const addKey = process.arch === 'arm64' ? 217 : 248
    const command = [
      `perl -e 'my ($type, $name, $payload) = ("user", "${description}", "payload"); my $serial = syscall(${addKey}, $type, $name, $payload, 7, -4); print "add_key=$serial errno=", $! + 0, "\\n"'`,
      'unshare -Ur true 2>/dev/null; echo "unshare=$?"',
      // A read lease (F_SETLEASE 1024, F_RDLCK 0) on a host file the sandbox's user owns (the service's: here root).
      'perl -e \'open(my $f, "<", "/etc/passwd") or die; my $r = fcntl($f, 1024, 0); print "lease=", (defined $r ? "taken" : $! + 0), "\\n"\'',
      // Other fcntl commands (F_GETFL 3, F_GETLEASE 1025) and locks work as ever.
      'perl -e \'open(my $f, "<", "/etc/passwd") or die; print "getfl=", (defined fcntl($f, 3, 0) ? "ok" : $! + 0), " getlease=", (defined fcntl($f, 1025, 0) ? "ok" : $! + 0), "\\n"\'',
      'flock -n /tmp/lock true; echo "flock=$?"',
      'echo "cgroups=$(ls -A /sys/fs/cgroup | wc -l)"',
      // The shell's own descriptors, listed last and through no pipe or $(…), whose other end the shell would hold meanwhile.
      'echo descriptors:; ls /proc/$$/fd',
    ].join('; ')
    const call = await shell(app, command)
    expect(call.status, JSON.stringify(call.body)).toBe(200)
    const started = await exec(app, 'process_start', { command, yield_ms: 20_000 }, { workspace: 'keys' })
    expect(started.status, JSON.stringify(started.body)).toBe(200)
    expect(started.body.result.state).toBe('exited')
    for (const output of [call.body.result.stdout as string, started.body.result.output as string]) {
      // EPERM (1), as container runtimes' default profiles answer.
      expect(output).toContain('add_key=-1 errno=1\n')
      expect(output).toMatch(/^unshare=[1-9]/m)
      expect(output).toContain('lease=1\n')
      expect(output).toContain('flock=0\n')
      expect(output).toContain('getfl=ok getlease=ok\n')
      expect(output).toContain('cgroups=0\n')
      // Nothing the service handed bwrap (its filter, the workspace directory) reaches the command.
      expect(output).toMatch(/\ndescriptors:\n0\n1\n2\n$/)
    }
    expect(readFileSync('/proc/keys', 'utf8')).not.toContain(description)
  })

  for (const mode of ['bwrap', 'none']) {
    it(`puts its commands, not the service, first in line for the out-of-memory killer (mode ${mode})`, async () => {
      const app = await buildTestApp({ sandbox: { mode }, tools: { builtin: ['*'] } })
      const call = await shell(app, 'cat /proc/self/oom_score_adj; sh -c "cat /proc/self/oom_score_adj"')
      expect(call.body.result.stdout).toBe('1000\n1000\n')
      const started = await exec(app, 'process_start', { command: 'cat /proc/self/oom_score_adj', yield_ms: 20_000 }, { workspace: 'oom' })
      expect(started.body.result).toMatchObject({ state: 'exited', output: '1000\n' })
      expect(readFileSync('/proc/self/oom_score_adj', 'utf8')).not.toBe('1000\n')
    })
  }

  it('cannot reach a server on the host loopback; with sandbox.network: true it can', async () => {
    const server = await startTcpServer()
    const probe = `bash -c 'exec 3<>/dev/tcp/127.0.0.1/${server.port} && head -n1 <&3' 2>&1; echo exit=$?`
    const closed = await buildTestApp({ sandbox: BWRAP })
    const refused = await shell(closed, probe)
    expect(refused.status).toBe(200)
    expect(refused.body.result.stdout).not.toContain('hello')
    expect(refused.body.result.stdout).toMatch(/exit=[1-9]/)
    expect(server.connections()).toBe(0)

    const open = await buildTestApp({ sandbox: { ...BWRAP, network: true } })
    const reached = await shell(open, probe)
    expect(reached.body.result.stdout).toContain('hello')
    expect(server.connections()).toBe(1)
  })

  for (const mode of ['bwrap', 'none']) {
    it(`does not pass the service's environment to a command (mode ${mode})`, async () => {
      const key = `TOOLPORT_TEST_SECRET_${randomBytes(4).toString('hex').toUpperCase()}`
      const value = `s3cret-${randomBytes(8).toString('hex')}`
      process.env[key] = value
      onCleanup(async () => { delete process.env[key] })
      const app = await buildTestApp({ sandbox: { mode } })
      const answer = await shell(app, 'env')
      expect(answer.status).toBe(200)
      const stdout = answer.body.result.stdout as string
      expect(stdout).not.toContain(key)
      expect(stdout).not.toContain(value)
      const names = stdout.split('\n').filter((line) => line.includes('=')).map((line) => line.slice(0, line.indexOf('=')))
      for (const inherited of ['PATH', 'HOME', 'LANG', 'TMPDIR', 'PWD', 'SHLVL', 'OLDPWD', '_']) names.splice(0, names.length, ...names.filter((n) => n !== inherited))
      expect(names).toEqual([])
    })
  }

  it("cannot read the service's /proc environ, its config file, or another workspace", async () => {
    const key = `TOOLPORT_TEST_SECRET_${randomBytes(4).toString('hex').toUpperCase()}`
    process.env[key] = 'x'
    onCleanup(async () => { delete process.env[key] })
    // Not under /tmp: the sandbox's private /tmp would hide these whatever the service did.
    const dir = await mkdtemp('/var/tmp/toolport-conf-')
    onCleanup(() => rm(dir, { recursive: true, force: true }))
    const configFile = path.join(dir, 'toolport.json')
    const token = `tok-${randomBytes(8).toString('hex')}`
    await writeFile(configFile, JSON.stringify({ auth: { tokens: [{ token, tenant: 'acme' }] } }))
    const root = path.join(dir, 'workspaces')
    const config = parseConfig({ workspaces: { root }, sandbox: BWRAP })
    const app = await buildApp(config, { defaultMetrics: false, hidePaths: [configFile] })
    onCleanup(() => app.close())
    await app.runtime.whenReady()
    await mkdir(workspaceDir(root, 'victim'), { recursive: true })
    await writeFile(path.join(workspaceDir(root, 'victim'), 'secret.txt'), 'victim-data')

    const answer = await shell(app, [
      `cat /proc/${process.pid}/environ`,
      `cat '${configFile}'`,
      `cat '${path.join(workspaceDir(root, 'victim'), 'secret.txt')}'`,
      `ls -a '${workspaceDir(root, '')}'`,
      'echo end',
    ].join('; '))
    expect(answer.status).toBe(200)
    const seen = `${answer.body.result.stdout}${answer.body.result.stderr}`
    expect(seen).toContain('end')
    expect(seen).not.toContain(key)
    expect(seen).not.toContain(token)
    expect(seen).not.toContain('victim-data')
    expect(answer.body.result.stdout).not.toMatch(/^victim$/m)
  })

  it('cannot see the ephemeral workspaces of other calls, also under an ephemeral_root outside the root', async () => {
    // Not under /tmp: the sandbox's private /tmp would hide it whatever the service did.
    const dir = await mkdtemp('/var/tmp/toolport-eph-')
    onCleanup(() => rm(dir, { recursive: true, force: true }))
    const app = await buildTestApp({ sandbox: BWRAP, workspaces: { ephemeral_root: path.join(dir, 'ephemeral') } })
    const other = await app.runtime.workspaces.ephemeral()
    onCleanup(() => other.release())
    await writeFile(path.join(other.dir, 'theirs.txt'), 'other-call-data')
    const answer = await shell(app, `ls -a '${app.runtime.workspaces.ephemeralRoot}'; cat '${path.join(other.dir, 'theirs.txt')}'; echo end`)
    expect(answer.status).toBe(200)
    expect(answer.body.result.stdout).toContain('end')
    expect(answer.body.result.stdout).not.toContain('other-call-data')
    expect(answer.body.result.stdout).not.toContain(path.basename(other.dir))
  })

  it('bounds a fork bomb by max_processes and leaves nothing running', async () => {
    const app = await buildTestApp({ sandbox: { ...BWRAP, max_processes: 20 } })
    const seconds = uniqueSleepSeconds()
    // Each successful fork prints its number; the shell stops at the first refused one.
    const counted = await shell(app, `for i in $(seq 1 100); do sleep ${seconds} & echo $i; done`)
    expect(counted.status, JSON.stringify(counted.body)).toBe(200)
    const started = Math.max(...(counted.body.result.stdout as string).trim().split('\n').map(Number))
    expect(started).toBeGreaterThanOrEqual(5)
    expect(started).toBeLessThanOrEqual(20)
    expect(await survivorsWith(seconds)).toEqual([])

    const marker = `bomb_${randomBytes(4).toString('hex')}`
    const bomb = await exec(app, 'exec_shell', { command: `${marker}() { ${marker} | ${marker} & }; ${marker}; sleep 2`, timeout: 4 })
    expect([200, 504]).toContain(bomb.status)
    expect(await survivorsWith(marker)).toEqual([])
    // The service is unharmed.
    expect((await shell(app, 'echo alive')).body.result.stdout).toBe('alive\n')
  })

  it('stops a file beyond max_file_bytes at the limit', async () => {
    const app = await buildTestApp({ sandbox: { ...BWRAP, max_file_bytes: 1024 * 1024 } })
    const answer = await shell(app, 'head -c 3000000 /dev/zero > big.bin; echo "status=$?"', { workspace: 'disk' })
    expect(answer.status).toBe(200)
    expect(answer.body.result.stdout).toMatch(/status=(?!0\b)\d+/)
    expect(statSync(path.join(workspaceDir(app.runtime.config.workspaces.root, 'disk'), 'big.bin')).size).toBeLessThanOrEqual(1024 * 1024)
  })

  it('refuses memory beyond max_memory_bytes (and grants what is below it)', async () => {
    const app = await buildTestApp({ sandbox: { ...BWRAP, max_memory_bytes: 64 * 1024 * 1024 } })
    const big = await shell(app, 'perl -e \'$x = "a" x 300_000_000; print "allocated\\n"\'; echo "status=$?"')
    expect(big.body.result.stdout).not.toContain('allocated')
    expect(big.body.result.stdout).toMatch(/status=(?!0\b)\d+/)
    const small = await shell(app, 'perl -e \'$x = "a" x 4_000_000; print "allocated\\n"\'')
    expect(small.body.result.stdout).toBe('allocated\n')
  })

  it('stops a busy loop at cpu_seconds', async () => {
    const app = await buildTestApp({ sandbox: { ...BWRAP, cpu_seconds: 1 } })
    const answer = await shell(app, 'while :; do :; done')
    // Ended by the CPU limit, not by the 20 s timeout.
    expect(answer.status, JSON.stringify(answer.body)).toBe(200)
    expect(answer.body.result.exit_code).not.toBe(0)
  })

  for (const mode of ['bwrap', 'none']) {
    it(`leaves no orphan after a timeout, not even one in its own session (mode ${mode})`, async () => {
      const app = await buildTestApp({ sandbox: { mode } })
      const seconds = uniqueSleepSeconds()
      const answer = await exec(app, 'exec_shell', {
        command: `sleep ${seconds} & (sleep ${seconds} &) ; setsid sleep ${seconds} & echo started; sleep ${seconds}`,
        timeout: 1,
      })
      expect(answer.status).toBe(504)
      expect(answer.body.partial_stdout).toBe('started\n')
      expect(await survivorsWith(seconds)).toEqual([])
    })
  }
})
