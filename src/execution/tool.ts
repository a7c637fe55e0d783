/**
 * The Tool interface of the reference designs: a name, a description, a JSON Schema for the
 * arguments and an `execute` that answers a JSON value or throws a ToolError.
 */
import type { Logger } from 'pino'
import { MAX_JSON_DEPTH, nestedDeeperThan } from './json-text.ts'
import type { Limiter } from './limiter.ts'
import type { WorkspaceQuota } from '../workspaces/quotas.ts'

export type JsonSchema = Record<string, unknown>

/** MCP's four behaviour hints. A client may rely on them only as far as it trusts the server. */
export interface ToolAnnotations {
  readOnlyHint: boolean
  destructiveHint: boolean
  idempotentHint: boolean
  openWorldHint: boolean
}

/** The four hint names, in MCP's order. */
export const HINTS = ['readOnlyHint', 'destructiveHint', 'idempotentHint', 'openWorldHint'] as const

/** What MCP assumes of a hint nobody gave: the cautious reading. */
export const DEFAULT_ANNOTATIONS: Readonly<ToolAnnotations> = { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: true }

/** The four hints of an untrusted `annotations` value (an upstream server's, an executable's): booleans only, the rest dropped. */
export function hintsOf (value: unknown): Partial<ToolAnnotations> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return {}
  const given = value as Record<string, unknown>
  return Object.fromEntries(HINTS.filter((hint) => typeof given[hint] === 'boolean').map((hint) => [hint, given[hint]]))
}

/** A tool's four hints, each the tool's own or MCP's default. */
export function annotationsOf (tool: AnyTool): ToolAnnotations {
  return { ...DEFAULT_ANNOTATIONS, ...tool.annotations }
}

/** Where a tool comes from, as the catalog reports it. */
export type ToolSource = 'builtin' | 'executable' | 'mcp'

/** What a running call knows about its surroundings. Nothing here knows about HTTP. */
export interface ToolContext {
  /** Absolute, canonical path of the call's workspace directory. */
  workspaceDir: string
  /** The workspace id, or null for an ephemeral workspace. */
  workspaceId: string | null
  /** The workspace outlives the call (a persistent one, or an MCP session's): processes may be started in it. */
  keepsProcesses?: boolean
  /** Fires when the client goes away, the service shuts down or the call times out. */
  signal: AbortSignal
  /** The effective result limit in bytes (the tool may use it to read no more than needed). */
  maxResultBytes: number
  log: Logger
  requestId: string
  tenant: string
  /** The caller's own credentials, for a call forwarded to the instance that runs a process (processes/peers.ts). */
  credentials?: string | undefined
  /** Another instance forwarded this call here: it is answered from this instance's processes only. */
  forwarded?: boolean
  /** The workspace's byte quota: writes ask it first. Absent means unlimited (direct calls in tests). */
  quota?: WorkspaceQuota
  /** A tool that cut its own result to fit (command output, a file's line) says so: the answer's `truncated` turns true. */
  markTruncated?: () => void
}

/** The longest tool name the service takes (in a URL, a batch item): a source's tool with a longer one is left out of the catalog. */
export const MAX_TOOL_NAME_CHARS = 256

/**
 * The name a tool source (an executable, an upstream MCP server) may give a
 * tool, as MCP recommends. Model APIs refuse a request whose tools' names
 * hold other characters (a space, a slash, a newline), every tool with it;
 * OpenAI's also refuse a "." and names over 64 characters, which MCP allows
 * and such a tool keeps (README, "What a source's tool must be").
 */
export const SOURCE_TOOL_NAME = /^[A-Za-z0-9_.-]{1,128}$/

export interface Tool<Args = Record<string, unknown>> {
  name: string
  description: string
  /** JSON Schema of the arguments; the execution path validates them before `execute`. */
  parameters: JsonSchema
  source: ToolSource
  /** The MCP hints the tool's source gave; the ones missing take MCP's defaults (annotationsOf). */
  annotations?: Partial<ToolAnnotations>
  /** JSON Schema of a result (built-ins), before truncation: the catalog publishes it with the truncation envelope. */
  outputSchema?: JsonSchema
  /** Hidden from catalogs unless an `allowed` glob selects it (MCP `internal_only`). */
  internal?: boolean
  /** A per-tool concurrency limit (spawn's 5), taken after the global limiter. */
  limiter?: Limiter
  /**
   * Whether a call may change the workspace tree in ways the workspace's
   * usage is not told of (a process, an executable, an MCP server): the
   * usage is then scanned again after the call. Built-ins that run
   * processes say so; executables and MCP tools always may.
   */
  changesTreeFreely?: boolean
  execute: (args: Args, ctx: ToolContext) => Promise<unknown>
}

/**
 * Whether a call of `tool` may change the workspace tree without telling its
 * usage. Executables and MCP tools may; of the built-ins, those that run
 * processes and say so. The others only read, or write through the
 * contained writes, which report their own deltas (workspace-fs/write.ts).
 */
export function changesTreeFreely (tool: AnyTool): boolean {
  return tool.source !== 'builtin' || tool.changesTreeFreely === true
}

/**
 * Whether a call of `tool` runs commands in the workspace's sandbox, and so
 * in its network: the built-ins that run processes, and executables (an MCP
 * tool runs in its own server). process_start, whose process joins that
 * network too, finds where it runs itself, under the workspace's home lock.
 */
export function runsCommands (tool: AnyTool): boolean {
  return tool.source === 'executable' || (tool.source === 'builtin' && tool.changesTreeFreely === true)
}

/** A tool with its argument type erased, as the registry holds it. */
export type AnyTool = Tool<any>

/** The catalog entry of a tool (the native format). */
export interface ToolInfo {
  name: string
  description: string
  parameters: JsonSchema
  source: ToolSource
}

export function toolInfo (tool: AnyTool): ToolInfo {
  return { name: tool.name, description: tool.description, parameters: tool.parameters, source: tool.source }
}

const isSchemaObject = (value: unknown): boolean => typeof value === 'object' && value !== null && !Array.isArray(value)

/**
 * Why a tool's parameters, from a source (an executable's `--describe`, an
 * upstream MCP server), are no input schema every catalog takes: MCP's
 * Tool.inputSchema (an object schema whose properties are schemas and whose
 * `required` lists names), as OpenAI's and Anthropic's tools want it too.
 * One such tool would make MCP clients refuse the whole catalog.
 */
export function inputSchemaProblem (schema: unknown): string | undefined {
  if (!isSchemaObject(schema)) return 'parameters must be a JSON Schema object'
  const { type, properties, required } = schema as Record<string, unknown>
  if (type !== 'object') return 'parameters must have "type": "object" at the top level'
  if (properties !== undefined && (!isSchemaObject(properties) || !Object.values(properties as object).every(isSchemaObject))) {
    return 'parameters.properties must map each name to a schema object'
  }
  if (required !== undefined && (!Array.isArray(required) || !required.every((name) => typeof name === 'string'))) return 'parameters.required must be a list of property names'
  if (nestedDeeperThan(schema)) return `parameters nest more than ${MAX_JSON_DEPTH} levels deep`
  return undefined
}
