/**
 * shellclaw's self-describing executables as a tool source. The catalog is
 * derived at run time: the directories are watched (and their files' change
 * times re-checked every second), and only a new or changed file is asked
 * `--describe` again — never on a request. Anything that does not describe
 * itself properly is skipped with one warning.
 */
import { type FSWatcher, watch } from 'node:fs'
import { mkdtemp, readdir, realpath, rm, stat } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import type { Logger } from 'pino'
import { mapWithConcurrency } from '../execution/limiter.ts'
import { safePrefix } from '../execution/truncate.ts'
import type { AnyTool } from '../execution/tool.ts'
import type { ProcessRunner } from '../sandbox/types.ts'
import { executableTool, parseDescription } from './executable-tool.ts'

export const DESCRIBE_TIMEOUT_MS = 5000
/** How much of `--describe`'s output is read: a description is a few KiB. */
const DESCRIBE_MAX_BYTES = 1024 * 1024
const RESCAN_INTERVAL_MS = 1000
/** How many `--describe` runs a scan has going at once. */
const DESCRIBE_CONCURRENCY = 4

export interface ExecutableSourceOptions {
  dirs: string[]
  stub: boolean
  timeoutSeconds: number
  runner: ProcessRunner
  log: Logger
  onChange: (tools: AnyTool[]) => void
  /** How long `--describe` may take (DESCRIBE_TIMEOUT_MS by default). */
  describeTimeoutMs?: number
}

interface Known {
  fingerprint: string
  tool: AnyTool | null
}

const isExecutable = (mode: number): boolean => (mode & 0o111) !== 0

export class ExecutableSource {
  readonly #options: ExecutableSourceOptions
  readonly #known = new Map<string, Known>()
  readonly #warned = new Set<string>()
  readonly #watchers: FSWatcher[] = []
  #timer: NodeJS.Timeout | undefined
  #scanning: Promise<void> | undefined
  #rescanRequested = false
  #tools: AnyTool[] = []
  #closed = false

  constructor (options: ExecutableSourceOptions) {
    this.#options = options
  }

  tools (): AnyTool[] {
    return this.#tools
  }

  /** The first discovery, then watching. */
  async start (): Promise<void> {
    await this.rescan()
    for (const dir of this.#options.dirs) {
      try {
        this.#watchers.push(watch(dir, () => { void this.rescan() }))
      } catch (error) {
        this.#options.log.warn({ dir, err: error }, 'cannot watch a tools directory; changes are seen by polling')
      }
    }
    this.#timer = setInterval(() => { void this.rescan() }, RESCAN_INTERVAL_MS)
    this.#timer.unref()
  }

  close (): void {
    this.#closed = true
    clearInterval(this.#timer)
    for (const watcher of this.#watchers) watcher.close()
  }

  /** Looks at the directories again; concurrent requests fold into one more scan. */
  rescan (): Promise<void> {
    if (this.#scanning) {
      this.#rescanRequested = true
      return this.#scanning
    }
    this.#scanning = this.#scan().finally(() => {
      this.#scanning = undefined
      if (this.#rescanRequested && !this.#closed) {
        this.#rescanRequested = false
        void this.rescan()
      }
    })
    return this.#scanning
  }

  async #scan (): Promise<void> {
    const seen = new Set<string>()
    const changed: Array<{ file: string, fingerprint: string, executable: boolean }> = []
    for (const dir of this.#options.dirs) {
      const names = await readdir(dir).catch((error: NodeJS.ErrnoException) => {
        this.#warnOnce(`dir:${dir}`, { dir, code: error.code }, 'cannot read a tools directory')
        return [] as string[]
      })
      for (const name of names.sort()) {
        // Dotfiles (.gitkeep, editor swap files) are not candidates, and not worth a warning.
        if (name.startsWith('.')) continue
        const file = path.join(dir, name)
        const info = await stat(file).catch(() => null)
        if (!info?.isFile()) continue
        seen.add(file)
        // ctime is in it: a chmod +x makes a skipped file a candidate again.
        const fingerprint = `${info.ino}:${info.size}:${info.mtimeMs}:${info.ctimeMs}`
        if (this.#known.get(file)?.fingerprint !== fingerprint) changed.push({ file, fingerprint, executable: isExecutable(info.mode) })
      }
    }
    // A few at once: one slow `--describe` does not hold back the others (publishing sorts them by file).
    await mapWithConcurrency(changed, DESCRIBE_CONCURRENCY, async ({ file, fingerprint, executable }) => {
      this.#known.set(file, { fingerprint, tool: executable ? await this.#describe(file) : this.#skip(file, 'the file is not executable') })
    })
    for (const file of this.#known.keys()) if (!seen.has(file)) this.#known.delete(file)
    this.#publish()
  }

  #skip (file: string, reason: string): null {
    this.#options.log.warn({ file, reason }, 'skipping an executable that does not describe itself')
    return null
  }

  async #describe (file: string): Promise<AnyTool | null> {
    const timeoutMs = this.#options.describeTimeoutMs ?? DESCRIBE_TIMEOUT_MS
    const scratch = await realpath(await mkdtemp(path.join(os.tmpdir(), 'toolport-describe-')))
    try {
      const run = await this.#options.runner.run({
        command: file,
        args: ['--describe'],
        cwd: scratch,
        env: this.#options.stub ? { SHELLCLAW_STUB: '1' } : {},
        timeoutMs,
        signal: new AbortController().signal,
        maxOutputBytes: DESCRIBE_MAX_BYTES,
        readOnlyPaths: [path.dirname(file)],
      })
      const problem = run.timedOut
        ? `--describe took longer than ${timeoutMs} ms`
        : run.exitCode !== 0
          ? `--describe exited with code ${run.exitCode}${run.stderr.trim() ? `: ${safePrefix(run.stderr.trim(), 200)}` : ''}`
          : run.stdoutTruncated ? `--describe printed more than ${DESCRIBE_MAX_BYTES / 1024 / 1024} MiB` : null
      const description = problem ?? parseDescription(run.stdout)
      if (typeof description === 'string') return this.#skip(file, description)
      return executableTool(file, description, this.#options)
    } finally {
      await rm(scratch, { recursive: true, force: true })
    }
  }

  #warnOnce (key: string, details: Record<string, unknown>, message: string): void {
    if (this.#warned.has(key)) return
    this.#warned.add(key)
    this.#options.log.warn(details, message)
  }

  #publish (): void {
    const byName = new Map<string, AnyTool>()
    for (const [file, known] of [...this.#known].sort(([a], [b]) => (a < b ? -1 : 1))) {
      if (!known.tool) continue
      if (byName.has(known.tool.name)) {
        this.#warnOnce(`dup:${file}:${known.fingerprint}`, { file, name: known.tool.name }, 'skipping an executable whose tool name is already taken')
        continue
      }
      byName.set(known.tool.name, known.tool)
    }
    const tools = [...byName.values()]
    const changed = tools.length !== this.#tools.length || tools.some((tool, i) => tool !== this.#tools[i])
    this.#tools = tools
    if (changed && !this.#closed) this.#options.onChange(tools)
  }
}
