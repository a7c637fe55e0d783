/**
 * The configuration: one TypeBox schema (config-schema.ts) gives both the
 * `Config` type and the validation (unknown keys are errors, defaults fill
 * what is missing), through validators generated from it at development
 * time (config-validators.ts). `loadConfigFile` reads a YAML or JSON file;
 * a problem becomes one line naming the key.
 */
import { constants, realpathSync } from 'node:fs'
import { open } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import type { ErrorObject, ValidateFunction } from 'ajv'
import type { McpServerConfig, ValidatedConfig } from './config-schema.ts'
import { validateConfig as generatedConfigValidator, validateTokens as generatedTokensValidator } from './config-validators.ts'

/** The configuration the service runs with: as validated, with every default filled in. */
export type Config = ValidatedConfig & { workspaces: { root: string } }
export type { McpServerConfig }

// Generated from config-schema.ts (scripts/write-config-validators.ts): nothing is compiled at start-up.
const validateConfig = generatedConfigValidator as ValidateFunction<ValidatedConfig>
const validateTokens = generatedTokensValidator as ValidateFunction<Config['auth']['tokens']>

/** A configuration problem, rendered as one line that names the key. */
export class ConfigError extends Error {
  constructor (message: string) {
    super(message)
    this.name = 'ConfigError'
  }
}

function keyOf (error: ErrorObject): string {
  const parts = error.instancePath.split('/').slice(1).map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'))
  if (error.keyword === 'additionalProperties') parts.push(String(error.params['additionalProperty']))
  if (error.keyword === 'required') parts.push(String(error.params['missingProperty']))
  return shownKey(parts.join('.')) || '(top level)'
}

/** A key as a one-line message shows it: its control characters and line breaks written out (`\0`, `\u000a`). */
// eslint-disable-next-line no-control-regex
const shownKey = (key: string): string => key.replace(/[\u0000-\u001f\u007f\u2028\u2029]/g, (c) => c === '\0' ? '\\0' : `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)

function describe (error: ErrorObject): string {
  if (error.keyword === 'additionalProperties') {
    // A map whose keys are names (tools.mcp_servers): the key is no typo of a known one, its name is not allowed.
    return error.instancePath === '/tools/mcp_servers' ? 'not a valid server name: use letters, digits, "_" and "-"' : 'unknown key'
  }
  // Never the token itself, nor a pattern that reads as one.
  if (error.keyword === 'pattern' && error.instancePath.endsWith('/token')) return 'must be printable ASCII without spaces (as a Bearer header carries it)'
  if (error.keyword === 'required') return 'is required'
  if (error.keyword === 'enum') return `must be one of ${(error.params['allowedValues'] as unknown[]).join(', ')}`
  return error.message ?? 'is invalid'
}

/**
 * YAML, loaded by the first file that is not JSON: the parser is a large
 * module, which a service started with a JSON config (or none) never needs.
 */
async function parseYaml (text: string): Promise<unknown> {
  const { parse } = await import('yaml')
  // Warnings (an unknown tag) would go to stderr quoting the file's text: errors only.
  return parse(text, { prettyErrors: false, logLevel: 'error' })
}

/** A YAML error as its code and line (`BAD_SCALAR_START at line 3`), never its message. */
function yamlProblem (error: unknown, text: string): string {
  const { code, pos } = error as { code?: string, pos?: [number, number] }
  if (code === undefined) return 'not valid YAML (an alias to no anchor, or the like)'
  return pos === undefined ? `YAML error ${code}` : `YAML error ${code} at line ${text.slice(0, pos[0]).split('\n').length}`
}

/** Validates a parsed config object (filling defaults) or throws ConfigError. */
export function parseConfig (raw: unknown, base = process.cwd()): Config {
  const value = raw ?? {}
  if (typeof value !== 'object' || Array.isArray(value)) throw new ConfigError('config: the top level must be a mapping')
  const copy = structuredClone(value)
  if (!validateConfig(copy)) {
    const error = validateConfig.errors?.[0]
    throw new ConfigError(error ? `config: ${keyOf(error)}: ${describe(error)}` : 'config: invalid')
  }
  const withNul = keyWithNul(copy)
  if (withNul !== undefined) throw new ConfigError(`config: ${shownKey(withNul)}: must not hold a NUL byte`)
  // Empty is unset: an entry with neither would only ever be down.
  const mcpProblem = Object.entries(copy.tools.mcp_servers).find(([, s]) => !s.command === !s.url)
  if (mcpProblem) throw new ConfigError(`config: tools.mcp_servers.${mcpProblem[0]}: set command (a stdio server) or url (an HTTP one), ${mcpProblem[1].command ? 'not both' : 'one of the two'}`)
  for (const [name, server] of Object.entries(copy.tools.mcp_servers)) {
    if (server.url !== undefined) checkOutgoingUrl(`tools.mcp_servers.${name}.url`, server.url)
  }
  allTokens(copy.auth)
  // Empty is unset, as web_search takes it.
  if (copy.tools.web_search.endpoint) checkOutgoingUrl('tools.web_search.endpoint', copy.tools.web_search.endpoint)
  for (const [name, channel] of Object.entries(copy.channels)) checkOutgoingUrl(`channels.${name}.webhook`, channel.webhook)
  // The address other instances send this one's requests to.
  if (copy.server.advertise_url !== undefined) checkOutgoingUrl('server.advertise_url', copy.server.advertise_url)
  const config = resolvePaths({ ...copy, workspaces: { ...copy.workspaces, root: copy.workspaces.root ?? path.join(os.tmpdir(), 'toolport-workspaces') } }, base)
  checkEphemeralRoot(config.workspaces)
  return config
}

/**
 * The ephemeral root is emptied at start and swept of what no call holds:
 * it must not be the root, a directory above it, or one inside it other
 * than its own `ephemeral` (the default), or persistent workspaces would go;
 * also not through a symbolic link (each is compared as written and as the
 * filesystem resolves it, as far as it exists).
 */
function checkEphemeralRoot ({ root, ephemeral_root: configured }: Config['workspaces']): void {
  // The default too: `<root>/ephemeral` may be a link that leads elsewhere.
  const ephemeral = configured ?? path.join(root, 'ephemeral')
  // Both are resolved: one holds the other when it is a prefix of it that ends at a separator.
  const holds = (outer: string, inner: string): boolean => inner === outer || inner.startsWith(outer.endsWith(path.sep) ? outer : outer + path.sep)
  for (const [rootPath, ephemeralPath] of [[root, ephemeral], [resolvedOnDisk(root), resolvedOnDisk(ephemeral)]] as const) {
    if (ephemeralPath === path.join(rootPath, 'ephemeral')) continue
    if (holds(ephemeralPath, rootPath) || holds(rootPath, ephemeralPath)) {
      throw new ConfigError(`config: workspaces.ephemeral_root: ${ephemeral} overlaps workspaces.root (${root}); it is emptied at start, so it must be a directory of its own (not a link into the root), or the root's own ephemeral directory`)
    }
  }
}

