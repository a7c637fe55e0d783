/**
 * The configuration: one TypeBox schema gives both the `Config` type and the
 * validation (unknown keys are errors, defaults fill what is missing).
 * `loadConfig` reads a YAML or JSON file; a problem becomes one line naming
 * the key.
 */
import { readFile } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { type Static, type TSchema, Type } from '@sinclair/typebox'
import { Ajv, type ErrorObject, type ValidateFunction } from 'ajv'
import { parse as parseYaml } from 'yaml'

const strict = { additionalProperties: false } as const
const int = (min: number, def: number, max?: number) =>
  Type.Integer(max === undefined ? { minimum: min, default: def } : { minimum: min, maximum: max, default: def })
const section = <T extends Record<string, TSchema>>(props: T) => Type.Object(props, { ...strict, default: {} })
const oneOf = <T extends string>(values: readonly T[], def: T) => Type.Unsafe<T>({ type: 'string', enum: values, default: def })

const McpServerSchema = Type.Object({
  command: Type.Optional(Type.String()),
  args: Type.Array(Type.String(), { default: [] }),
  env: Type.Record(Type.String(), Type.String(), { default: {} }),
  url: Type.Optional(Type.String()),
  internal_only: Type.Boolean({ default: true }),
  timeout_ms: int(1, 60_000),
}, strict)

const TokenSchema = Type.Object({
  token: Type.String({ minLength: 1 }),
  tenant: Type.String({ minLength: 1, maxLength: 128 }),
  allowed_tools: Type.Array(Type.String(), { default: ['*'] }),
}, strict)

export const ConfigSchema = Type.Object({
  server: section({
    host: Type.String({ default: '127.0.0.1' }),
    port: int(0, 8080, 65535),
    body_limit_bytes: int(1024, 10 * 1024 * 1024),
    drain_timeout_ms: int(0, 10_000),
    /** How long a client may take to send its whole request (headers and body). */
    request_timeout_ms: int(100, 60_000),
    /** The largest request line plus headers accepted; a longer URL is refused too. */
    max_header_bytes: int(1024, 16 * 1024),
    /** MCP sessions one tenant may hold; a new one beyond it ends the tenant's least recently used. */
    max_mcp_sessions: int(1, 100),
    /** An MCP session unused this long ends (and its workspace goes). */
    mcp_session_idle_seconds: int(1, 900),
    /** How long an Idempotency-Key's answer is kept and replayed. */
    idempotency_ttl_seconds: int(1, 86_400),
    /**
     * The URL at which the other instances sharing `workspaces.root` reach this
     * one (e.g. `http://10.0.3.7:8080`): requests about its processes are
     * forwarded there. Unset: a single instance.
     */
    advertise_url: Type.Optional(Type.String({ pattern: '^https?://[^/?#]+/?$' })),
  }),
  workspaces: section({
    root: Type.String({ default: path.join(os.tmpdir(), 'toolport-workspaces') }),
    /** Where ephemeral workspaces go (default `<root>/ephemeral`); must be private to one instance when `root` is shared. */
    ephemeral_root: Type.Optional(Type.String()),
    ttl_seconds: int(1, 3600),
    sweep_interval_seconds: int(1, 60),
    max_archive_entries: int(1, 10_000),
    max_archive_bytes: int(1, 512 * 1024 * 1024),
    /** Persistent workspaces one tenant may hold. */
    max_per_tenant: int(1, 1000),
    /** Bytes of files one workspace may hold (checked before file-tool writes and archive uploads). */
    max_bytes: int(1024, 1024 * 1024 * 1024),
    /** Per-tenant overrides of the two quotas above. */
    tenant_quotas: Type.Record(Type.String(), Type.Object({
      max_workspaces: Type.Optional(Type.Integer({ minimum: 1 })),
      max_workspace_bytes: Type.Optional(Type.Integer({ minimum: 1024 })),
    }, strict), { default: {} }),
  }),
  limits: section({
    max_concurrent: int(1, 16),
    max_queue: int(0, 256),
    queue_timeout_ms: int(1, 30_000),
    max_result_bytes: int(256, 65_536),
  }),
  auth: section({
    tokens: Type.Array(TokenSchema, { default: [] }),
    /** A YAML or JSON file holding more tokens (a mounted Kubernetes Secret). */
    tokens_file: Type.Optional(Type.String()),
    disabled: Type.Boolean({ default: false }),
  }),
  sandbox: section({
    mode: oneOf(['auto', 'bwrap', 'none'], 'auto'),
    network: Type.Boolean({ default: false }),
    cpu_seconds: int(1, 600),
    max_file_bytes: int(1024, 1024 * 1024 * 1024),
    max_processes: int(1, 256),
    max_memory_bytes: int(16 * 1024 * 1024, 4 * 1024 * 1024 * 1024),
    /** Size of the sandbox's own /tmp and /dev/shm (each a tmpfs held in the host's memory). */
    tmp_bytes: int(4096, 64 * 1024 * 1024),
  }),
  tools: section({
    builtin: Type.Optional(Type.Array(Type.String())),
    exec_shell: section({
      timeout_default: int(1, 30),
      timeout_max: int(1, 300),
      denylist: Type.Optional(Type.Array(Type.String())),
    }),
    /** Long-running processes (on when `builtin` globs match the process_* tools). */
    processes: section({
      max_per_workspace: int(1, 8),
      timeout_default: int(1, 3600),
      timeout_max: int(1, 86_400),
      /** Output kept per process (both streams, the most recent). */
      max_output_bytes: int(1024, 1024 * 1024),
      /** Ended processes kept per workspace, with their output. */
      keep_ended: int(0, 50),
    }),
    spawn: section({
      max_concurrent: int(1, 5),
      timeout_default: int(1, 60),
    }),
    web_fetch: section({
      max_bytes: int(1, 10 * 1024 * 1024),
      allow_private_networks: Type.Boolean({ default: false }),
    }),
    web_search: section({
      endpoint: Type.Optional(Type.String()),
    }),
    dirs: Type.Array(Type.String(), { default: [] }),
    executable_timeout_seconds: int(1, 60),
    stub: Type.Boolean({ default: false }),
    mcp_servers: Type.Record(Type.String({ pattern: '^[A-Za-z0-9_-]+$' }), McpServerSchema, { default: {} }),
  }),
  channels: Type.Record(Type.String(), Type.Object({ webhook: Type.String() }, strict), { default: {} }),
  logging: section({
    level: oneOf(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], 'info'),
  }),
}, strict)

