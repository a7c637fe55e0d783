/**
 * A persistent workspace's processes wherever they run: here (the process
 * table), at another instance sharing the workspace root (found by its
 * record, reached by forwarding), or nowhere any more: `lost`, when the
 * instance that ran it does not answer for it, or another run answers at its
 * address (it was restarted). When it is lost for good: owner-silences.ts.
 */
import { OutcomeUnknown, ToolError } from '../errors.ts'
import { KILL_GRACE_MS, type ManagedProcess, type ProcessInfo } from './managed-process.ts'
import { OwnerSilences } from './owner-silences.ts'
import { type Owner, OwnerGone, type Peers, type Unreachable } from './peers.ts'
import type { ProcessRecord, ProcessRecords } from './process-records.ts'
import type { ProcessTable } from './process-table.ts'

export type Located =
  | { where: 'here', process: ManagedProcess }
  | { where: 'elsewhere', owner: Owner, record: ProcessRecord }
  | { where: 'lost', record: ProcessRecord }

/** Who asks, about which workspace. */
export interface Asker {
  tenant: string
  /** The persistent workspace's id; null for an MCP session's own, whose processes are always here. */
  workspace: string | null
  /** Its directory. */
  dir: string
  /** The caller's Authorization header, for a request forwarded to another instance. */
  credentials?: string | undefined
  /** The request was forwarded here by another instance: only this instance's processes count. */
  forwarded?: boolean
  requestId?: string
  signal?: AbortSignal
}

export interface ProcessLocatorOptions {
  table: ProcessTable
  records: ProcessRecords
  peers: Peers
  /** This instance's `server.advertise_url`, if it has one. */
  self: string | null
  keepEnded: number
  /** The longest a call that runs commands may take (its tool's longest timeout): a call forwarded to run there waits that long. */
  longestCallMs: number
  /** How long an instance may not answer before its processes are lost for good (default UNANSWERED_LOST_MS). */
  lostAfterMs?: number
}

/** What a lost process looks like: its record (with when it ended, if it ended before its instance went), and nothing known of how it ended. */
export function lostInfo (record: ProcessRecord): ProcessInfo {
  return { id: record.id, workspace: record.workspace, command: record.command, state: 'lost', exit_code: null, signal: null, started_at: record.started_at, ended_at: record.ended_at, next: 0 }
}

export class ProcessLocator {
  readonly #options: ProcessLocatorOptions
  /** Which instances did not answer for their processes, and since when. */
  readonly silences: OwnerSilences

  constructor (options: ProcessLocatorOptions) {
    this.#options = options
    this.silences = new OwnerSilences(options.records, options.lostAfterMs)
  }

  /** The processes this instance runs. */
  get table (): ProcessTable {
    return this.#options.table
  }

  get peers (): Peers {
    return this.#options.peers
  }

  /** Where process `id` of the asker's workspace runs; NotFound when it is known nowhere. */
  async locate (asker: Asker, id: string): Promise<Located> {
    const here = this.#options.table.find(asker.dir, id)
    if (here) return { where: 'here', process: here }
    const record = asker.workspace === null || asker.forwarded === true ? null : await this.#options.records.read(asker.tenant, asker.workspace, id)
    if (!record) throw new ToolError('NotFound', `no process ${JSON.stringify(id)} in this workspace`)
    const owner = this.#ownerOf(record)
    return owner === null ? { where: 'lost', record } : { where: 'elsewhere', owner, record }
  }

  /** The workspace's processes on every instance, oldest first: the running ones and the last ended ones. */
  async list (asker: Asker): Promise<ProcessInfo[]> {
    const here = this.#options.table.list(asker.dir).map((each) => each.info())
    if (asker.workspace === null || asker.forwarded === true) return here
    const known = new Set(here.map((each) => each.id))
    const others = (await this.#options.records.list(asker.tenant, asker.workspace)).filter((record) => !known.has(record.id))
    const lost: ProcessRecord[] = []
    const unanswered: ProcessRecord[] = []
    const away: ProcessInfo[] = []
    await Promise.all(this.#byOwner(others).map(async ({ owner, records }) => {
      const theirs = owner === null ? 'replaced' : await this.#listAt(owner, asker)
      for (const record of records) {
        const info = theirs instanceof Map ? theirs.get(record.id) : undefined
        if (info) {
          away.push(info)
          this.silences.answered(asker.tenant, record)
        } else if (theirs === 'replaced') {
          lost.push(record)
          this.silences.markLost(asker.tenant, record)
        } else {
          // Not answering, or not listing it (yet: its record is written before its start is answered).
          unanswered.push(record)
          this.silences.unreachable(asker.tenant, record, 'unanswered')
        }
      }
    }))
    const shown = [...here, ...away, ...unanswered.map(lostInfo), ...this.#keptLost(asker, lost).map(lostInfo)]
    return shown.sort((a, b) => a.started_at.localeCompare(b.started_at))
  }