/** `file` with the links of its deepest existing ancestor resolved (the rest does not exist yet). */
function resolvedOnDisk (file: string): string {
  const missing: string[] = []
  for (let existing = file; ; existing = path.dirname(existing)) {
    try {
      return path.join(realpathSync(existing), ...missing.reverse())
    } catch {
      if (path.dirname(existing) === existing) return file
      missing.push(path.basename(existing))
    }
  }
}

/**
 * A URL the service sends requests to (an MCP server, the search endpoint, a
 * channel's webhook): http(s), checked at start rather than failing each call,
 * and no user or password in it (they would never be sent, and would be logged).
 */
function checkOutgoingUrl (key: string, value: string): void {
  let url: URL
  try {
    url = new URL(value)
  } catch {
    throw new ConfigError(`config: ${key}: must be an http(s) URL`)
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new ConfigError(`config: ${key}: must be an http(s) URL`)
  if (url.username !== '' || url.password !== '') throw new ConfigError(`config: ${key}: must not hold a user or password (user:password@host); they are never sent`)
}

/** The embedded defaults (no file). */
export function defaultConfig (): Config {
  return parseConfig({})
}

/** A Kubernetes Secret holds at most 1 MiB: a tokens file is never larger. */
const MAX_TOKENS_FILE_BYTES = 1024 * 1024
/** Far more than any configuration: a larger file is a mistake (`/dev/zero`, a log). */
const MAX_CONFIG_FILE_BYTES = 16 * 1024 * 1024

/**
 * A regular file's UTF-8 text, read only when it is one and at most
 * `maxBytes` long: a FIFO put in its place would block the reading (and
 * the start, or every later reload) until someone writes to it.
 */
async function readSmallFile (file: string, maxBytes: number): Promise<string> {
  const handle = await open(file, constants.O_RDONLY | constants.O_NONBLOCK)
  try {
    const stat = await handle.stat()
    if (!stat.isFile()) throw Object.assign(new Error('not a regular file'), { code: 'not a regular file' })
    if (stat.size > maxBytes) throw Object.assign(new Error('too large'), { code: `larger than ${maxBytes} bytes` })
    // Strictly: a path or token holding bytes that are not UTF-8 would silently become another one.
    return new TextDecoder('utf-8', { fatal: true }).decode(await handle.readFile())
  } catch (error) {
    if (error instanceof TypeError) throw Object.assign(new Error('not UTF-8'), { code: 'not UTF-8 text' })
    throw error
  } finally {
    await handle.close()
  }
}

/** The tokens a tokens file holds (a YAML or JSON list of `{token, tenant, allowed_tools}`), checked; ConfigError otherwise. */
export async function readTokensFile (file: string): Promise<Config['auth']['tokens']> {
  let raw: unknown
  try {
    const text = await readSmallFile(file, MAX_TOKENS_FILE_BYTES)
    // An empty file, or one of comments only (an empty YAML document), holds no tokens: emptying it revokes them all.
    raw = /^\s*[[{]/.test(text) ? JSON.parse(text) : (await parseYaml(text)) ?? []
  } catch (error) {
    throw new ConfigError(`config: auth.tokens_file: cannot read ${file}: ${(error as NodeJS.ErrnoException).code ?? 'not YAML or JSON'}`)
  }
  if (!validateTokens(raw)) {
    const error = validateTokens.errors?.[0]
    throw new ConfigError(`config: auth.tokens_file: ${error ? `${keyOf(error) === '(top level)' ? 'the list' : `entry ${keyOf(error)}`}: ${describe(error)}` : 'invalid'}`)
  }
  return raw
}

/**
 * The configured tokens with those of `fromFile`; ConfigError when a token
 * appears twice (one would name a tenant or a scope the other never gets).
 */
export function allTokens (auth: Config['auth'], fromFile: Config['auth']['tokens'] = []): Config['auth']['tokens'] {
  const tokens = [...auth.tokens, ...fromFile]
  const where = (i: number): string => i < auth.tokens.length ? `auth.tokens entry ${i}` : `auth.tokens_file entry ${i - auth.tokens.length}`
  const seen = new Map<string, number>()
  tokens.forEach(({ token }, index) => {
    const first = seen.get(token)
    if (first !== undefined) throw new ConfigError(`config: ${where(index)}: the same token as ${where(first)}; each token names one tenant and scope`)
    seen.set(token, index)
  })
  return tokens
}

/**
 * Whether requests need a token: some are configured, or a tokens file is
 * named (one that is empty for now still means that auth is on).
 */
export function authIsOn (auth: Config['auth']): boolean {
  return auth.tokens.length > 0 || auth.tokens_file !== undefined
}

/** Reads and validates a YAML or JSON file (JSON is YAML, so one parser serves both). */
export async function loadConfigFile (file: string): Promise<Config> {
  let text: string
  try {
    text = await readSmallFile(file, MAX_CONFIG_FILE_BYTES)
  } catch (error) {
    throw new ConfigError(`config: cannot read ${file}: ${(error as NodeJS.ErrnoException).code ?? 'error'}`)
  }
  let raw: unknown
  try {
    raw = /\.json$/i.test(file) ? JSON.parse(text) : await parseYaml(text)
  } catch (error) {
    // Never the file's text, which may hold a token: JSON.parse quotes it after the mistake, and YAML's
    // messages quote it anywhere, so a YAML error is told by its code and line.
    const message = String((error as Error).message)
    const shown = /\.json$/i.test(file) ? message.replace(/, (?:\.\.\.)?".*/s, ' (not valid JSON)').split('\n')[0] : yamlProblem(error, text)
    throw new ConfigError(`config: cannot parse ${file}: ${shown}`)
  }
  return parseConfig(raw, path.dirname(path.resolve(file)))
}

/**
 * Relative paths in a config file are relative to the file's own directory
 * (as in docker-compose), so the service finds them whatever directory it
 * was started from; without a file, to the working directory.
 */
function resolvePaths (config: Config, base: string): Config {
  const resolve = (p: string) => path.resolve(base, p)
  config.tools.dirs = config.tools.dirs.map(resolve)
  config.workspaces.root = resolve(config.workspaces.root)
  if (config.workspaces.ephemeral_root !== undefined) config.workspaces.ephemeral_root = resolve(config.workspaces.ephemeral_root)
  if (config.auth.tokens_file !== undefined) config.auth.tokens_file = resolve(config.auth.tokens_file)
  return config
}

/**
 * The key of the first string of `value` (a key too) that holds a NUL byte:
 * no path, host name, command, argument or environment takes one, and Node
 * would refuse it only at its first use, deep in the start or for good in
 * the background (an MCP server's command, retried).
 */
function keyWithNul (value: unknown, key = ''): string | undefined {
  if (typeof value === 'string') return value.includes('\0') ? key : undefined
  if (value === null || typeof value !== 'object') return undefined
  for (const [name, inner] of Object.entries(value)) {
    const at = key === '' ? name : `${key}.${name}`
    if (name.includes('\0')) return at
    const found = keyWithNul(inner, at)
    if (found !== undefined) return found
  }
  return undefined
}
