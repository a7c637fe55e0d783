/**
 * The processes of every workspace of this instance, keyed by workspace
 * directory (which names the tenant too): starting them under the limits,
 * finding them, keeping the last `keep_ended` ended ones (and, over all
 * workspaces, no more of their output than KEPT_OUTPUT_WORKSPACES
 * workspaces' fill), and ending them with their workspace or the service.
 *
 * A process in a persistent workspace holds a lease on it while it runs,
 * so the workspace does not expire under it; its usage figure is stale
 * (being changed) until it ends.
 */
import { randomBytes } from 'node:crypto'
import type { FileHandle } from 'node:fs/promises'
import { setTimeout as sleep } from 'node:timers/promises'
import type { Config } from '../config.ts'
import { descriptorShortage, ToolError, volumeFull } from '../errors.ts'
import type { ProcessRunner } from '../sandbox/types.ts'
import { checkShellCommand, effectiveTimeout } from '../sandbox/command-rules.ts'
import type { WorkspaceStore } from '../workspaces/store.ts'
import { usageOf } from '../workspaces/usage.ts'
import { type Identity, identityOf, identityOfStats, sameIdentity } from '../workspaces/usage-directory.ts'
import { deletedWhileStarting, holdDirectory } from './held-directory.ts'
import { type KillSignal, ManagedProcess } from './managed-process.ts'
import type { StreamName } from './output-ring.ts'
import { OutputSockets } from './output-sockets.ts'
import type { ProcessRecord, ProcessRecords } from './process-records.ts'

export interface StartRequest {
  command: string
  /** Seconds; the default when absent, clamped to the maximum. */
  timeout?: number | undefined
  stdin?: boolean | undefined
}

/** Where a process runs: a persistent workspace (`id`), or a session's own (`id` null, `dir` given). */
export interface ProcessPlace {
  tenant: string
  id: string | null
  dir?: string
}

export interface ProcessTableOptions {
  config: Config['tools']['processes']
  /** exec_shell's denylist: the same commands are refused. */
  denylist: readonly string[]
  runner: ProcessRunner
  store: WorkspaceStore
  /** Where each persistent workspace's processes are recorded with the instance that runs them. */
  records: ProcessRecords
  /** This instance's `server.advertise_url` and the id of this run of it, written in those records. */
  self: { url: string | null, instance: string }
}

/**
 * How many workspaces' fill of ended output (`keep_ended` × `max_output_bytes`
 * each) the service keeps at most, over all of them: many workspaces, each
 * keeping its fill, must not take the service's memory.
 */
const KEPT_OUTPUT_WORKSPACES = 4
/** A process's end that the volume did not take is written again this often, this many times (a minute). */
const END_WRITE_RETRY_MS = 1000
const END_WRITE_TRIES = 60

export class ProcessTable {
  readonly #options: ProcessTableOptions
  readonly #byWorkspace = new Map<string, Map<string, ManagedProcess>>()
  /** Every ended process kept, oldest first, with where it ran; and the memory of their outputs. */
  readonly #ended = new Map<ManagedProcess, { dir: string, place: ProcessPlace }>()
  #endedBytes = 0
  readonly #maxEndedBytes: number
  readonly #outputSockets: OutputSockets
  #closed = false
  /** Writes of an ended process's end into its record, still under way. */
  readonly #recording = new Set<Promise<void>>()
  /** Each ended process's write of its end: its record is removed only after it. */
  readonly #endWrites = new WeakMap<ManagedProcess, Promise<void>>()

  /** Should the service exit without closing the table, its processes go with it. */
  readonly #killAllAtExit = (): void => { for (const each of this.#all()) each.killNow() }

