import { execFileSync } from 'node:child_process'
import { mkdir, realpath, symlink, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { describe, expect, it, vi } from 'vitest'
import { ConfigError, defaultConfig, loadConfigFile, parseConfig } from '../src/config.ts'
import { tempDir } from './support/temp.ts'

const messageOf = (fn: () => unknown): string => {
  try {
    fn()
    return 'ok'
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError)
    return (error as Error).message
  }
}

describe('config', () => {
  it('has the contract defaults', () => {
    const config = defaultConfig()
    expect(config.server).toMatchObject({ host: '127.0.0.1', port: 8080, body_limit_bytes: 10_485_760 })
    expect(config.limits).toEqual({ max_concurrent: 16, max_queue: 256, queue_timeout_ms: 30_000, max_result_bytes: 65_536 })
    expect(config.tools.exec_shell).toEqual({ timeout_default: 30, timeout_max: 300 })
    expect(config.tools.spawn).toEqual({ max_concurrent: 5, timeout_default: 60 })
    expect(config.tools.web_fetch).toEqual({ max_bytes: 10_485_760, allow_private_networks: false })
    expect(config.sandbox).toMatchObject({ mode: 'auto', network: false })
    expect(config.tools.builtin).toBeUndefined()
  })

  it('names the key of every problem in one line', () => {
    expect(messageOf(() => parseConfig({ bogus_section: {} }))).toBe('config: bogus_section: unknown key')
    expect(messageOf(() => parseConfig({ limits: { max_concurent: 3 } }))).toBe('config: limits.max_concurent: unknown key')
    expect(messageOf(() => parseConfig({ limits: { max_concurrent: 'many' } }))).toBe('config: limits.max_concurrent: must be integer')
    expect(messageOf(() => parseConfig({ sandbox: { mode: 'docker' } }))).toBe('config: sandbox.mode: must be one of auto, bwrap, none')
    expect(messageOf(() => parseConfig({ tools: { mcp_servers: { fs: { command: 'x', bogus: 1 } } } }))).toBe('config: tools.mcp_servers.fs.bogus: unknown key')
    // A server's name is letters, digits, "_" and "-": another name is no server, not an entry left unchecked.
    // A name the map does not take is said to be one, not taken for a nested key.
    expect(messageOf(() => parseConfig({ tools: { mcp_servers: { 'a.b': { bogus_key: 1 } } } }))).toBe('config: tools.mcp_servers.a.b: not a valid server name: use letters, digits, "_" and "-"')
    expect(messageOf(() => parseConfig({ tools: { mcp_servers: { 'a.b': null } } }))).toBe('config: tools.mcp_servers.a.b: not a valid server name: use letters, digits, "_" and "-"')
    // An entry with neither command nor url (or only empty ones) could never connect.
    for (const entry of [{}, { command: '' }, { url: '', args: ['x'] }]) {
      expect(messageOf(() => parseConfig({ tools: { mcp_servers: { none: entry } } }))).toBe('config: tools.mcp_servers.none: set command (a stdio server) or url (an HTTP one), one of the two')
    }
    expect(messageOf(() => parseConfig({ auth: { tokens: [{ token: 't' }] } }))).toBe('config: auth.tokens.0.tenant: is required')
    // A password in an MCP server's URL is never sent (fetch refuses such a URL), and the refusal would log it.
    const withPassword = messageOf(() => parseConfig({ tools: { mcp_servers: { web: { url: 'https://user:PW-IN-URL@mcp.example/mcp' } } } }))
    expect(withPassword).toBe('config: tools.mcp_servers.web.url: must not hold a user or password (user:password@host); they are never sent')
    expect(messageOf(() => parseConfig({ tools: { mcp_servers: { web: { url: 'ftp://mcp.example/' } } } }))).toBe('config: tools.mcp_servers.web.url: must be an http(s) URL')
    expect(messageOf(() => parseConfig({ tools: { mcp_servers: { web: { url: 'mcp.example' } } } }))).toBe('config: tools.mcp_servers.web.url: must be an http(s) URL')
    expect(parseConfig({ tools: { mcp_servers: { web: { url: 'https://mcp.example/mcp?api_key=k' } } } }).tools.mcp_servers['web']?.url).toBe('https://mcp.example/mcp?api_key=k')
    // The other URLs the service sends to: checked at start, not by every call (whose error carried the URL, key and all, to the log).
    expect(messageOf(() => parseConfig({ tools: { web_search: { endpoint: '127.0.0.1:8888/search?apikey=k' } } }))).toBe('config: tools.web_search.endpoint: must be an http(s) URL')
    expect(messageOf(() => parseConfig({ tools: { web_search: { endpoint: 'https://u:p@search.example/' } } }))).toMatch(/^config: tools\.web_search\.endpoint: must not hold a user or password/)
    expect(messageOf(() => parseConfig({ channels: { ops: { webhook: 'hooks.example/h' } } }))).toBe('config: channels.ops.webhook: must be an http(s) URL')
    expect(parseConfig({ tools: { web_search: { endpoint: 'http://127.0.0.1:8888/search?apikey=k' } }, channels: { ops: { webhook: 'https://hooks.example/h?k=1' } } }).channels['ops']?.webhook).toBe('https://hooks.example/h?k=1')
    expect(parseConfig({ tools: { web_search: { endpoint: '' } } }).tools.web_search.endpoint).toBe('')
    expect(messageOf(() => parseConfig({ server: { advertise_url: 'http://user@10.0.3.7:8080' } }))).toMatch(/^config: server\.advertise_url: must not hold a user or password/)
    expect(messageOf(() => parseConfig([]))).toMatch(/top level/)
    // A duration past what a timer takes (about 24.8 days, less what the service adds) would fire at once.
    expect(messageOf(() => parseConfig({ tools: { processes: { timeout_max: 3_000_000 } } }))).toBe('config: tools.processes.timeout_max: must be <= 2073600')
    expect(messageOf(() => parseConfig({ server: { drain_timeout_ms: 2 ** 31 } }))).toBe('config: server.drain_timeout_ms: must be <= 2073600000')
    expect(parseConfig({ tools: { processes: { timeout_max: 2_073_600 } } }).tools.processes.timeout_max).toBe(2_073_600)
    // A NUL byte would otherwise end the start with Node's stack trace at its first use, or fail an MCP server for good.
    const withNul = [
      ['workspaces.root', { workspaces: { root: '/tmp/x\0b' } }],
      ['workspaces.ephemeral_root', { workspaces: { ephemeral_root: '/tmp/e\0' } }],
      ['tools.dirs.1', { tools: { dirs: ['/a', '/b\0'] } }],
      ['auth.tokens_file', { auth: { tokens_file: 't\0' } }],
      ['server.host', { server: { host: 'local\0host' } }],
      ['tools.mcp_servers.fs.command', { tools: { mcp_servers: { fs: { command: 'node\0' } } } }],
      ['tools.mcp_servers.fs.args.0', { tools: { mcp_servers: { fs: { command: 'node', args: ['a\0'] } } } }],
      // A key is shown with its NUL written out.
      ['tools.mcp_servers.fs.env.K\\0', { tools: { mcp_servers: { fs: { command: 'node', env: { 'K\0': 'v' } } } } }],
    ] as const
    for (const [key, raw] of withNul) expect(messageOf(() => parseConfig(raw))).toBe(`config: ${key}: must not hold a NUL byte`)
    expect(messageOf(() => parseConfig({ tools: { mcp_servers: { 'f\0s': { command: 'x' } } } }))).toBe('config: tools.mcp_servers.f\\0s: not a valid server name: use letters, digits, "_" and "-"')
    // A map's key with a line break is checked as any other (it went unchecked), and shown on one line.
    expect(messageOf(() => parseConfig({ workspaces: { tenant_quotas: { 't\n': { max_workspaces: 'x' } } } }))).toBe('config: workspaces.tenant_quotas.t\\u000a.max_workspaces: must be integer')
    expect(messageOf(() => parseConfig({ tools: { mcp_servers: { a: { command: 'node', env: { 'K\u2028': 5 } } } } }))).toBe('config: tools.mcp_servers.a.env.K\\u2028: must be string')
    expect(messageOf(() => parseConfig({ tools: { mcp_servers: { 'a\nb': { command: 'node' } } } }))).toBe('config: tools.mcp_servers.a\\u000ab: not a valid server name: use letters, digits, "_" and "-"')
  })

  it('reads YAML and JSON files, and reports unreadable or unparseable ones', async () => {
    const dir = await tempDir()
    await writeFile(path.join(dir, 'a.yaml'), 'limits:\n  max_concurrent: 3\ntools:\n  builtin: ["read_*"]\n')
    await writeFile(path.join(dir, 'b.json'), '{"limits": {"max_queue": 0}}')
    await writeFile(path.join(dir, 'bad.yaml'), 'limits: [unclosed\n  - : :\n')
    expect((await loadConfigFile(path.join(dir, 'a.yaml'))).limits.max_concurrent).toBe(3)
    expect((await loadConfigFile(path.join(dir, 'b.json'))).limits.max_queue).toBe(0)
    await expect(loadConfigFile(path.join(dir, 'bad.yaml'))).rejects.toThrow(/cannot parse/)
    await expect(loadConfigFile(path.join(dir, 'missing.yaml'))).rejects.toThrow(/cannot read .*ENOENT/)
    // A mistake next to a token does not put the token on the console.
    await writeFile(path.join(dir, 'typo.json'), '{"auth": {"tokens": [{"token":sk-LIVE-9f8e7d6c5b4a, "tenant": "t"}]}}')
    await writeFile(path.join(dir, 'typo-lines.json'), '{\n  "auth": {"tokens": [{\n    "token": sk-LIVE-9f8e7d6c5b4a\n  }]}\n}')
    await writeFile(path.join(dir, 'typo.yaml'), 'auth:\n  tokens:\n    - token: sk-LIVE-9f8e7d6c5b4a\n     tenant: [t\n')
    await writeFile(path.join(dir, 'alias.yaml'), 'auth:\n  tokens:\n    - token: *sk-LIVE-9f8e7d6c5b4a\n      tenant: t\n')
    await writeFile(path.join(dir, 'tag.yaml'), 'auth:\n  tokens:\n    - token: !sk-LIVE-9f8e7d6c5b4a! t\n')
    await writeFile(path.join(dir, 'escape.yaml'), 'auth:\n  tokens:\n    - token: "\\Usk-LIVE-9f8e7d6c5b4a"\n')
    await writeFile(path.join(dir, 'version.yaml'), '%YAML 9.sk-LIVE-9f8e7d6c5b4a\n---\na: 1\n')
    for (const file of ['typo.json', 'typo-lines.json', 'typo.yaml', 'alias.yaml', 'tag.yaml', 'escape.yaml', 'version.yaml']) {
      const message = await loadConfigFile(path.join(dir, file)).then(() => '', (error: Error) => error.message)
      expect(message, file).toMatch(/cannot parse/)
      expect(message, file).not.toMatch(/LIVE|9f8e/)
    }
    // Nor does a YAML warning (an unknown tag), which would go to stderr.
    await writeFile(path.join(dir, 'tagged.yaml'), 'auth:\n  tokens:\n    - token: !sk-LIVE-9f8e7d6c5b4a t\n      tenant: t\n')
    const warnings = vi.spyOn(process, 'emitWarning').mockImplementation(() => {})
    try {
      await loadConfigFile(path.join(dir, 'tagged.yaml'))
      expect(JSON.stringify(warnings.mock.calls)).not.toMatch(/LIVE|9f8e/)
    } finally {
      warnings.mockRestore()
    }
  })

  it('takes only integers JavaScript holds exactly, and limits a kernel or a date can take', async () => {
    expect(messageOf(() => parseConfig({ server: { body_limit_bytes: Infinity } }))).toBe(`config: server.body_limit_bytes: must be <= ${Number.MAX_SAFE_INTEGER}`)
    expect(messageOf(() => parseConfig({ limits: { max_result_bytes: 1e300 } }))).toBe(`config: limits.max_result_bytes: must be <= ${Number.MAX_SAFE_INTEGER}`)
    expect(messageOf(() => parseConfig({ sandbox: { cpu_seconds: 1e21 } }))).toBe(`config: sandbox.cpu_seconds: must be <= ${Number.MAX_SAFE_INTEGER}`)
    expect(messageOf(() => parseConfig({ sandbox: { max_processes: 5_000_000 } }))).toBe('config: sandbox.max_processes: must be <= 4194304')
    expect(messageOf(() => parseConfig({ workspaces: { ttl_seconds: 1e13 } }))).toBe('config: workspaces.ttl_seconds: must be <= 31536000')
    expect(messageOf(() => parseConfig({ server: { idempotency_ttl_seconds: Infinity } }))).toBe('config: server.idempotency_ttl_seconds: must be <= 31536000')
    expect(messageOf(() => parseConfig({ workspaces: { tenant_quotas: { acme: { max_workspace_bytes: Infinity } } } }))).toBe(`config: workspaces.tenant_quotas.acme.max_workspace_bytes: must be <= ${Number.MAX_SAFE_INTEGER}`)
    // As a file says it: YAML's .inf and JSON's 1e400.
    const dir = await tempDir()
    await writeFile(path.join(dir, 'inf.yaml'), 'server:\n  max_header_bytes: .inf\n')
    await writeFile(path.join(dir, 'inf.json'), '{"limits": {"max_queue": 1e400}}')
    await expect(loadConfigFile(path.join(dir, 'inf.yaml'))).rejects.toThrow(/^config: server\.max_header_bytes: must be <= \d+$/)
    await expect(loadConfigFile(path.join(dir, 'inf.json'))).rejects.toThrow(/^config: limits\.max_queue: must be <= \d+$/)
  })

  it('refuses an ephemeral root that is, holds or lies inside the workspaces root (it is emptied at start)', () => {
    for (const ephemeral of ['/srv/ws', '/srv', '/', '/srv/ws/tenants', '/srv/ws/x/y']) {
      expect(messageOf(() => parseConfig({ workspaces: { root: '/srv/ws', ephemeral_root: ephemeral } }))).toMatch(/^config: workspaces\.ephemeral_root: .* overlaps workspaces\.root \(\/srv\/ws\)/)
    }
    for (const ephemeral of ['/srv/ws/ephemeral', '/srv/ws-eph', '/tmp/eph', '/srv/w']) {
      expect(parseConfig({ workspaces: { root: '/srv/ws', ephemeral_root: ephemeral } }).workspaces.ephemeral_root).toBe(ephemeral)
    }
  })

  it('refuses an ephemeral root that reaches the workspaces root through a symbolic link', async () => {
    const dir = await realpath(await tempDir())
    await mkdir(path.join(dir, 'real'))
    await symlink(path.join(dir, 'real'), path.join(dir, 'alias'))
    for (const [root, ephemeral] of [['real', 'alias'], ['real', 'alias/tenants'], ['alias', 'real/x'], ['real/ws', 'alias/ws/tmp']] as Array<[string, string]>) {
      expect(messageOf(() => parseConfig({ workspaces: { root: path.join(dir, root), ephemeral_root: path.join(dir, ephemeral) } })), `${root} ${ephemeral}`).toMatch(/^config: workspaces\.ephemeral_root: .* overlaps workspaces\.root/)
    }
    expect(parseConfig({ workspaces: { root: path.join(dir, 'alias'), ephemeral_root: path.join(dir, 'real', 'ephemeral') } }).workspaces.ephemeral_root).toBe(path.join(dir, 'real', 'ephemeral'))
    // The default place too, when it is a link back into the root.
    await symlink('.', path.join(dir, 'real', 'ephemeral'))
    expect(messageOf(() => parseConfig({ workspaces: { root: path.join(dir, 'real') } }))).toMatch(/^config: workspaces\.ephemeral_root: .*\/real\/ephemeral overlaps workspaces\.root/)
    expect(parseConfig({ workspaces: { root: path.join(dir, 'real', 'ws'), ephemeral_root: path.join(dir, 'alias', 'eph') } }).workspaces.root).toBe(path.join(dir, 'real', 'ws'))
  })

  it('reads a config file only when it is a regular file of UTF-8 text', async () => {
    const dir = await tempDir()
    execFileSync('mkfifo', [path.join(dir, 'fifo.yaml')])
    await expect(loadConfigFile(path.join(dir, 'fifo.yaml'))).rejects.toThrow(/^config: cannot read .*fifo\.yaml: not a regular file$/)
    await expect(loadConfigFile('/dev/zero')).rejects.toThrow(/^config: cannot read \/dev\/zero: not a regular file$/)
    await writeFile(path.join(dir, 'latin1.yaml'), Buffer.from('workspaces:\n  root: /tmp/caf\xe9\n', 'latin1'))
    await expect(loadConfigFile(path.join(dir, 'latin1.yaml'))).rejects.toThrow(/^config: cannot read .*latin1\.yaml: not UTF-8 text$/)
  })

  it('resolves relative paths of a file against the file\'s directory', async () => {
    const dir = await tempDir()
    await writeFile(path.join(dir, 'c.yaml'), 'tools: { dirs: [tools, /abs/tools] }\nworkspaces: { root: ./ws }\nauth: { tokens_file: secrets/tokens.yaml }\n')
    const config = await loadConfigFile(path.join(dir, 'c.yaml'))
    expect(config.tools.dirs).toEqual([path.join(dir, 'tools'), '/abs/tools'])
    expect(config.workspaces.root).toBe(path.join(dir, 'ws'))
    expect(config.auth.tokens_file).toBe(path.join(dir, 'secrets', 'tokens.yaml'))
  })
})

