/**
 * The configuration's schema (TypeBox): the source of the `Config` type and
 * of the validators in config-validators.ts, which
 * `node scripts/write-config-validators.ts` generates from it (ajv's
 * standalone code: no schema is compiled at start-up). A change here needs
 * that command; a test fails until the generated file matches.
 */
import { type Static, type TSchema, Type } from '@sinclair/typebox'

const strict = { additionalProperties: false } as const
/** A map's key, whatever it holds: TypeBox's own pattern for a string key (`^(.*)$`) takes no line break, and a key with one went unchecked. */
const AnyKey = Type.String({ pattern: '^[\\s\\S]*$' })
/** An integer; without a maximum of its own, one JavaScript holds exactly (YAML's `.inf` and JSON's `1e400` are no integers). */
const int = (min: number, def: number, max = Number.MAX_SAFE_INTEGER) => Type.Integer({ minimum: min, maximum: max, default: def })
/**
 * The longest duration the config takes, 24 days: a Node.js timer fires at
 * once past about 24.8 days, and the service adds a few seconds to some.
 */
const MAX_DURATION_SECONDS = 24 * 24 * 3600
/** Durations that become timers: milliseconds, and whole seconds (multiplied by 1000). */
const ms = (min: number, def: number) => int(min, def, MAX_DURATION_SECONDS * 1000)
const seconds = (min: number, def: number) => int(min, def, MAX_DURATION_SECONDS)
/** How long a workspace or an idempotent answer may be kept: a year, as a request's own `ttl_seconds` allows. */
const MAX_KEPT_SECONDS = 365 * 24 * 3600
/** Linux's largest pid limit (PID_MAX_LIMIT): a larger process count is no limit a kernel takes. */
const MAX_PROCESSES = 4 * 1024 * 1024
const section = <T extends Record<string, TSchema>>(props: T) => Type.Object(props, { ...strict, default: {} })
const oneOf = <T extends string>(values: readonly T[], def: T) => Type.Unsafe<T>({ type: 'string', enum: values, default: def })

const McpServerSchema = Type.Object({
  command: Type.Optional(Type.String()),
  args: Type.Array(Type.String(), { default: [] }),
  env: Type.Record(AnyKey, Type.String(), { default: {} }),
  url: Type.Optional(Type.String()),
  internal_only: Type.Boolean({ default: true }),
  timeout_ms: ms(1, 60_000),
}, strict)

export const TokenSchema = Type.Object({
  // What an Authorization header carries intact: printable ASCII, no spaces.
  token: Type.String({ minLength: 1, pattern: '^[\\x21-\\x7E]+$' }),
  tenant: Type.String({ minLength: 1, maxLength: 128 }),
  allowed_tools: Type.Array(Type.String(), { default: ['*'] }),
}, strict)

