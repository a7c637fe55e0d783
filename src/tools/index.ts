/**
 * The built-in tools, chosen by `tools.builtin` globs. Unset, the clawft set
 * serves; globs choose among all built-ins, so `["*"]` adds omega's
 * bash/read/write/edit. `message` joins when a channel is configured.
 */
import type { Logger } from 'pino'
import type { Config } from '../config.ts'
import { globMatcher } from '../execution/globs.ts'
import type { AnyTool } from '../execution/tool.ts'
import type { ProcessRunner } from '../sandbox/types.ts'
import { editFileTool } from './edit-file.ts'
import { createExecShellTool } from './exec-shell.ts'
import { listDirectoryTool } from './list-directory.ts'
import { memoryReadTool } from './memory-read.ts'
import { memoryWriteTool } from './memory-write.ts'
import { createMessageTool } from './message.ts'
import { bashTool, editTool, readTool, writeTool } from './omega/index.ts'
import { readFileTool } from './read-file.ts'
import { createProcessTools } from './process-tools.ts'
import type { ProcessLocator } from '../processes/process-locator.ts'
import { createSpawnTool } from './spawn.ts'
import { createWebFetchTool } from './web-fetch.ts'
import { createWebSearchTool } from './web-search.ts'
import { writeFileTool } from './write-file.ts'

export const CLAWFT_TOOL_NAMES = [
  'read_file', 'write_file', 'edit_file', 'list_directory', 'exec_shell',
  'memory_read', 'memory_write', 'web_search', 'web_fetch', 'spawn',
] as const

function clawftTools (config: Config, runner: ProcessRunner): AnyTool[] {
  return [
    readFileTool,
    writeFileTool,
    editFileTool,
    listDirectoryTool,
    createExecShellTool({ config: config.tools.exec_shell, runner }),
    memoryReadTool,
    memoryWriteTool,
    createWebSearchTool(config.tools.web_search),
    createWebFetchTool(config.tools.web_fetch),
    createSpawnTool({ config: config.tools.spawn, runner }),
  ]
}

function omegaTools (runner: ProcessRunner): AnyTool[] {
  return [bashTool(runner), readTool, writeTool, editTool]
}

/**
 * The enabled built-ins (without `message`, which registers last). The
 * process tools are never in the default set: globs must choose them.
 */
export function builtinTools (config: Config, runner: ProcessRunner, processes?: ProcessLocator): AnyTool[] {
  const globs = config.tools.builtin
  if (globs === undefined) return clawftTools(config, runner)
  const enabled = globMatcher(globs)
  const processTools = processes ? createProcessTools(processes) : []
  return [...clawftTools(config, runner), ...omegaTools(runner), ...processTools].filter((tool) => enabled(tool.name))
}

/** `message`, when at least one channel is configured (and the globs, if set, allow it). */
export function messageTools (config: Config, log: Logger): { tools: AnyTool[], close: () => Promise<void> } {
  const enabled = config.tools.builtin === undefined ? () => true : globMatcher(config.tools.builtin)
  if (Object.keys(config.channels).length === 0 || !enabled('message')) return { tools: [], close: async () => {} }
  const { tool, close } = createMessageTool(config.channels, log)
  return { tools: [tool], close }
}
