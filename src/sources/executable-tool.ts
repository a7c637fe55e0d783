/**
 * One self-describing executable as a Tool: its `--describe` output is the
 * schema; a call runs the file with the JSON arguments as its single
 * argument, in the workspace, through the sandbox.
 */
import os from 'node:os'
import path from 'node:path'
import { type AnyTool, HINTS, hintsOf, inputSchemaProblem, type JsonSchema, SOURCE_TOOL_NAME, type ToolAnnotations } from '../execution/tool.ts'
import { descriptorShortage, ToolError } from '../errors.ts'
import { checkArgv } from '../sandbox/command-rules.ts'
import type { ProcessRunner } from '../sandbox/types.ts'
import { clipText, truncateString } from '../execution/truncate.ts'
import { nestedDeeperThan, parseExactly } from '../execution/json-text.ts'

/**
 * stdout kept, in results' limits: an output longer than this many times
 * the call's result limit is returned cut, as a string, never parsed (a
 * few MiB of `[],[],…` parse into a GiB of arrays).
 */
export const STDOUT_RESULT_LIMITS = 4
export const STDERR_IN_ERROR_BYTES = 4096

export interface Description {
  name: string
  description: string
  parameters: JsonSchema
  /** The MCP hints the executable gave (optional in `--describe`); the others take MCP's defaults. */
  annotations: Partial<ToolAnnotations>
}

/** A reason when `annotations` is given but is not an object whose hints are booleans. */
function badAnnotations (annotations: unknown): string | undefined {
  if (annotations === undefined) return undefined
  if (typeof annotations !== 'object' || annotations === null || Array.isArray(annotations)) return 'annotations must be an object of MCP hints'
  const wrong = HINTS.find((hint) => hint in annotations && typeof (annotations as Record<string, unknown>)[hint] !== 'boolean')
  return wrong === undefined ? undefined : `annotations.${wrong} must be true or false`
}

/** Checks a `--describe` answer: a reason string when it is not a valid description. */
export function parseDescription (stdout: string): Description | string {
  let value: unknown
  try {
    value = JSON.parse(stdout)
  } catch {
    return '--describe did not print valid JSON'
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return '--describe did not print a JSON object'
  const { name, description, parameters, annotations } = value as Record<string, unknown>
  // Dots alone (`..`) would be a path segment URLs fold away (`/v1/tools/../invoke`).
  if (typeof name !== 'string' || !SOURCE_TOOL_NAME.test(name) || /^\.+$/.test(name)) return 'name must be a string of 1 to 128 letters, digits, "_", "." or "-", not dots alone'
  if (typeof description !== 'string') return 'description must be a string'
  const parametersProblem = inputSchemaProblem(parameters)
  if (parametersProblem !== undefined) return parametersProblem
  const annotationsProblem = badAnnotations(annotations)
  if (annotationsProblem !== undefined) return annotationsProblem
  return { name, description, parameters: parameters as JsonSchema, annotations: hintsOf(annotations) }
}

/**
 * stdout as the tool's result: parsed when it is JSON (nested no deeper than results may, its numbers kept
 * exactly), the text otherwise.
 */
export function parsedStdout (stdout: string): unknown {
  const trimmed = stdout.trim()
  if (trimmed === '') return stdout
  const parsed = parseExactly(trimmed)
  return parsed === undefined || nestedDeeperThan(parsed.value) ? stdout : parsed.value
}

export function executableTool (file: string, description: Description, options: { runner: ProcessRunner, stub: boolean, timeoutSeconds: number }): AnyTool {
  return {
    name: description.name,
    description: description.description,
    parameters: description.parameters,
    source: 'executable',
    annotations: description.annotations,
    async execute (args, ctx) {
      const argument = JSON.stringify(args)
      // Too long for one argument, it could not even start: the caller's to shorten, not a failed run.
      checkArgv([argument], 'arguments', 'pass long content through a file in the workspace')
      const run = await options.runner.run({
        command: file,
        args: [argument],
        cwd: ctx.workspaceDir,
        env: options.stub ? { SHELLCLAW_STUB: '1' } : {},
        timeoutMs: options.timeoutSeconds * 1000,
        signal: ctx.signal,
        maxOutputBytes: STDOUT_RESULT_LIMITS * ctx.maxResultBytes,
        readOnlyPaths: [path.dirname(file)],
      })
      if (run.timedOut) throw new ToolError('Timeout', `${description.name} timed out after ${options.timeoutSeconds}s`)
      if (run.cancelled) throw new ToolError('ExecutionFailed', 'cancelled')
      // Not started for want of a descriptor: it may start once others close.
      const shortage = descriptorShortage({ code: run.startFailure })
      if (shortage) throw shortage
      if (run.exitCode !== 0) {
        const stderr = clipText(run.stderr, STDERR_IN_ERROR_BYTES)
        // Killed by a signal, it has the code a shell (and bubblewrap, which runs it under the sandbox) gives: 128 + the signal's number.
        const exitCode = run.signal === null ? run.exitCode : 128 + (os.constants.signals[run.signal as NodeJS.Signals] ?? 0)
        const ended = run.signal === null ? `exited with code ${exitCode}` : `was killed by ${run.signal} (code ${exitCode})`
        const detail = stderr.trim() === '' ? `${description.name} ${ended}` : `${description.name} ${ended}: ${stderr.trim()}`
        throw new ToolError('ExecutionFailed', detail, { extra: { exit_code: exitCode, stderr } })
      }
      if (!run.stdoutTruncated) return parsedStdout(run.stdout)
      // Only the start was kept: the notice names how much the tool printed, not how much was kept.
      ctx.markTruncated?.()
      return truncateString(run.stdout, ctx.maxResultBytes, run.stdoutBytes)
    },
  }
}
