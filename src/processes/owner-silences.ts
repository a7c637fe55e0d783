/**
 * When the instance that runs a process is gone for good, as this instance
 * sees it. Lost for good (the record says so, and that address is never
 * asked again) only when that leaves no doubt: another run answers at the
 * address, or the instance has not answered for the process through
 * `lostAfterMs`, as this instance saw it (its own clock, no shared state).
 * Before that, a request it does not answer is told `lost`, and the next one
 * asks again: an instance that was out of reach for a moment still has its
 * processes. Only the instance that runs a process writes its record, but
 * to mark it lost, and that re-reads it first.
 */
import type { Unreachable } from './peers.ts'
import type { ProcessRecord, ProcessRecords } from './process-records.ts'

/** How long an instance may not answer before its processes are lost for good: past a restart or a network's hiccup. */
export const UNANSWERED_LOST_MS = 60_000
/** Silences kept at most before the ones long over are forgotten. */
const MAX_SILENCES = 1024

export class OwnerSilences {
  readonly #records: ProcessRecords
  readonly #lostAfterMs: number
  /** Per process record: when its instance first and last did not answer for it, with no answer between. */
  readonly #silences = new Map<string, { first: number, last: number }>()

  constructor (records: ProcessRecords, lostAfterMs = UNANSWERED_LOST_MS) {
    this.#records = records
    this.#lostAfterMs = lostAfterMs
  }

  /**
   * The instance that ran a record's process is gone (or restarted): it is
   * lost for good, and never asked again. The record is read again first, and
   * left as it is when it is gone or names another run.
   */
  markLost (tenant: string, record: ProcessRecord): void {
    this.#silences.delete(silenceKey(tenant, record))
    if (record.owner === null) return
    const records = this.#records
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
  unreachable (tenant: string, record: ProcessRecord, reason: Unreachable): void {
    if (record.owner === null) return
    if (reason === 'replaced') return this.markLost(tenant, record)
    const lostAfter = this.#lostAfterMs
    const now = Date.now()
    const key = silenceKey(tenant, record)
    const silence = this.#silences.get(key)
    if (silence === undefined || now - silence.last > lostAfter) {
      if (this.#silences.size >= MAX_SILENCES) this.#forgetOld(now, lostAfter)
      this.#silences.set(key, { first: now, last: now })
      return
    }
    silence.last = now
    if (now - silence.first >= lostAfter) this.markLost(tenant, record)
  }

  /** The instance that runs a record's process answered for it: a silence before is forgotten. */
  answered (tenant: string, record: ProcessRecord): void {
    this.#silences.delete(silenceKey(tenant, record))
  }

  #forgetOld (now: number, lostAfter: number): void {
    for (const [key, silence] of this.#silences) if (now - silence.last > lostAfter) this.#silences.delete(key)
  }
}

function silenceKey (tenant: string, record: ProcessRecord): string {
  return `${tenant}/${record.workspace}/${record.id}`
}
