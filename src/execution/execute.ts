/**
 * The one execution path. REST execute, batches and /mcp all call `execute`
 * and only translate its outcome: lookup, scope, argument validation, the
 * limiters, the workspace, cancellation, truncation, metrics and the
 * completion log line happen here, once.
 */
import type { Logger } from 'pino'
import { abortReason, asToolError, isFailure, OutcomeUnknown, ToolError } from '../errors.ts'
import type { NameMatcher } from './globs.ts'
import type { Limiter, Release } from './limiter.ts'
import type { Metrics } from './metrics.ts'
import type { ToolRegistry } from './registry.ts'
import { type AnyTool, changesTreeFreely, runsCommands } from './tool.ts'
import { clipText, errorWithinLimit, truncateResult } from './truncate.ts'
import { type TenantQuota, workspaceQuota } from '../workspaces/quotas.ts'
import { usageOf } from '../workspaces/usage.ts'
import type { WorkspaceLease } from '../workspaces/ephemeral.ts'
import { directoryExists } from '../workspaces/meta.ts'
import { type Identity, identityAt, sameIdentity } from '../workspaces/usage-directory.ts'
import { parseArguments, validateArguments } from './validation.ts'
import type { WorkspaceScope } from '../workspaces/scope.ts'

/** The outcome code (metrics, spans) of a call whose caller left: no failure of the tool or the service. */
export const CANCELLED = 'cancelled'

/** The span of one tool call. */
export interface CallSpan {
  /** `left`: its caller left before the answer (no failure). */
  end: (outcome: Outcome, how: { left: boolean }) => void
}

/** Tool calls: a span per call, a child of the request span active where it runs. */
export interface CallTracing {
  /** `callId`: the call's id in a batch. */
  startCall: (tool: string, callId: string | undefined) => CallSpan
  /** Sets an attribute on the request span active here (the MCP session id, known once initialize is handled). */
  annotateRequest: (key: string, value: string) => void
  /** The W3C `traceparent` (and `tracestate`) of the span active here, for a request this instance sends on (to another instance). */
  outgoingHeaders: () => Record<string, string>
  /** Runs `work` (and what it awaits) with the call's span active: what the tool sends on (to another instance) is its child. */
  during: <T>(span: CallSpan, work: () => Promise<T>) => Promise<T>
}

/** What the execution path needs of the running service. */
export interface ExecutionServices {
  registry: ToolRegistry
  limiter: Limiter
  metrics: Metrics
  /** The configured result limit: the default and the ceiling. */
  maxResultBytes: number
  /** Fires when the drain timeout of a shutdown has run out: running calls are cancelled. */
  killSignal: AbortSignal
  /** The quotas of a tenant (workspace bytes are checked by the file tools before they write). */
  quotaOf: (tenant: string) => TenantQuota
  /**
   * Where the completion line of every call goes: a logger without the
   * redaction pass, which costs more than the rest of the line, for a line
   * whose fields are all the service's own (no argument, header or result).
   */
  callLog: Logger
  /** A span per call, when tracing is on. */
  tracing?: CallTracing | undefined
  /**
   * Runs a call that runs commands in a persistent workspace at the instance
   * whose processes run in that workspace, where its network is (processes
   * on); undefined when none but this one does, and the call runs here.
   * `signal` is the call's own: its caller's, and the end of a shutdown's drain.
   */
  runAtProcessHome?: (call: { tool: string, args: Record<string, unknown>, maxResultBytes: number, signal: AbortSignal }, caller: Caller, workspaceId: string) => Promise<{ result: unknown, truncated: boolean } | undefined>
}

/** Who is calling, and from where. */
export interface Caller {
  tenant: string
  /** The tools the caller's token may use. */
  scope: NameMatcher
  requestId: string
  log: Logger
  /** Fires when the client goes away. */
  signal: AbortSignal
  /** The caller's own credentials (its Authorization header), passed on when a call is forwarded to another instance. */
  credentials?: string | undefined
  /** Another instance forwarded the call here: it is answered here, never forwarded again. */
  forwarded?: boolean
}

export interface ToolCall {
  /** The call's id in a batch (traced as gen_ai.tool.call.id). */
  id?: string
  name: string
  arguments: unknown
  /** The caller's result limit; capped by the configured one. */
  maxResultBytes?: number
}

export type Outcome =
  | { ok: true, tool: string, result: unknown, truncated: boolean, durationMs: number, workspace: string | null }
  | { ok: false, tool: string, error: ToolError, durationMs: number, workspace: string | null }

const MIN_RESULT_BYTES = 256
/** An unknown tool name is echoed (in `tool`, in logs) cut to this. */
const MAX_UNKNOWN_NAME_BYTES = 256

/** The tool `name` found, when the caller may use it: NotFound when absent, PermissionDenied when out of scope. */
export function usableTool (tool: AnyTool | undefined, name: string, scope: NameMatcher): AnyTool {
  if (!tool) throw new ToolError('NotFound', `no tool named ${JSON.stringify(name)}`)
  if (!scope(tool.name)) throw outOfScope(tool.name)
  return tool
}

