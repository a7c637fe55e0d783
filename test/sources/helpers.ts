/**
 * Self-describing executables written into temporary tool directories, and a
 * logger whose warnings a test can read.
 */
import { chmod, mkdir, rename, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { pino, type Logger } from 'pino'
import { tempDir } from '../support/temp.ts'

/** The `--describe` answer of a tool taking `properties` (all optional). */
export function describeJson (name: string, description = `the ${name} tool`, properties: Record<string, unknown> = {}): string {
  return JSON.stringify({ name, description, parameters: { type: 'object', properties } })
}

/** A /bin/sh tool: prints `describe` on --describe, else runs `body` (with $1 the JSON arguments). */
export function shTool (describe: string, body: string): string {
  return `#!/bin/sh
if [ "$1" = "--describe" ]; then
  cat <<'JSON'
${describe}
JSON
  exit 0
fi
${body}
`
}

/**
 * Puts `content` at `dir/file` atomically (written beside, then renamed in),
 * so a directory scan never sees a half-written tool.
 */
export async function placeTool (dir: string, file: string, content: string, mode = 0o755): Promise<string> {
  const staging = path.join(path.dirname(dir), `.staging-${path.basename(dir)}`)
  await mkdir(staging, { recursive: true })
  const temp = path.join(staging, `${file}.${process.hrtime.bigint()}`)
  await writeFile(temp, content)
  await chmod(temp, mode)
  const target = path.join(dir, file)
  await rename(temp, target)
  return target
}

/** A fresh tools directory, inside its own temp dir (so the staging area is a sibling). */
export async function toolsDir (): Promise<string> {
  const dir = path.join(await tempDir('toolport-tools-'), 'tools')
  await mkdir(dir)
  return dir
}

export interface LogLine { level: number, msg: string, [key: string]: unknown }

/** A pino logger at `warn` that keeps its lines. */
export function capturingLogger (): { log: Logger, lines: LogLine[] } {
  const lines: LogLine[] = []
  const log = pino({ level: 'warn' }, { write: (line: string) => { lines.push(JSON.parse(line) as LogLine) } })
  return { log, lines }
}

/** Polls `probe` until it returns true (or `timeoutMs` passes); returns the last answer. */
export async function eventually (probe: () => Promise<boolean> | boolean, timeoutMs = 5000): Promise<boolean> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    if (await probe()) return true
    if (Date.now() > deadline) return false
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
}