  constructor (options: ProcessTableOptions) {
    this.#options = options
    this.#maxEndedBytes = KEPT_OUTPUT_WORKSPACES * options.config.keep_ended * options.config.max_output_bytes
    // Under the ephemeral root: private to this instance, hidden from every sandbox.
    this.#outputSockets = new OutputSockets(() => options.store.serviceDir('.output-sockets'))
    process.once('exit', this.#killAllAtExit)
  }

  /**
   * Starts `request.command` in the workspace (a persistent one is made on first use, as any call
   * does). A start and a removal of the workspace take turns (`withoutRemoval`): a removal either
   * comes first, and the start makes a persistent workspace anew (or fails, in an ephemeral one
   * gone), or after, and finds the process to kill.
   */
  async start (place: ProcessPlace, request: StartRequest): Promise<ManagedProcess> {
    const { config, denylist, store } = this.#options
    checkShellCommand(request.command, denylist)
    if (this.#closed) throw shuttingDown()
    const dir = place.id === null ? place.dir : store.dirOf(place.tenant, place.id)
    if (dir === undefined) throw new Error('a process needs a workspace directory')
    return store.withoutRemoval(dir, async () => {
      // Again: the service may have begun stopping while this start waited its turn.
      if (this.#closed) throw shuttingDown()
      if (this.#running(dir) >= config.max_per_workspace) {
        throw new ToolError('PermissionDenied', `at most ${config.max_per_workspace} processes may run in one workspace at once`)
      }
      const lease = place.id === null ? undefined : await store.acquire(place.tenant, place.id, { lasting: true })
      // The workspace as this start found it, held open: the sandbox binds this very directory, though another
      // instance may delete the workspace, and make the id again, meanwhile.
      let directory: FileHandle | undefined
      let found: Identity | undefined
      try {
        directory = await holdDirectory(dir, place.id)
        found = identityOfStats(await directory.stat())
        let started: ManagedProcess | undefined
        const parts = await this.#prepare(place, dir, request, (stream, bytes) => started?.received(stream, bytes), directory.fd)
        // From here to the table nothing awaits: a close either came before (and nothing starts) or finds the process.
        if (this.#closed) {
          await parts.discard()
          throw shuttingDown()
        }
        // Deleted through another instance while the start was prepared, and maybe made again: nothing starts. (A
        // deletion after this look is met by the next sweep, which ends the process; where bubblewrap binds by
        // descriptor it runs in the directory it was given, not in one made since. Otherwise it starts in the path's.)
        if (place.id !== null && !sameIdentity(identityOf(dir), found)) {
          await parts.discard()
          throw deletedWhileStarting(place.id)
        }
        const endChange = usageOf(dir).beginChange()
        try {
          started = new ManagedProcess({
            ...parts.process,
            command: request.command,
            stdin: request.stdin === true,
            timeoutMs: effectiveTimeout(request.timeout, config) * 1000,
            maxOutputBytes: config.max_output_bytes,
            onEnd: () => {
              endChange({ rescan: place.id !== null })
              void lease?.release()
              // The record says it ended (no call need go to this instance for its network any more).
              const { record } = parts
              const recorded = record ? this.#writeEnd(record.tenant, { ...record.record, ended_at: new Date().toISOString() }) : Promise.resolve()
              // A stop waits for it: the other instances read when the process ended from the record alone once this one is gone.
              this.#recording.add(recorded)
              void recorded.then(() => this.#recording.delete(recorded))
              // The oldest go at once, so that a list made once this end is seen shows them gone; a record is removed
              // only after its own end is written, which would otherwise bring it back.
              if (started !== undefined) {
                this.#endWrites.set(started, recorded)
                this.#keepEnded(started, dir, place)
              }
            },
          })
        } catch (error) {
          endChange({ rescan: false })
          if (place.id !== null) await this.#options.records.remove(place.tenant, place.id, parts.process.id).catch(() => {})
          throw error
        }
        const table = this.#byWorkspace.get(dir) ?? new Map<string, ManagedProcess>()
        this.#byWorkspace.set(dir, table.set(started.id, started))
        return started
      } catch (error) {
        await lease?.release()
        // Removed meanwhile through another instance (its removal does not take turns with a start here), and
        // maybe made again: the start failed for that (its record's directory gone, say), not for a fault of its own.
        if (place.id !== null && found !== undefined && (!(error instanceof ToolError) || error.code === 'ExecutionFailed') && !sameIdentity(identityOf(dir), found)) {
          throw deletedWhileStarting(place.id)
        }
        throw error
      } finally {
        // The command has its own copy by now, if it started.
        await directory?.close()
      }
    })
  }

  /**
   * What a start needs, made side by side: the sandbox's launch, the output
   * sockets, execa, and (in a persistent workspace) the record that tells
   * other instances where the process runs, written before the start is
   * answered. What was made goes again when any part fails, or by `discard`.
   */
  async #prepare (place: ProcessPlace, dir: string, request: StartRequest, received: (stream: StreamName, bytes: Buffer) => void, directory: number) {
    const { records, runner, self } = this.#options
    const id = `p_${randomBytes(6).toString('hex')}`
    const startedAt = new Date()
    const record = place.id === null
      ? undefined
      : { tenant: place.tenant, workspace: place.id, record: { id, workspace: place.id, command: request.command, started_at: startedAt.toISOString(), ended_at: null, owner: self.url, instance: self.instance } }
    const [launch, stdout, stderr, execa, recorded] = await Promise.allSettled([
      runner.prepare({ command: 'sh', args: ['-c', request.command], cwd: dir, directory }),
      this.#outputSockets.pair((bytes) => received('stdout', bytes)),
      this.#outputSockets.pair((bytes) => received('stderr', bytes)),
      // execa loads with the first process started: its many modules would otherwise cost every start-up.
      import('execa'),
      record && this.#options.records.write(record.tenant, record.record),
    ])
    const discard = async (): Promise<void> => {
      if (launch.status === 'fulfilled') launch.value.release()
      for (const pair of [stdout, stderr]) {
        if (pair.status === 'fulfilled') for (const end of [pair.value.reader, pair.value.writer]) end.destroy()
      }
      if (record && recorded.status === 'fulfilled') await records.remove(record.tenant, record.workspace, id).catch(() => {})
    }
    if (launch.status === 'fulfilled' && stdout.status === 'fulfilled' && stderr.status === 'fulfilled' && execa.status === 'fulfilled' && recorded.status === 'fulfilled') {
      return { record, discard, process: { id, workspace: place.id, startedAt, launch: launch.value, output: { stdout: stdout.value, stderr: stderr.value }, execa: execa.value.execa } }
    }
    await discard()
    throw [launch, stdout, stderr, execa, recorded].find((part) => part.status === 'rejected')?.reason
  }

  /** A process of the workspace at `dir` that this instance runs (or ran, and still keeps). */
  find (dir: string, id: string): ManagedProcess | undefined {
    return this.#byWorkspace.get(dir)?.get(id)
  }

  /** The running processes and the last `keep_ended` ended ones, oldest first. */
  list (dir: string): ManagedProcess[] {
    return [...this.#byWorkspace.get(dir)?.values() ?? []]
  }

  /** Kills a workspace's processes (it is being removed) and forgets them. */
  async endWorkspace (dir: string): Promise<void> {
    const table = this.#byWorkspace.get(dir)
    if (!table) return
    this.#byWorkspace.delete(dir)
    for (const each of table.values()) this.#dropEnded(each)
    await Promise.all([...table.values()].map((each) => each.kill('KILL')))
  }

  /** Stops every process with `signal` (KILL 2 s later if need be): the service is stopping, and none starts after. */
  async stopAll (signal: KillSignal): Promise<void> {
    this.#closed = true
    await Promise.all([...this.#all()].map((each) => each.kill(signal)))
    await Promise.all(this.#recording)
  }

  /** Kills every process (service shutdown); none starts after. */
  async close (): Promise<void> {
    await this.stopAll('KILL')
    await this.#outputSockets.close()
    process.removeListener('exit', this.#killAllAtExit)
  }

  /**
   * Writes that a process ended. One the volume did not take (full) is tried
   * again while the service runs, for a while: other instances learn the end
   * from the record alone, and would take a process without it for lost.
   */
  async #writeEnd (tenant: string, record: ProcessRecord): Promise<void> {
    for (let tries = 1; ; tries++) {
      try {
        await this.#options.records.write(tenant, record, { update: true })
        return
      } catch (error) {
        // Only what passes (a full volume, no descriptor free) is tried again.
        const passing = volumeFull(error) !== undefined || descriptorShortage(error) !== undefined
        if (!passing || this.#closed || tries === END_WRITE_TRIES) return
        await sleep(END_WRITE_RETRY_MS, undefined, { ref: false })
      }
    }
  }

  #running (dir: string): number {
    let count = 0
    for (const each of this.#byWorkspace.get(dir)?.values() ?? []) if (each.running) count++
    return count
  }

  /**
   * Keeps a process that ended (unless its workspace went meanwhile), then
   * forgets, with their records, the ended ones of its workspace that ended first,
   * beyond keep_ended, and the oldest of all while their outputs take more
   * than the service keeps.
   */
  #keepEnded (process: ManagedProcess, dir: string, place: ProcessPlace): void {
    const table = this.#byWorkspace.get(dir)
    if (table?.get(process.id) !== process) return
    this.#ended.set(process, { dir, place })
    this.#endedBytes += process.output.heldBytes
    // The ones that ended first go first (not the ones that started first: a long build that has just ended stays).
    const ended = [...table.values()].filter((each) => !each.running).sort((a, b) => a.endedAtMs - b.endedAtMs)
    for (const old of ended.slice(0, Math.max(0, ended.length - this.#options.config.keep_ended))) this.#forget(old, dir, place)
    for (const [old, where] of this.#ended) {
      if (this.#endedBytes <= this.#maxEndedBytes) break
      this.#forget(old, where.dir, where.place)
    }
  }

  #forget (process: ManagedProcess, dir: string, place: ProcessPlace): void {
    this.#dropEnded(process)
    this.#byWorkspace.get(dir)?.delete(process.id)
    const workspace = place.id
    if (workspace !== null) void (this.#endWrites.get(process) ?? Promise.resolve()).then(() => this.#options.records.remove(place.tenant, workspace, process.id)).catch(() => {})
  }

  #dropEnded (process: ManagedProcess): void {
    if (this.#ended.delete(process)) this.#endedBytes -= process.output.heldBytes
  }

  * #all (): Iterable<ManagedProcess> {
    for (const table of this.#byWorkspace.values()) yield * table.values()
  }
}

/** The refusal of a start while the service stops. */
function shuttingDown (): ToolError {
  return new ToolError('Overloaded', 'the service is shutting down', { retryAfterSeconds: 1 })
}