describe('auth.tokens_file', () => {
  it('adds the tokens of a YAML file to the configured ones', async () => {
    const { allTokens, readTokensFile } = await import('../src/config.ts')
    const dir = await tempDir()
    const file = path.join(dir, 'tokens.yaml')
    await writeFile(file, '- { token: from-file, tenant: beta, allowed_tools: ["read_*"] }\n')
    const config = parseConfig({ auth: { tokens: [{ token: 'inline', tenant: 'acme' }], tokens_file: file } })
    expect(allTokens(config.auth, await readTokensFile(file)).map((t) => [t.token, t.tenant, t.allowed_tools])).toEqual([['inline', 'acme', ['*']], ['from-file', 'beta', ['read_*']]])
  })

  it('takes an empty file, or one of comments only, as no tokens (emptying it revokes them all); a scalar is malformed', async () => {
    const { readTokensFile } = await import('../src/config.ts')
    const dir = await tempDir()
    for (const [name, text] of [['empty.yaml', ''], ['blank.yaml', '\n  \n'], ['comments.yaml', '# every token revoked\n']]) {
      await writeFile(path.join(dir, name as string), text as string)
      expect(await readTokensFile(path.join(dir, name as string))).toEqual([])
    }
    await writeFile(path.join(dir, 'null.yaml'), 'null\n')
    await expect(readTokensFile(path.join(dir, 'null.yaml'))).resolves.toEqual([])
    await writeFile(path.join(dir, 'scalar.yaml'), 'tokens\n')
    await expect(readTokensFile(path.join(dir, 'scalar.yaml'))).rejects.toThrow(/the list: must be array/)
  })

  it('reads only a regular file of at most 1 MiB: a FIFO in its place is refused at once, never waited on', async () => {
    const { readTokensFile } = await import('../src/config.ts')
    const dir = await tempDir()
    execFileSync('mkfifo', [path.join(dir, 'fifo.yaml')])
    await expect(readTokensFile(path.join(dir, 'fifo.yaml'))).rejects.toThrow(/^config: auth.tokens_file: cannot read .*: not a regular file$/)
    await writeFile(path.join(dir, 'big.json'), `[${'{"token":"t","tenant":"x"},'.repeat(40_000)}{"token":"u","tenant":"x"}]`)
    await expect(readTokensFile(path.join(dir, 'big.json'))).rejects.toThrow(/: larger than 1048576 bytes$/)
    await writeFile(path.join(dir, 'tokens.json'), '[{"token":"json-token","tenant":"x"}]')
    expect(await readTokensFile(path.join(dir, 'tokens.json'))).toEqual([{ token: 'json-token', tenant: 'x', allowed_tools: ['*'] }])
  })

  it('names auth.tokens_file when the file is missing or malformed', async () => {
    const { readTokensFile } = await import('../src/config.ts')
    const dir = await tempDir()
    await expect(readTokensFile(path.join(dir, 'none.yaml'))).rejects.toThrow(/^config: auth.tokens_file: cannot read/)
    await writeFile(path.join(dir, 'bad.yaml'), '- { token: x }\n')
    await expect(readTokensFile(path.join(dir, 'bad.yaml'))).rejects.toThrow(/auth.tokens_file: entry 0.tenant: is required/)
  })

  it('refuses a token twice (the second entry\'s tenant and scope would never apply) and one a Bearer header cannot carry, never quoting it', async () => {
    const { allTokens, readTokensFile } = await import('../src/config.ts')
    expect(() => parseConfig({ auth: { tokens: [{ token: 'dup-secret', tenant: 'a' }, { token: 'dup-secret', tenant: 'b', allowed_tools: ['read_file'] }] } }))
      .toThrow('config: auth.tokens entry 1: the same token as auth.tokens entry 0; each token names one tenant and scope')
    const dir = await tempDir()
    await writeFile(path.join(dir, 'tokens.yaml'), '- { token: inline-secret, tenant: c }\n')
    const across = parseConfig({ auth: { tokens: [{ token: 'inline-secret', tenant: 'a' }] } })
    expect(() => allTokens(across.auth, [{ token: 'inline-secret', tenant: 'c', allowed_tools: ['*'] }])).toThrow(/auth.tokens_file entry 0: the same token as auth.tokens entry 0/)
    for (const token of ['has space', 'tökén', 'tab\there']) {
      let message = ''
      try { parseConfig({ auth: { tokens: [{ token, tenant: 'a' }] } }) } catch (error) { message = (error as Error).message }
      expect(message).toBe('config: auth.tokens.0.token: must be printable ASCII without spaces (as a Bearer header carries it)')
    }
    await writeFile(path.join(dir, 'spaced.yaml'), '- { token: "with space", tenant: c }\n')
    await expect(readTokensFile(path.join(dir, 'spaced.yaml'))).rejects.toThrow('config: auth.tokens_file: entry 0.token: must be printable ASCII without spaces (as a Bearer header carries it)')
  })
})
