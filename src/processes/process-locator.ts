/**
 * A persistent workspace's processes wherever they run: here (the process
 * table), at another instance sharing the workspace root (found by its
 * record, reached by forwarding), or nowhere any more: `lost`, when the
 * instance that ran it does not answer for it, or another run answers at its
 * address (it was restarted).
 *
 * Lost for good (the record says so, and that address is never asked
 * again) only when that leaves no doubt: another run answers at the
 * address, or the instance has not answered for the process through
 * `lostAfterMs`, as this instance saw it (its own clock, no shared state).
 * Before that, a request it does not answer is told `lost`, and the next one
 * asks again: an instance that was out of reach for a moment still has its
 * processes. Only the instance that runs a process writes its record, but
 * to mark it lost, and that re-reads it first.
 */
import { ToolError } from '../errors.ts'
import { KILL_GRACE_MS, type ManagedProcess, type ProcessInfo } from './managed-process.ts'
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

/** How long an instance may not answer before its processes are lost for good: past a restart or a network's hiccup. */
export const UNANSWERED_LOST_MS = 60_000
/** Silences kept at most before the ones long over are forgotten. */
const MAX_SILENCES = 1024

/** What a lost process looks like: its record (with when it ended, if it ended before its instance went), and nothing known of how it ended. */
export function lostInfo (record: ProcessRecord): ProcessInfo {
  return { id: record.id, workspace: record.workspace, command: record.command, state: 'lost', exit_code: null, signal: null, started_at: record.started_at, ended_at: record.ended_at, next: 0 }
}

export class ProcessLocator {
  readonly #options: ProcessLocatorOptions
  /** Per process record: when its instance first and last did not answer for it, with no answer between. */
  readonly #silences = new Map<string, { first: number, last: number }>()

  constructor (options: ProcessLocatorOptions) {
    this.#options = options
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
          this.ownerAnswered(asker.tenant, record)
        } else if (theirs === 'replaced') {
          lost.push(record)
          this.markLost(asker.tenant, record)
        } else {
          // Not answering, or not listing it (yet: its record is written before its start is answered).
          unanswered.push(record)
          this.ownerUnreachable(asker.tenant, record, 'unanswered')
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
      this.ownerAnswered(asker.tenant, record)
      return answer
    } catch (error) {
      if (error instanceof OwnerGone) this.ownerUnreachable(asker.tenant, record, error.reason)
      else if (error instanceof ToolError && error.code === 'NotFound') this.ownerUnreachable(asker.tenant, record, 'unanswered')
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
    return this.#atHome(asker, (owner) => this.#execute(owner, tool, args, asker, this.#options.longestCallMs))
  }

  /**
   * Starts a process (`body`: what `POST …/processes` takes) at the instance
   * whose processes run in the asker's workspace, so that it joins their
   * network: the process it started, or undefined when it starts here.
   */
  async startAtHome (body: unknown, asker: Asker): Promise<ProcessInfo | undefined> {
    return await this.#atHome(asker, async (owner) => await this.#options.peers.json(owner, {
      method: 'POST',
      path: `/v1/workspaces/${encodeURIComponent(asker.workspace ?? '')}/processes`,
      body,
      credentials: asker.credentials,
      requestId: asker.requestId,
      signal: asker.signal,
    }) as ProcessInfo)
  }

  /**
   * `send` to the instance whose processes run in the asker's workspace
   * (the oldest running one's): its answer, or undefined when no other
   * instance runs one, or the one that did is gone before anything was
   * sent (the caller goes on here). Gone after the request was sent, it may
   * have acted on it: that is a failure whose outcome is unknown, never a
   * second run here.
   */
  async #atHome<T> (asker: Asker, send: (owner: Owner) => Promise<T>): Promise<T | undefined> {
    if (asker.workspace === null || asker.forwarded === true) return undefined
    const running = (await this.#options.records.running(asker.tenant, asker.workspace)).sort((a, b) => a.started_at.localeCompare(b.started_at))
    for (const { owner, records } of this.#byOwner(running)) {
      if (owner === null) continue
      try {
        return await send(owner)
      } catch (error) {
        if (!(error instanceof OwnerGone)) throw error
        if (error.maybeDelivered) throw new ToolError('ExecutionFailed', 'the instance that runs this workspace\'s processes stopped answering during the request: it may have acted on it, and the outcome is unknown', { cause: error })
        for (const record of records) this.ownerUnreachable(asker.tenant, record, error.reason)
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

  /**
   * The instance that ran a record's process is gone (or restarted): it is
   * lost for good, and never asked again. The record is read again first, and
   * left as it is when it is gone or names another run.
   */
  markLost (tenant: string, record: ProcessRecord): void {
    this.#silences.delete(silenceKey(tenant, record))
    if (record.owner === null) return
    const { records } = this.#options
    records.read(tenant, record.workspace, record.id).then(async (now) => {
      if (now === null || now.owner !== record.owner || now.instance !== record.instance) return
      await records.write(tenant, { ...now, owner: null }, { update: true })
    }).catch(() => {})
  }

  /**
   * The instance that runs a record's process could not answer for it: lost
   * for good when `reason` leaves no doubt, or when it has not answered
   * through `lostAfterMs` (a silence whose last miss is older than that
   * begins again).
   */
  ownerUnreachable (tenant: string, record: ProcessRecord, reason: Unreachable): void {
    if (record.owner === null) return
    if (reason === 'replaced') return this.markLost(tenant, record)
    const lostAfter = this.#options.lostAfterMs ?? UNANSWERED_LOST_MS
    const now = Date.now()
    const key = silenceKey(tenant, record)
    const silence = this.#silences.get(key)
    if (silence === undefined || now - silence.last > lostAfter) {
      if (this.#silences.size >= MAX_SILENCES) this.#forgetOldSilences(now, lostAfter)
      this.#silences.set(key, { first: now, last: now })
      return
    }
    silence.last = now
    if (now - silence.first >= lostAfter) this.markLost(tenant, record)
  }

  /** The instance that runs a record's process answered for it: a silence before is forgotten. */
  ownerAnswered (tenant: string, record: ProcessRecord): void {
    this.#silences.delete(silenceKey(tenant, record))
  }

  #forgetOldSilences (now: number, lostAfter: number): void {
    for (const [key, silence] of this.#silences) if (now - silence.last > lostAfter) this.#silences.delete(key)
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

function silenceKey (tenant: string, record: ProcessRecord): string {
  return `${tenant}/${record.workspace}/${record.id}`
}