/** The refusal of a tool the caller's token may not call. */
export function outOfScope (name: string): ToolError {
  return new ToolError('PermissionDenied', `tool ${JSON.stringify(name)} is outside this token's allowed tools`)
}

function effectiveLimit (configured: number, requested: number | undefined): number {
  if (requested === undefined) return configured
  return Math.max(MIN_RESULT_BYTES, Math.min(configured, Math.floor(requested)))
}

/** Slots of every limiter for `tenant`, in order; a refusal releases what was taken and counts in the rejections metric. */
export async function acquireAll (limiters: Limiter[], signal: AbortSignal, metrics: Metrics, tenant: string): Promise<Release> {
  const releases: Release[] = []
  try {
    for (const limiter of limiters) releases.push(await limiter.acquire(signal, tenant))
  } catch (error) {
    for (const release of releases.reverse()) release()
    // A call cancelled (its client gone) was not refused for want of room.
    if (!signal.aborted && error instanceof ToolError && (error.code === 'Overloaded' || error.code === 'ExecutionFailed')) {
      metrics.rejections.inc({ limiter: limiters[releases.length]?.options.name ?? 'unknown' })
    }
    throw error
  }
  return () => { for (const release of releases.reverse()) release() }
}

/**
 * A signal that fires when either source does, and the function that
 * unhooks it once the call is over. Cheaper than AbortSignal.any, whose
 * weak references to every call's signal pile up on the long-lived kill
 * signal until a full garbage collection clears them.
 */
function linkSignals (a: AbortSignal, b: AbortSignal): { signal: AbortSignal, dispose: () => void } {
  if (a.aborted) return { signal: a, dispose: () => {} }
  if (b.aborted) return { signal: b, dispose: () => {} }
  const controller = new AbortController()
  const onA = (): void => controller.abort(a.reason)
  const onB = (): void => controller.abort(b.reason)
  a.addEventListener('abort', onA, { once: true })
  b.addEventListener('abort', onB, { once: true })
  return {
    signal: controller.signal,
    dispose: () => {
      a.removeEventListener('abort', onA)
      b.removeEventListener('abort', onB)
    },
  }
}

/** Runs one tool call to an Outcome. Never throws. */
export async function execute (services: ExecutionServices, call: ToolCall, caller: Caller, workspace: WorkspaceScope): Promise<Outcome> {
  const started = performance.now()
  // Unknown names stay out of metric labels: a caller must not be able to mint label values.
  let toolName = clipText(call.name, MAX_UNKNOWN_NAME_BYTES)
  const span = services.tracing?.startCall(toolName, call.id)
  const traced = <T>(work: () => Promise<T>): Promise<T> => span && services.tracing ? services.tracing.during(span, work) : work()
  let metricName = '(unknown)'
  // Named from the start, so that a call refused before its workspace is leased is reported with it too.
  let workspaceId: string | null = workspace.named
  let outcome: Outcome
  let link: { signal: AbortSignal, dispose: () => void } | undefined
  const maxResultBytes = effectiveLimit(services.maxResultBytes, call.maxResultBytes)
  try {
    const found = services.registry.get(call.name)
    // The registered name, even in a refusal: `WRITE_FILE` out of scope is reported as write_file.
    toolName = found?.name ?? toolName
    metricName = found?.name ?? metricName
    const tool = usableTool(found, call.name, caller.scope)
    const args = parseArguments(call.arguments)
    validateArguments(tool, args, caller.log)
    workspace.validate()
    link = linkSignals(caller.signal, services.killSignal)
    const signal = link.signal
    const limiters = tool.limiter ? [services.limiter, tool.limiter] : [services.limiter]
    const release = await acquireAll(limiters, signal, services.metrics, caller.tenant)
    try {
      const lease = await workspace.lease()
      workspaceId = lease.id
      // The workspace's directory as the call found it: deleted, or deleted and made again, while it runs, it is another.
      const found = lease.id === null ? undefined : await identityAt(lease.dir)
      try {
        if (signal.aborted) throw new ToolError('ExecutionFailed', 'the call was cancelled before it started')
        // In a workspace whose processes run on another instance, commands run there too: that is where its network is.
        const atHome = lease.id !== null && runsCommands(tool) ? await traced(async () => await services.runAtProcessHome?.({ tool: tool.name, args, maxResultBytes, signal }, caller, lease.id as string)) : undefined
        if (atHome) {
          outcome = { ok: true, tool: toolName, result: atHome.result, truncated: atHome.truncated, durationMs: 0, workspace: workspaceId }
        } else {
          let cutByTool = false
          // The workspace's usage cannot follow what a process does: it is stale from now until a scan after the call.
          const endChange = changesTreeFreely(tool) ? usageOf(lease.dir).beginChange() : undefined
          const raw = await traced(() => tool.execute(args, {
            workspaceDir: lease.dir,
            workspaceId: lease.id,
            keepsProcesses: lease.id !== null || lease.keepsProcesses === true,
            signal,
            maxResultBytes,
            log: caller.log,
            requestId: caller.requestId,
            tenant: caller.tenant,
            credentials: caller.credentials,
            forwarded: caller.forwarded === true,
            quota: workspaceQuota(lease.dir, services.quotaOf(caller.tenant).maxWorkspaceBytes),
            markTruncated: () => { cutByTool = true },
          })).finally(() => {
            // An ephemeral workspace goes with its scope: a scan would count what is about to be removed.
            endChange?.({ rescan: lease.id !== null })
          })
          // A tool that cut its own result gave only its start: its size is not the whole's.
          const { value, truncated } = truncateResult(raw === undefined ? null : raw, maxResultBytes, { partial: cutByTool })
          outcome = { ok: true, tool: toolName, result: value, truncated: truncated || cutByTool, durationMs: 0, workspace: workspaceId }
        }
      } catch (error) {
        throw signal.aborted || tool.source === 'mcp' ? error : await asDeletedWorkspace(error, lease, found)
      } finally {
        await lease.release()
      }
    } finally {
      release()
    }
  } catch (thrown) {
    const error = asToolError(thrown)
    // A cut call that throws the cut itself (a forwarded request's AbortError) is answered as cut, not logged as a failure.
    const cut = link?.signal.aborted === true && thrown === link.signal.reason
    if (isFailure(thrown) && !cut) caller.log.error({ err: thrown, tool: toolName }, 'tool call failed')
    outcome = { ok: false, tool: toolName, error: errorWithinLimit(stoppedBy(error, services.killSignal, caller.signal), maxResultBytes), durationMs: 0, workspace: workspaceId }
  } finally {
    link?.dispose()
  }
  outcome.durationMs = Math.round((performance.now() - started) * 1000) / 1000
  // A caller that left (a client gone, an MCP cancel) is no failure of the tool or the service: no alert should count it as one.
  const left = !outcome.ok && caller.signal.aborted && abortReason(caller.signal) === undefined && !services.killSignal.aborted
  recordOutcome(services, caller.requestId, outcome, metricName, workspaceId, left)
  span?.end(outcome, { left })
  return outcome
}

