/**
 * The process tools: process_start, process_output, process_input,
 * process_kill and process_list, over the process table (processes/). They
 * need a workspace that outlives the call: a persistent one, or an MCP
 * session's. Their `output` is stdout and stderr as they came, from a
 * cursor (by default where the last output any of them returned for the
 * process stopped), cut to the result limit.
 */
import { type Static, Type } from '@sinclair/typebox'
import { defineBuiltin } from '../execution/define.ts'
import type { AnyTool, ToolContext } from '../execution/tool.ts'
import { ToolError } from '../errors.ts'
import { KILL_SIGNALS, type ManagedProcess } from '../processes/managed-process.ts'
import { type Asker, lostInfo, type ProcessLocator } from '../processes/process-locator.ts'

export const PROCESS_TOOL_NAMES = ['process_start', 'process_output', 'process_input', 'process_kill', 'process_list'] as const

const MAX_WAIT_MS = 30_000

const State = Type.Union([Type.Literal('running'), Type.Literal('exited'), Type.Literal('killed'), Type.Literal('timed_out'), Type.Literal('lost')])
const ExitCode = Type.Union([Type.Integer(), Type.Null()], { description: 'Set when the process exited by itself' })
const ProcessId = Type.String({ minLength: 1, description: 'The id process_start returned' })
const Wait = (def: number) => Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_WAIT_MS, description: `Milliseconds to wait for output when there is none yet (default ${def})` }))

const outputFields = {
  process_id: Type.String(),
  state: State,
  exit_code: ExitCode,
  output: Type.String({ description: 'stdout and stderr as they came, cut to the result limit' }),
  next: Type.Integer({ minimum: 0, description: 'The cursor after this output: pass it as `after` to continue' }),
}
const StartResult = Type.Object(outputFields, { additionalProperties: false })
const OutputResult = Type.Object({ ...outputFields, dropped_bytes: Type.Integer({ minimum: 0, description: 'Bytes after the cursor no longer kept' }) }, { additionalProperties: false })
type OutputResultType = Static<typeof OutputResult>

const readOnly = { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false }
const changing = { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: false }

function ensureLasting (ctx: ToolContext): void {
  if (ctx.keepsProcesses !== true) throw new ToolError('InvalidArgs', 'the process tools need a persistent workspace: pass "workspace"')
}

/** The output after `after` (default: where the tools last stopped) that fits the result limit; the tools' cursor moves past it. */
function outputResult (process: ManagedProcess, after: number | undefined, ctx: ToolContext): OutputResultType {
  // Read as much as the limit, then less in proportion to what its JSON takes beyond the room the
  // other fields leave (escaping makes a byte up to six), until it fits; at least one character is
  // returned, as the output endpoint does.
  let budget = ctx.maxResultBytes
  for (;;) {
    const read = process.output.read(after ?? process.toolCursor, budget)
    const info = process.info()
    const output = read.chunks.map((chunk) => chunk.data).join('')
    const result = { process_id: process.id, state: info.state, exit_code: info.exit_code, output, next: read.next, dropped_bytes: read.dropped }
    const room = ctx.maxResultBytes - Buffer.byteLength(JSON.stringify({ ...result, output: '' }))
    const outputJsonBytes = Buffer.byteLength(JSON.stringify(output)) - 2
    const outputBytes = Buffer.byteLength(output)
    if (outputJsonBytes > room && budget > 1) {
      budget = Math.max(1, Math.min(budget - 1, outputBytes - 1, Math.floor(outputBytes * Math.max(0, room) / outputJsonBytes)))
      continue
    }
    if (read.next < process.output.end) ctx.markTruncated?.()
    // The default cursor is where the last output returned ends: an answer with none (a cursor past the end) leaves it.
    if (read.chunks.length > 0) process.toolCursor = read.next
    return result
  }
}

function askerOf (ctx: ToolContext): Asker {
  return { tenant: ctx.tenant, workspace: ctx.workspaceId, dir: ctx.workspaceDir, credentials: ctx.credentials, forwarded: ctx.forwarded === true, requestId: ctx.requestId, signal: ctx.signal }
}

