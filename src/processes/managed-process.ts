/**
 * One long-running process: a command started with execa from the
 * sandbox's prepared launch (the same sandbox, limits and cgroup as
 * exec_shell), its output in a bounded ring, its stdin, and its end —
 * by itself (`exited`), by a kill request (`killed`) or at its timeout
 * (`timed_out`). A process that was asked to stop is never reported as
 * having exited by itself, whatever its exit code.
 *
 * Stopping sends the signal to the whole process tree, then SIGKILL to it
 * KILL_GRACE_MS later if it still runs. When the command itself exits,
 * whatever it left behind is killed, as exec_shell does.
 */
import { constants } from 'node:os'
import type { execa as Execa, ResultPromise } from 'execa'
import { ToolError } from '../errors.ts'
import { fillPasses, passedStdio } from '../sandbox/process.ts'
import type { PreparedLaunch } from '../sandbox/types.ts'
import { OutputRing, type StreamName } from './output-ring.ts'
import type { OutputSocket } from './output-sockets.ts'

export type ProcessState = 'running' | 'exited' | 'killed' | 'timed_out'
export const KILL_SIGNALS = ['TERM', 'KILL', 'INT', 'HUP'] as const
export type KillSignal = typeof KILL_SIGNALS[number]

/** The process object of the contract (`lost`: its instance went away). */
export interface ProcessInfo {
  id: string
  workspace: string | null
  command: string
  state: ProcessState | 'lost'
  exit_code: number | null
  signal: KillSignal | null
  started_at: string
  ended_at: string | null
  next: number
}

/** How long a signalled process has before SIGKILL. */
export const KILL_GRACE_MS = 2000
/** How soon a signal that reached no process is sent again. */
const RESIGNAL_MS = 20
/** How long output pipes may stay open after the command exits (a straggler outside any cgroup holds them). */
const PIPE_GRACE_MS = 1000
/** How much input may wait for a command to read it before more is refused (409): one more request's body at most comes on top. */
export const STDIN_WAITING_MAX_BYTES = 1024 * 1024

export interface ProcessSpec {
  /** execa, loaded when the first process starts (most services never start one). */
  execa: typeof Execa
  id: string
  workspace: string | null
  command: string
  startedAt: Date
  launch: PreparedLaunch
  stdin: boolean
  timeoutMs: number
  maxOutputBytes: number
  /** Where the command writes stdout and stderr (output-sockets.ts); the readers' bytes come to `received`. */
  output: Record<StreamName, OutputSocket>
  /** Called once, when the process has ended and all its output is in. */
  onEnd: (process: ManagedProcess) => void
}

export class ManagedProcess {
  readonly id: string
  readonly workspace: string | null
  readonly command: string
  readonly startedAt: Date
  readonly output: OutputRing
  /** Where the output that a process tool last returned stopped (process_output's default `after`). */
  toolCursor = 0
  #state: ProcessState = 'running'
  #exitCode: number | null = null
  #signal: KillSignal | null = null
  #endedAt: Date | null = null
  readonly #launch: PreparedLaunch
  readonly #child: ResultPromise
  readonly #pid: number
  #stdinOpen: boolean
  /** Set when the service asked it to stop: why, and with which signal. */
  #stopping: { reason: 'killed' | 'timed_out', signal: KillSignal } | undefined
  #escalated = false
  /** The command itself has exited (its output may still be draining): a kill now changes nothing. */
  #exited = false
  readonly #timers: NodeJS.Timeout[] = []
  #waiters = new Set<() => void>()
  readonly ended: Promise<void>