/**
 * A call cut short answers why, not a bare "cancelled": a shutdown's drain
 * running out did not fail it (another instance can run it: 503 with
 * Retry-After); a caller's signal aborted with a ToolError as its reason
 * (a token revoked meanwhile) answers that error.
 */
function stoppedBy (error: ToolError, killSignal: AbortSignal, callerSignal: AbortSignal): ToolError {
  if (error.code !== 'ExecutionFailed' || error instanceof OutcomeUnknown) return error
  if (killSignal.aborted) return new ToolError('Overloaded', 'the service is shutting down and stopped this call before it finished; retry it', { retryAfterSeconds: 1, cause: error })
  const reason = abortReason(callerSignal)
  return reason ? new ToolError(reason.code, reason.message, { cause: error }) : error
}

/** Failures a workspace deleted under a call causes: its files or its directory gone from under the tool. */
const DELETION_SYMPTOMS = new Set(['ExecutionFailed', 'InvalidPath', 'FileNotFound'])

/**
 * A call of a tool that works in its workspace (a built-in, an executable;
 * an MCP tool runs in its own server), whose persistent workspace was
 * deleted while it ran (its directory is gone, or another made since under
 * the id; `found` undefined: already gone when the call looked, just after
 * its lookup) and that failed for it (a command that could not start there,
 * a file gone from under it), is NotFound, as a call after the deletion is:
 * not the 500 or the containment error the tool met. What it met stays its
 * cause (logged when it is no ToolError).
 */
export async function asDeletedWorkspace (error: unknown, lease: WorkspaceLease, found: Identity | undefined): Promise<unknown> {
  if (lease.id === null || (error instanceof ToolError && !DELETION_SYMPTOMS.has(error.code))) return error
  let deleted: boolean
  if (found === undefined) {
    // Not looked at: deleted only when the directory is missing, not when it could not be looked at.
    deleted = !await directoryExists(lease.dir).catch(() => true)
  } else {
    deleted = !sameIdentity(await identityAt(lease.dir), found)
  }
  return deleted ? new ToolError('NotFound', `workspace ${JSON.stringify(lease.id)} was deleted during the call`, { cause: error }) : error
}

function recordOutcome ({ metrics, callLog }: ExecutionServices, requestId: string, outcome: Outcome, metricName: string, workspace: string | null, left: boolean): void {
  const code = outcome.ok ? 'ok' : left ? CANCELLED : outcome.error.code
  const labels = { tool: metricName, code }
  metrics.calls.inc(labels)
  metrics.duration.observe(labels, outcome.durationMs / 1000)
  callLog.info({ request_id: requestId, tool: outcome.tool, workspace, code, duration_ms: outcome.durationMs }, 'tool call finished')
}