export const ConfigSchema = Type.Object({
  server: section({
    host: Type.String({ default: '127.0.0.1' }),
    port: int(0, 8080, 65535),
    body_limit_bytes: int(1024, 10 * 1024 * 1024),
    drain_timeout_ms: ms(0, 10_000),
    /** How long a client may take to send its whole request (headers and body). */
    request_timeout_ms: ms(100, 60_000),
    /** The largest request line plus headers accepted; a longer URL is refused too. */
    max_header_bytes: int(1024, 16 * 1024),
    /** MCP sessions one tenant may hold; a new one beyond it ends the tenant's least recently used. */
    max_mcp_sessions: int(1, 100),
    /** An MCP session unused this long ends (and its workspace goes). */
    mcp_session_idle_seconds: seconds(1, 900),
    /** How long an Idempotency-Key's answer is kept and replayed. */
    idempotency_ttl_seconds: int(1, 86_400, MAX_KEPT_SECONDS),
    /**
     * The URL at which the other instances sharing `workspaces.root` reach this
     * one (e.g. `http://10.0.3.7:8080`): requests about its processes are
     * forwarded there. Unset: a single instance.
     */
    advertise_url: Type.Optional(Type.String({ pattern: '^https?://[^/?#]+/?$' })),
  }),
  workspaces: section({
    /** Default `<os.tmpdir()>/toolport-workspaces`, filled in at run time (parseConfig), not when the validator is generated. */
    root: Type.Optional(Type.String()),
    /** Where ephemeral workspaces go (default `<root>/ephemeral`); must be private to one instance when `root` is shared. */
    ephemeral_root: Type.Optional(Type.String()),
    ttl_seconds: int(1, 3600, MAX_KEPT_SECONDS),
    sweep_interval_seconds: seconds(1, 60),
    max_archive_entries: int(1, 10_000),
    max_archive_bytes: int(1, 512 * 1024 * 1024),
    /** Persistent workspaces one tenant may hold. */
    max_per_tenant: int(1, 1000),
    /** Bytes of files one workspace may hold (checked before file-tool writes and archive uploads). */
    max_bytes: int(1024, 1024 * 1024 * 1024),
    /** Per-tenant overrides of the two quotas above. */
    tenant_quotas: Type.Record(AnyKey, Type.Object({
      max_workspaces: Type.Optional(Type.Integer({ minimum: 1, maximum: Number.MAX_SAFE_INTEGER })),
      max_workspace_bytes: Type.Optional(Type.Integer({ minimum: 1024, maximum: Number.MAX_SAFE_INTEGER })),
    }, strict), { default: {} }),
  }),
  limits: section({
    max_concurrent: int(1, 16),
    max_queue: int(0, 256),
    queue_timeout_ms: ms(1, 30_000),
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
    max_processes: int(1, 256, MAX_PROCESSES),
    max_memory_bytes: int(16 * 1024 * 1024, 4 * 1024 * 1024 * 1024),
    /** Size of the sandbox's own /tmp and /dev/shm (each a tmpfs held in the host's memory). */
    tmp_bytes: int(4096, 64 * 1024 * 1024),
  }),
  tools: section({
    builtin: Type.Optional(Type.Array(Type.String())),
    exec_shell: section({
      timeout_default: seconds(1, 30),
      timeout_max: seconds(1, 300),
      denylist: Type.Optional(Type.Array(Type.String())),
    }),
    /** Long-running processes (on when `builtin` globs match the process_* tools). */
    processes: section({
      max_per_workspace: int(1, 8),
      timeout_default: seconds(1, 3600),
      timeout_max: seconds(1, 86_400),
      /** Output kept per process (both streams, the most recent). */
      max_output_bytes: int(1024, 1024 * 1024),
      /** Ended processes kept per workspace, with their output. */
      keep_ended: int(0, 50),
    }),
    spawn: section({
      max_concurrent: int(1, 5),
      timeout_default: seconds(1, 60),
    }),
    web_fetch: section({
      max_bytes: int(1, 10 * 1024 * 1024),
      allow_private_networks: Type.Boolean({ default: false }),
    }),
    web_search: section({
      endpoint: Type.Optional(Type.String()),
    }),
    dirs: Type.Array(Type.String(), { default: [] }),
    executable_timeout_seconds: seconds(1, 60),
    stub: Type.Boolean({ default: false }),
    mcp_servers: Type.Record(Type.String({ pattern: '^[A-Za-z0-9_-]+$' }), McpServerSchema, { default: {}, additionalProperties: false }),
  }),
  channels: Type.Record(AnyKey, Type.Object({ webhook: Type.String() }, strict), { default: {} }),
  logging: section({
    level: oneOf(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'], 'info'),
  }),
}, strict)

/** As validated, before parseConfig fills in the defaults that depend on the machine. */
export type ValidatedConfig = Static<typeof ConfigSchema>
export type McpServerConfig = Static<typeof McpServerSchema>
/** The list a tokens file holds. */
export const TokensSchema = Type.Array(TokenSchema)