export type Config = Static<typeof ConfigSchema>
export type McpServerConfig = Static<typeof McpServerSchema>

/** A configuration problem, rendered as one line that names the key. */
export class ConfigError extends Error {
  constructor (message: string) {
    super(message)
    this.name = 'ConfigError'
  }
}

// Compiled at every start to validate one config: no meta-schema check of the service's own
// constant schemas, and no optimising of code that runs once (both cost more than the validation).
const ajv = new Ajv({ allErrors: false, useDefaults: true, strict: false, validateSchema: false, code: { optimize: false } })
const validateConfig = ajv.compile<Config>(ConfigSchema)

function keyOf (error: ErrorObject): string {
  const parts = error.instancePath.split('/').slice(1).map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'))
  if (error.keyword === 'additionalProperties') parts.push(String(error.params['additionalProperty']))
  if (error.keyword === 'required') parts.push(String(error.params['missingProperty']))
  return parts.join('.') || '(top level)'
}

function describe (error: ErrorObject): string {
  if (error.keyword === 'additionalProperties') return 'unknown key'
  if (error.keyword === 'required') return 'is required'
  if (error.keyword === 'enum') return `must be one of ${(error.params['allowedValues'] as unknown[]).join(', ')}`
  return error.message ?? 'is invalid'
}

/** Validates a parsed config object (filling defaults) or throws ConfigError. */
export function parseConfig (raw: unknown): Config {
  const value = raw ?? {}
  if (typeof value !== 'object' || Array.isArray(value)) throw new ConfigError('config: the top level must be a mapping')
  const copy = structuredClone(value)
  if (!validateConfig(copy)) {
    const error = validateConfig.errors?.[0]
    throw new ConfigError(error ? `config: ${keyOf(error)}: ${describe(error)}` : 'config: invalid')
  }
  const mcpProblem = Object.entries(copy.tools.mcp_servers).find(([, s]) => s.command !== undefined && s.url !== undefined)
  if (mcpProblem) throw new ConfigError(`config: tools.mcp_servers.${mcpProblem[0]}: set either command or url, not both`)
  return copy
}

/** The embedded defaults (no file). */
export function defaultConfig (): Config {
  return parseConfig({})
}

/** Compiled on first use: most services have no tokens file. */
let validateTokens: ValidateFunction<Config['auth']['tokens']> | undefined

/**
 * Adds the tokens of `auth.tokens_file` (a YAML or JSON list of
 * `{token, tenant, allowed_tools}`) to the configured ones.
 */
export async function withTokensFile (config: Config): Promise<Config> {
  const file = config.auth.tokens_file
  if (file === undefined) return config
  let raw: unknown
  try {
    raw = parseYaml(await readFile(file, 'utf8'))
  } catch (error) {
    throw new ConfigError(`config: auth.tokens_file: cannot read ${file}: ${(error as NodeJS.ErrnoException).code ?? 'not YAML or JSON'}`)
  }
  validateTokens ??= ajv.compile<Config['auth']['tokens']>(Type.Array(TokenSchema))
  if (!validateTokens(raw)) {
    const error = validateTokens.errors?.[0]
    throw new ConfigError(`config: auth.tokens_file: ${error ? `${keyOf(error) === '(top level)' ? 'the list' : `entry ${keyOf(error)}`}: ${describe(error)}` : 'invalid'}`)
  }
  return { ...config, auth: { ...config.auth, tokens: [...config.auth.tokens, ...raw] } }
}

/** Reads and validates a YAML or JSON file (JSON is YAML, so one parser serves both). */
export async function loadConfigFile (file: string): Promise<Config> {
  let text: string
  try {
    text = await readFile(file, 'utf8')
  } catch (error) {
    throw new ConfigError(`config: cannot read ${file}: ${(error as NodeJS.ErrnoException).code ?? 'error'}`)
  }
  let raw: unknown
  try {
    raw = /\.json$/i.test(file) ? JSON.parse(text) : parseYaml(text, { prettyErrors: false })
  } catch (error) {
    const firstLine = String((error as Error).message).split('\n')[0]
    throw new ConfigError(`config: cannot parse ${file}: ${firstLine}`)
  }
  return resolvePaths(parseConfig(raw), path.dirname(path.resolve(file)))
}

/**
 * Relative paths in a config file are relative to the file's own directory
 * (as in docker-compose), so the service finds them whatever directory it
 * was started from.
 */
function resolvePaths (config: Config, base: string): Config {
  const resolve = (p: string) => path.resolve(base, p)
  config.tools.dirs = config.tools.dirs.map(resolve)
  config.workspaces.root = resolve(config.workspaces.root)
  if (config.workspaces.ephemeral_root !== undefined) config.workspaces.ephemeral_root = resolve(config.workspaces.ephemeral_root)
  if (config.auth.tokens_file !== undefined) config.auth.tokens_file = resolve(config.auth.tokens_file)
  return config
}