  constructor (spec: ProcessSpec) {
    this.id = spec.id
    this.workspace = spec.workspace
    this.command = spec.command
    this.startedAt = spec.startedAt
    this.output = new OutputRing(spec.maxOutputBytes)
    this.#launch = spec.launch
    this.#child = spec.execa(spec.launch.file, spec.launch.args, {
      cwd: spec.launch.cwd,
      env: spec.launch.env,
      extendEnv: false,
      // Its own process group, so that the group can be signalled; the service kills it at shutdown itself.
      detached: true,
      cleanup: false,
      // What the program gets past stdio (bwrap's filter, a workspace directory it binds): execa hands a number on
      // to Node's spawn, though its types leave numbers out there.
      stdio: [spec.stdin ? 'pipe' : 'ignore', spec.output.stdout.writer, spec.output.stderr.writer, ...passedStdio(spec.launch.passes) as Array<'pipe'>],
      buffer: false,
      reject: false,
    })
    // The command has its own copies of the writers now.
    spec.output.stdout.writer.destroy()
    spec.output.stderr.writer.destroy()
    if (this.#child.pid === undefined) {
      spec.output.stdout.reader.destroy()
      spec.output.stderr.reader.destroy()
      spec.launch.release()
      void this.#child.catch(() => {})
      // Its start failed before it ran (no descriptor or process slot free: sh and bwrap are known to be there).
      throw new ToolError('Overloaded', 'the command could not start just now (no file descriptor or process slot free); retry shortly', { retryAfterSeconds: 1 })
    }
    this.#pid = this.#child.pid
    fillPasses(this.#child.stdio, spec.launch.passes)
    this.#stdinOpen = spec.stdin
    this.#child.stdin?.on('error', () => { this.#stdinOpen = false })
    const outputIn = Promise.all((['stdout', 'stderr'] as const).map((stream) => this.#follow(stream, spec.output[stream].reader)))
    this.#child.nodeChildProcess.once('exit', () => {
      this.#exited = true
      // Input it never read goes (a sandbox's launcher may hold the pipe open after the command has gone).
      this.#child.stdin?.destroy()
      // What the command left running goes with it; output a straggler holds open is closed after a grace period.
      this.#launch.signalTree(this.#pid, 'SIGKILL')
      this.#timers.push(setTimeout(() => { spec.output.stdout.reader.destroy(); spec.output.stderr.reader.destroy() }, PIPE_GRACE_MS).unref())
    })
    this.#timers.push(setTimeout(() => this.#stop('timed_out', 'TERM'), spec.timeoutMs).unref())
    this.ended = Promise.all([this.#child, outputIn]).then(([result]) => {
      this.#finish(result.exitCode, result.signal)
      spec.onEnd(this)
    })
  }

  get state (): ProcessState {
    return this.#state
  }

  get running (): boolean {
    return this.#state === 'running'
  }

  /** When it ended (0 while it runs). */
  get endedAtMs (): number {
    return this.#endedAt?.getTime() ?? 0
  }

  info (): ProcessInfo {
    return {
      id: this.id,
      workspace: this.workspace,
      command: this.command,
      state: this.#state,
      exit_code: this.#exitCode,
      signal: this.#signal,
      started_at: this.startedAt.toISOString(),
      ended_at: this.#endedAt?.toISOString() ?? null,
      next: this.output.end,
    }
  }

  /** Resolves when output arrives, the process ends, `ms` pass or `signal` fires, whichever is first. */
  async waitForChange (ms: number, signal?: AbortSignal): Promise<void> {
    if (!this.running || ms <= 0 || signal?.aborted === true) return
    await new Promise<void>((resolve) => {
      const done = (): void => {
        clearTimeout(timer)
        signal?.removeEventListener('abort', done)
        this.#waiters.delete(done)
        resolve()
      }
      const timer = setTimeout(done, ms)
      signal?.addEventListener('abort', done, { once: true })
      this.#waiters.add(done)
    })
  }

  /** Resolves when the process has ended or `ms` passed (or `signal` fired). */
  async waitForEnd (ms: number, signal?: AbortSignal): Promise<void> {
    const deadline = Date.now() + ms
    while (this.running && Date.now() < deadline && signal?.aborted !== true) await this.waitForChange(deadline - Date.now(), signal)
  }

  /** Writes to stdin and/or closes it; Conflict when it was not asked for, is closed, or the process has ended. */
  input (data: string | undefined, eof: boolean): void {
    if (!this.running) throw new ToolError('Conflict', `process ${this.id} has ended`)
    if (this.#child.stdin === null) throw new ToolError('Conflict', `process ${this.id} was not started with "stdin": true`)
    if (!this.#stdinOpen) throw new ToolError('Conflict', `the stdin of process ${this.id} is closed`)
    if (data !== undefined && data !== '') {
      // What the command has not read yet waits in the service's memory: bounded, by refusing more.
      const waiting = this.#child.stdin.writableLength
      if (waiting >= STDIN_WAITING_MAX_BYTES) throw new ToolError('Conflict', `process ${this.id} has not read the last ${waiting} bytes of its input yet; send more once it has`)
      this.#child.stdin.write(data)
    }
    if (eof) {
      this.#stdinOpen = false
      this.#child.stdin.end()
    }
  }

  /** Sends `signal` to the whole tree (SIGKILL 2 s later if needed) and resolves when it has ended; an ended process is left as it is. */
  async kill (signal: KillSignal): Promise<void> {
    this.#stop('killed', signal)
    await this.ended
  }

  #stop (reason: 'killed' | 'timed_out', signal: KillSignal): void {
    if (!this.running || this.#exited) return
    if (this.#stopping) {
      // A KILL asked for while an earlier signal's grace runs is the escalation, now rather than at the grace's end.
      if (signal === 'KILL') this.#escalate()
      return
    }
    this.#stopping = { reason, signal }
    this.#signalUntilReached(`SIG${signal}`)
    if (signal !== 'KILL') {
      this.#timers.push(setTimeout(() => { this.#escalate() }, KILL_GRACE_MS).unref())
    }
  }

  /** SIGKILL to the whole tree, once, unless the command has exited. */
  #escalate (): void {
    if (this.#exited || this.#escalated) return
    this.#escalated = true
    this.#launch.signalTree(this.#pid, 'SIGKILL')
  }

  /**
   * A signal sent while only the sandbox's own processes exist (the command
   * is still starting inside it) reaches nobody: it is sent again shortly,
   * until it reaches the command or the process has ended.
   */
  #signalUntilReached (signal: NodeJS.Signals): void {
    if (!this.running || this.#escalated) return
    if (this.#launch.signalTree(this.#pid, signal) > 0) return
    this.#timers.push(setTimeout(() => this.#signalUntilReached(signal), RESIGNAL_MS).unref())
  }

  /** What the command wrote to `stream` (in a buffer reused after this call: the ring copies it). */
  received (stream: StreamName, bytes: Buffer): void {
    this.output.append(stream, bytes)
    this.#notify()
  }

  /** Resolves once `reader` has closed: all of the stream's output is in. */
  async #follow (stream: StreamName, reader: OutputSocket['reader']): Promise<void> {
    await new Promise<void>((resolve) => {
      reader.once('close', resolve)
      // A reset by a writer that went away is an end like any other.
      reader.on('error', () => {})
    })
    this.output.endStream(stream)
  }

  #finish (exitCode: number | undefined, signal: string | undefined): void {
    for (const timer of this.#timers) clearTimeout(timer)
    this.output.endStream('stdout')
    this.output.endStream('stderr')
    this.#launch.release()
    this.#endedAt = new Date()
    if (this.#stopping) {
      this.#state = this.#stopping.reason
      this.#signal = this.#escalated ? 'KILL' : this.#stopping.signal
    } else {
      this.#state = 'exited'
      // Ended by a signal nobody here sent (its own, the kernel's): reported as a shell does, 128 + its number.
      const number = signal === undefined ? undefined : constants.signals[signal as NodeJS.Signals]
      this.#exitCode = exitCode ?? (number === undefined ? -1 : 128 + number)
    }
    this.#notify()
  }

  #notify (): void {
    const waiters = this.#waiters
    this.#waiters = new Set()
    for (const wake of waiters) wake()
  }

  /** At service exit, without waiting: the whole tree is SIGKILLed. */
  killNow (): void {
    if (this.running) this.#launch.signalTree(this.#pid, 'SIGKILL')
  }
}