  /**
   * Runs process tool `name` at the instance that runs the process, as the
   * caller; undefined when that instance is gone or no longer knows it.
   */
  async callTool (owner: Owner, record: ProcessRecord, name: string, args: Record<string, unknown>, asker: Asker & { maxResultBytes: number }): Promise<{ result: unknown, truncated: boolean } | undefined> {
    const waitMs = typeof args['wait_ms'] === 'number' ? args['wait_ms'] : 1000
    try {
      const answer = await this.#execute(owner, name, args, asker, waitMs + KILL_GRACE_MS)
      this.silences.answered(asker.tenant, record)
      return answer
    } catch (error) {
      if (error instanceof OwnerGone) this.silences.unreachable(asker.tenant, record, error.reason)
      else if (error instanceof ToolError && error.code === 'NotFound') this.silences.unreachable(asker.tenant, record, 'unanswered')
      else throw error
      return undefined
    }
  }

  /**
   * Runs a call that runs commands (`tool`) at the instance whose processes
   * run in the asker's workspace, where that workspace's network is: the
   * answer as it came, or undefined when it runs here (#atHome).
   */
  runAtHome (tool: string, args: Record<string, unknown>, asker: Asker & { maxResultBytes: number }): Promise<{ result: unknown, truncated: boolean } | undefined> {
    return this.#atHome(asker, (owner) => this.runThere(owner, tool, args, asker))
  }

  /**
   * Starts a process where the asker's workspace's processes run: `there`,
   * at the instance that runs the oldest running one (its answer), or
   * `here` when no other instance runs one (or the one that did is gone
   * before anything was sent). From the look (each home asked whether it
   * answers) to a start here (its record written) the workspace's home lock
   * is held, so that two first starts through two instances at once end on
   * one, in one network; a start sent there goes once it is let go (that
   * instance's record says where the home is).
   */
  async startAtHome<T> (asker: Asker, start: { there: (owner: Owner) => Promise<T>, here: () => Promise<T> }): Promise<T> {
    if (asker.workspace === null || asker.forwarded === true) return await start.here()
    const release = await this.#options.records.holdHome(asker.tenant, asker.workspace, asker.signal)
    let home: { owner: Owner, records: ProcessRecord[] } | undefined
    try {
      // The first that answers: one gone (a pod that died, its records not yet lost) is no home, and the
      // start goes here while the lock is held, as a first one does.
      for (const candidate of await this.#homes(asker.tenant, asker.workspace)) {
        const answer = await this.#options.peers.answers(candidate.owner, asker.signal)
        if (answer === true) {
          home = candidate
          break
        }
        for (const record of candidate.records) this.silences.unreachable(asker.tenant, record, answer)
      }
      if (home === undefined) return await start.here()
    } finally {
      await release()
    }
    return await this.#sendHome(asker, [home], start.there) ?? await start.here()
  }

