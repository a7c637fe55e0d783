/** A ToolContext for calling a tool directly, with a fresh workspace directory. */
import { realpath } from 'node:fs/promises'
import { pino } from 'pino'
import type { ToolContext } from '../../src/execution/tool.ts'
import { tempDir } from './temp.ts'

export async function toolContext (overrides: Partial<ToolContext> = {}): Promise<ToolContext> {
  return {
    workspaceDir: await realpath(await tempDir('toolport-ctx-')),
    workspaceId: null,
    signal: new AbortController().signal,
    maxResultBytes: 65_536,
    log: pino({ level: 'silent' }),
    requestId: 'test',
    tenant: 'default',
    ...overrides,
  }
}

/** The code of the ToolError a promise rejects with ('ok' when it resolves). */
export async function codeOf (promise: Promise<unknown>): Promise<string> {
  return promise.then(() => 'ok', (error: { code?: string }) => error.code ?? String(error))
}