export function createProcessTools (locator: ProcessLocator): AnyTool[] {
  const table = locator.table
  /**
   * Runs `here` on a process this instance runs; a process another instance
   * runs gets the same call there; a lost one answers as ended, with no output.
   */
  const onProcess = async <R>(name: string, args: { process_id: string, after?: number }, ctx: ToolContext, here: (process: ManagedProcess) => Promise<R>): Promise<R | OutputResultType> => {
    ensureLasting(ctx)
    const located = await locator.locate(askerOf(ctx), args.process_id)
    if (located.where === 'here') return await here(located.process)
    if (located.where === 'elsewhere') {
      const answer = await locator.callTool(located.owner, located.record, name, args, { ...askerOf(ctx), maxResultBytes: ctx.maxResultBytes })
      if (answer) {
        if (answer.truncated) ctx.markTruncated?.()
        return answer.result as R
      }
    }
    if (name === 'process_input') throw new ToolError('Conflict', `process ${args.process_id} was lost: the instance that ran it is gone`)
    const info = lostInfo(located.record)
    return { process_id: info.id, state: info.state, exit_code: null, output: '', next: args.after ?? 0, dropped_bytes: 0 }
  }
  return [
    defineBuiltin({
      name: 'process_start',
      description: 'Start a shell command (sh -c) that keeps running after this call: a dev server, a long build or test run, a REPL. Waits up to yield_ms for it to end, then returns its output so far and a process_id for process_output, process_input and process_kill.',
      parameters: Type.Object({
        command: Type.String({ description: 'Shell command to run' }),
        yield_ms: Type.Optional(Type.Integer({ minimum: 0, maximum: MAX_WAIT_MS, description: 'Milliseconds to wait for the command to end before returning (default 10000)' })),
        timeout: Type.Optional(Type.Number({ exclusiveMinimum: 0, description: 'Seconds after which the process is stopped' })),
        stdin: Type.Optional(Type.Boolean({ description: 'Keep stdin open for process_input (default false)' })),
      }),
      outputSchema: StartResult,
      annotations: changing,
      async execute (args, ctx) {
        ensureLasting(ctx)
        // Its process joins the workspace's network: where another instance runs the workspace's processes, it starts there.
        const asker = { ...askerOf(ctx), maxResultBytes: ctx.maxResultBytes }
        const started = await locator.startAtHome<{ there: { result: unknown, truncated: boolean } } | { process: ManagedProcess }>(asker, {
          there: async (owner) => ({ there: await locator.runThere(owner, 'process_start', args, asker) }),
          here: async () => ({ process: await table.start({ tenant: ctx.tenant, id: ctx.workspaceId, dir: ctx.workspaceDir }, args) }),
        })
        if ('there' in started) {
          if (started.there.truncated) ctx.markTruncated?.()
          return started.there.result as Static<typeof StartResult>
        }
        const { process } = started
        // A caller that goes away ends the wait, never the process.
        await process.waitForEnd(args.yield_ms ?? 10_000, ctx.signal)
        const { dropped_bytes: _dropped, ...result } = outputResult(process, 0, ctx)
        return result
      },
    }),
    defineBuiltin({
      name: 'process_output',
      description: 'Output of a process since `after` (by default, since the last output returned for it), waiting up to wait_ms when there is none yet.',
      parameters: Type.Object({
        process_id: ProcessId,
        wait_ms: Wait(0),
        after: Type.Optional(Type.Integer({ minimum: 0, maximum: Number.MAX_SAFE_INTEGER, description: 'A cursor (`next` of an earlier answer); 0 for all output kept' })),
      }),
      outputSchema: OutputResult,
      annotations: readOnly,
      execute: (args, ctx) => onProcess('process_output', args, ctx, async (process) => {
        const after = args.after ?? process.toolCursor
        if (after >= process.output.end) await process.waitForChange(args.wait_ms ?? 0, ctx.signal)
        return outputResult(process, after, ctx)
      }),
    }),
    defineBuiltin({
      name: 'process_input',
      description: 'Write text to the stdin of a process started with stdin: true (eof: true closes it), then wait up to wait_ms for its output.',
      parameters: Type.Object({
        process_id: ProcessId,
        input: Type.String({ description: 'Text to write (include the newline a line needs)' }),
        eof: Type.Optional(Type.Boolean({ description: 'Close stdin after writing (default false)' })),
        wait_ms: Wait(1000),
      }),
      outputSchema: OutputResult,
      annotations: changing,
      execute: (args, ctx) => onProcess('process_input', args, ctx, async (process) => {
        process.input(args.input, args.eof === true)
        if (process.toolCursor >= process.output.end) await process.waitForChange(args.wait_ms ?? 1000, ctx.signal)
        return outputResult(process, undefined, ctx)
      }),
    }),
    defineBuiltin({
      name: 'process_kill',
      description: 'Stop a process and its whole process tree (TERM by default; KILL 2 s later if it still runs), and return its output not yet returned.',
      parameters: Type.Object({
        process_id: ProcessId,
        signal: Type.Optional(Type.Unsafe<typeof KILL_SIGNALS[number]>({ type: 'string', enum: [...KILL_SIGNALS], description: 'TERM (default), KILL, INT or HUP' })),
      }),
      outputSchema: OutputResult,
      annotations: changing,
      execute: (args, ctx) => onProcess('process_kill', args, ctx, async (process) => {
        await process.kill(args.signal ?? 'TERM')
        return outputResult(process, undefined, ctx)
      }),
    }),
    defineBuiltin({
      name: 'process_list',
      description: 'The processes of the workspace: the running ones and the most recently ended ones, oldest first.',
      parameters: Type.Object({}),
      outputSchema: Type.Object({
        processes: Type.Array(Type.Object({
          process_id: Type.String(),
          command: Type.String(),
          state: State,
          exit_code: ExitCode,
          started_at: Type.String(),
        }, { additionalProperties: false })),
      }, { additionalProperties: false }),
      annotations: readOnly,
      async execute (_args, ctx) {
        ensureLasting(ctx)
        const processes = await locator.list(askerOf(ctx))
        return { processes: processes.map((info) => ({ process_id: info.id, command: info.command, state: info.state, exit_code: info.exit_code, started_at: info.started_at })) }
      },
    }),
  ]
}