  /** `POST …/processes` (`body`: what it takes) at `owner`, as the caller: the process it started. */
  async startThere (owner: Owner, body: unknown, asker: Asker): Promise<ProcessInfo> {
    return await this.#options.peers.json(owner, {
      method: 'POST',
      path: `/v1/workspaces/${encodeURIComponent(asker.workspace ?? '')}/processes`,
      body,
      credentials: asker.credentials,
      requestId: asker.requestId,
      signal: asker.signal,
    }) as ProcessInfo
  }

  /** Tool call `tool` at `owner`, as the caller, with as long as a call that runs commands may take. */
  async runThere (owner: Owner, tool: string, args: Record<string, unknown>, asker: Asker & { maxResultBytes: number }): Promise<{ result: unknown, truncated: boolean }> {
    try {
      return await this.#execute(owner, tool, args, asker, this.#options.longestCallMs)
    } catch (error) {
      // A call cut here (its caller gone, this instance's drain over) is ended there too, but a process it started
      // there outlives it: whether one did is not known here.
      if (tool === 'process_start' && asker.signal?.aborted === true && !(error instanceof ToolError)) {
        throw new OutcomeUnknown('this instance stopped waiting for the instance that runs this workspace\'s processes: the process may have started there (process_list shows it)')
      }
      throw error
    }
  }

  /**
   * `send` to the instance whose processes run in the asker's workspace
   * (the oldest running one's): its answer, or undefined when no other
   * instance runs one, or the one that did is gone before anything was
   * sent (the caller goes on here).
   */
  async #atHome<T> (asker: Asker, send: (owner: Owner) => Promise<T>): Promise<T | undefined> {
    if (asker.workspace === null || asker.forwarded === true) return undefined
    return await this.#sendHome(asker, await this.#homes(asker.tenant, asker.workspace), send)
  }

  /** The instances that run the workspace's processes, with their records, the one that runs the oldest first. */
  async #homes (tenant: string, workspace: string): Promise<Array<{ owner: Owner, records: ProcessRecord[] }>> {
    const running = (await this.#options.records.running(tenant, workspace)).sort((a, b) => a.started_at.localeCompare(b.started_at))
    return this.#byOwner(running).filter((group): group is { owner: Owner, records: ProcessRecord[] } => group.owner !== null)
  }

  /**
   * `send` to the first of `homes` that answers; undefined when each is gone
   * before anything was sent. Gone after the request was sent, it may have
   * acted on it: that is a failure whose outcome is unknown, never a second
   * run here.
   */
  async #sendHome<T> (asker: Asker, homes: Array<{ owner: Owner, records: ProcessRecord[] }>, send: (owner: Owner) => Promise<T>): Promise<T | undefined> {
    for (const { owner, records } of homes) {
      try {
        return await send(owner)
      } catch (error) {
        if (!(error instanceof OwnerGone)) throw error
        if (error.maybeDelivered) throw new OutcomeUnknown('the instance that runs this workspace\'s processes stopped answering during the request: it may have acted on it, and the outcome is unknown', { cause: error })
        for (const record of records) this.silences.unreachable(asker.tenant, record, error.reason)
      }
    }
    return undefined
  }

  /** `records` by the instance to ask about them (null: none can), each asked once, in the order of their first record. */
  #byOwner (records: ProcessRecord[]): Array<{ owner: Owner | null, records: ProcessRecord[] }> {
    const groups = new Map<string, { owner: Owner | null, records: ProcessRecord[] }>()
    for (const record of records) {
      const owner = this.#ownerOf(record)
      const key = owner === null ? '' : `${owner.instance} ${owner.url}`
      const group = groups.get(key) ?? { owner, records: [] }
      group.records.push(record)
      groups.set(key, group)
    }
    return [...groups.values()]
  }

  /** `POST /v1/tools/{tool}/execute` at `owner`, as the caller, in the asker's workspace. */
  async #execute (owner: Owner, tool: string, args: Record<string, unknown>, asker: Asker & { maxResultBytes: number }, waitMs: number): Promise<{ result: unknown, truncated: boolean }> {
    const answer = await this.#options.peers.json(owner, {
      method: 'POST',
      path: `/v1/tools/${encodeURIComponent(tool)}/execute`,
      body: { arguments: args, workspace: asker.workspace, max_result_bytes: asker.maxResultBytes },
      credentials: asker.credentials,
      requestId: asker.requestId,
      signal: asker.signal,
      waitMs,
    }) as { result?: unknown, truncated?: unknown }
    return { result: answer.result, truncated: answer.truncated === true }
  }

  /** The instance to ask about a record's process: null when none can know it (it ran here, in this run or an earlier one, or where no one can reach). */
  #ownerOf (record: ProcessRecord): Owner | null {
    return record.owner !== null && record.owner !== this.#options.self ? { url: record.owner, instance: record.instance } : null
  }

  /** The processes another instance runs in the asker's workspace, by id; why not, when it cannot answer. */
  async #listAt (owner: Owner, asker: Asker): Promise<Map<string, ProcessInfo> | Unreachable> {
    try {
      const answer = await this.#options.peers.json(owner, {
        method: 'GET',
        path: `/v1/workspaces/${encodeURIComponent(asker.workspace ?? '')}/processes`,
        credentials: asker.credentials,
        requestId: asker.requestId,
        signal: asker.signal,
      }) as { processes?: unknown }
      const processes = Array.isArray(answer.processes) ? answer.processes as ProcessInfo[] : []
      return new Map(processes.filter((each) => typeof each?.id === 'string').map((each) => [each.id, each]))
    } catch (error) {
      if (error instanceof OwnerGone) return error.reason
      if (error instanceof ToolError && error.code === 'NotFound') return 'unanswered'
      throw error
    }
  }

  /** Lost processes count as ended ones: beyond `keep_ended`, the oldest records are removed. */
  #keptLost (asker: Asker, lost: ProcessRecord[]): ProcessRecord[] {
    const { keepEnded, records } = this.#options
    lost.sort((a, b) => a.started_at.localeCompare(b.started_at))
    const gone = lost.splice(0, Math.max(0, lost.length - keepEnded))
    for (const record of gone) records.remove(asker.tenant, record.workspace, record.id).catch(() => {})
    return lost
  }
}
