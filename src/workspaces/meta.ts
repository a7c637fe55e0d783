/**
 * The on-disk record of persistent workspaces, the source of truth that
 * several instances sharing one workspace root (a ReadWriteMany volume)
 * agree on:
 *
 *   <root>/tenants/<tenant>/ws/<id>/        the workspace
 *   <root>/tenants/<tenant>/meta/<id>.json  {tenant, id, createdAt, expiresAt, ttlSeconds, incarnation}
 *   <root>/tenants/<tenant>/processes/<id>/ which instance runs each of its processes (processes/process-records.ts)
 *   <root>/trash/<uuid>/                    a deleted workspace, until its files are gone (workspace-trash.ts)
 *
 * A metadata file is claimed with an exclusive create, so two instances
 * creating the same id cannot both win; renewals replace it atomically.
 */
import { access, chmod, mkdir, readdir, rm, stat } from 'node:fs/promises'
import path from 'node:path'
import { createFileOnce, replaceFile } from '../replace-file.ts'
import { CrashLeftRecords } from './crash-left-meta.ts'
import { directoryNameOf } from './ids.ts'
import { moveToTrash } from './trash.ts'
import { absentOrThrow, readTextIfPresent } from './read-if-present.ts'

export interface WorkspaceMeta {
  tenant: string
  id: string
  createdAt: number
  expiresAt: number
  ttlSeconds: number
  /**
   * Made at random with the workspace: tells apart two workspaces of one id
   * made in the same millisecond (one removed and made again by another
   * instance). Absent from records written before it was.
   */
  incarnation?: string
  /** Written again for a file a crash left without its record (crash-left-meta.ts): its creation and incarnation are made up. */
  recovered?: true
}

/** The name of a workspace's metadata file in its tenant's directory. */
export const metaFileName = (id: string): string => `${directoryNameOf(id)}.json`

/** How far a volume's clock (a recovered record's creation is its file's time) may be from an instance's. */
const RECOVERED_CLOCK_SLACK_MS = 5_000

/**
 * Whether two records are of the same workspace, not of two made under one
 * id one after the other. The incarnations decide only when both records
 * have one: an instance of an older version, sharing the root, renews a
 * record without it.
 */
export function sameWorkspace (a: WorkspaceMeta, b: WorkspaceMeta): boolean {
  if (a.recovered === true || b.recovered === true) {
    // A record written again after a crash stands for the workspace made no later than the file it was
    // written for (its own identity is lost); one made after it is another workspace of the id. One made
    // again can come only after the recovery, itself 10 s after the file's last write: a few seconds
    // allow for a network volume's clock.
    const [recovered, other] = a.recovered === true ? [a, b] : [b, a]
    return other.createdAt <= recovered.createdAt + RECOVERED_CLOCK_SLACK_MS
  }
  if (a.createdAt !== b.createdAt) return false
  return a.incarnation === undefined || b.incarnation === undefined || a.incarnation === b.incarnation
}

/** A metadata file that is there but holds no record. */
const CORRUPT = Symbol('corrupt')

/** Where the workspaces and their metadata live under one root. */
export class WorkspaceLayout {
  readonly root: string
  readonly #crashLeft: CrashLeftRecords

  /** `ttlSeconds`: what a record written again after a crash gets (process records read none). */
  constructor (root: string, ttlSeconds = 3600, crashLeftAfterMs?: number) {
    this.root = root
    this.#crashLeft = new CrashLeftRecords(ttlSeconds, crashLeftAfterMs)
  }

  workspaceDir (tenant: string, id: string): string {
    return path.join(this.#tenantDir(tenant), 'ws', directoryNameOf(id))
  }

  /** Every tenant's workspaces, metadata and process records; only the service's user may enter it. */
  get tenantsDir (): string {
    return path.join(this.root, 'tenants')
  }

  /**
   * Makes the tenants' directory private (0700), also under a root an operator made open: a command
   * can leave a setuid program in a workspace, which would run as the service's user. Answers why not
   * when it cannot (another user's directory, a volume shared wrongly).
   */
  async makePrivate (): Promise<unknown> {
    return makePrivateDirectory(this.tenantsDir)
  }

  /** Where deleted workspaces wait for their files to be removed. */
  get trashDir (): string {
    return path.join(this.root, 'trash')
  }

  /** Where archive uploads are unpacked before they move into their workspace. */
  get stagingDir (): string {
    return path.join(this.root, 'staging')
  }

  /** The records of a workspace's processes: one file per process, naming the instance that runs it. */
  processesDir (tenant: string, id: string): string {
    return path.join(this.#tenantDir(tenant), 'processes', directoryNameOf(id))
  }

  /**
   * The lock (a directory) held while an instance decides where a workspace's processes run: beside
   * the tenant's records, not in a workspace's own, which a start refused early would leave behind and
   * a removal would take from under its holder.
   */
  homeLock (tenant: string, id: string): string {
    return path.join(this.#tenantDir(tenant), 'home-locks', directoryNameOf(id))
  }

  metaFile (tenant: string, id: string): string {
    return path.join(this.#metaDir(tenant), metaFileName(id))
  }

  /**
   * Claims an id: false when its metadata exists already (made here or by
   * another instance). Made whole (createFileOnce): no instance ever reads
   * the record half written, which would look like none.
   */
  async claim (meta: WorkspaceMeta): Promise<boolean> {
    const file = this.metaFile(meta.tenant, meta.id)
    await mkdir(path.dirname(file), { recursive: true })
    return await createFileOnce(file, JSON.stringify(meta))
  }

  /** Replaces the metadata atomically (readers never see half a file). */
  async save (meta: WorkspaceMeta): Promise<void> {
    await replaceFile(this.metaFile(meta.tenant, meta.id), JSON.stringify(meta))
  }

  /**
   * The metadata of one workspace, or null when there is none (or it holds
   * no record yet). A file a crash left without its record is written
   * again once it has stayed so a while (crash-left-meta.ts).
   */
  async read (tenant: string, id: string): Promise<WorkspaceMeta | null> {
    const file = this.metaFile(tenant, id)
    const found = await readMeta(file)
    if (found !== CORRUPT) {
      this.#crashLeft.forget(file)
      return found
    }
    const recovered = await this.#crashLeft.recover(file, tenant, id)
    if (recovered !== null) return recovered
    // Written meanwhile (another instance's recovery, a claim finished): what is there now.
    const now = await readMeta(file)
    return now === CORRUPT ? null : now
  }

  /** Whether the metadata file is there (unreadable counts as there: only a sure absence is a removal). */
  async hasMeta (tenant: string, id: string): Promise<boolean> {
    return access(this.metaFile(tenant, id)).then(() => true, (error: NodeJS.ErrnoException) => error.code !== 'ENOENT')
  }

  /**
   * Saves a renewal of `meta`'s workspace only while the metadata there is
   * still that workspace's: never over one made again under the id since
   * (another instance deleted and re-made it), nor in place of one deleted
   * (false then). Between the look and the write (a temporary file renamed
   * into place) another instance can still act, not through a renewal's
   * whole way.
   */
  async saveRenewal (meta: WorkspaceMeta): Promise<boolean> {
    const found = await this.read(meta.tenant, meta.id)
    if (found === null || !sameWorkspace(found, meta)) return false
    await this.save(meta)
    return true
  }

  /**
   * Removes the metadata of `meta`'s workspace, and only it: metadata that
   * outlived its directory (a removal under way or cut short, a renewal
   * written late). One another instance made since for a new workspace of
   * the id stays. Between the look and the removal another instance can
   * still act: the window is two system calls, where a removal by name
   * took the new workspace whatever its age.
   */
  async removeMetaOf (meta: WorkspaceMeta): Promise<void> {
    const found = await this.read(meta.tenant, meta.id)
    if (found !== null && sameWorkspace(found, meta)) await rm(this.metaFile(meta.tenant, meta.id), { force: true })
  }

  /**
   * Removes the workspace `meta` describes: its directory goes to the trash
   * first, in one rename (an instance that still finds the metadata then
   * sees a workspace without its directory, which is gone; and a creation
   * of the id starts empty), then its metadata. The files are removed from
   * the trash later; `before` runs first (what runs in it ends). Nothing is
   * done (false) when the metadata there is no longer its own: another
   * instance removed it (directory first), and may have made the id again,
   * whose directory and record are not this removal's. Between the look and
   * the move another instance can still act: rarely, not never.
   */
  async remove (meta: WorkspaceMeta, before: () => Promise<void> = async () => {}): Promise<boolean> {
    const { tenant, id } = meta
    const found = await this.read(tenant, id)
    // Metadata that cannot be read is the workspace's as far as anyone can tell: it goes by name.
    const unreadable = found === null && await this.hasMeta(tenant, id)
    if (!unreadable && (found === null || !sameWorkspace(found, meta))) return false
    await before()
    await moveToTrash(this.workspaceDir(tenant, id), this.trashDir)
    if (unreadable) await rm(this.metaFile(tenant, id), { force: true })
    else await this.removeMetaOf(meta)
    // A process another instance starts meanwhile may write its record into the directory being
    // removed: rm retries what a new entry made fail.
    await rm(this.processesDir(tenant, id), { recursive: true, force: true, maxRetries: 3 })
    return true
  }

  /** How many of a tenant's metadata files (`names`, metaFileNames') are of workspaces not expired at `now`; one that cannot be read counts. */
  async unexpiredCount (tenant: string, names: Set<string>, now: number): Promise<number> {
    let count = 0
    for (const name of names) {
      const meta = await readMeta(path.join(this.#metaDir(tenant), name)).catch((): typeof CORRUPT => CORRUPT)
      if (meta === null || meta === CORRUPT || meta.expiresAt > now) count++
    }
    return count
  }

  /** The names of a tenant's metadata files on disk (as metaFileName gives them; one a workspace: their number is the tenant's count). */
  async metaFileNames (tenant: string): Promise<Set<string>> {
    const files = await readdir(this.#metaDir(tenant)).catch(() => [] as string[])
    return new Set(files.filter((file) => file.endsWith('.json')))
  }

  /**
   * Every readable metadata record under the root but those of the
   * workspaces `known` names by their directory: a sweep reads only the
   * records of workspaces it has not seen, not one file per workspace.
   */
  async all (known: (workspaceDir: string) => boolean = () => false): Promise<WorkspaceMeta[]> {
    const tenantsDir = this.tenantsDir
    const out: WorkspaceMeta[] = []
    for (const tenantName of await readdir(tenantsDir).catch(() => [] as string[])) {
      const metaDir = path.join(tenantsDir, tenantName, 'meta')
      for (const file of await readdir(metaDir).catch(() => [] as string[])) {
        if (!file.endsWith('.json')) continue
        if (known(path.join(tenantsDir, tenantName, 'ws', file.slice(0, -'.json'.length)))) continue
        const meta = await readMeta(path.join(metaDir, file)).catch(() => null)
        if (meta === CORRUPT) {
          // A crash's leftover is written again when its names say whose it is (a hashed name does not).
          const id = file.slice(0, -'.json'.length)
          const rewritten = directoryNameOf(tenantName) === tenantName && directoryNameOf(id) === id ? await this.read(tenantName, id).catch(() => null) : null
          if (rewritten) out.push(rewritten)
        } else if (meta) {
          out.push(meta)
        }
      }
    }
    return out
  }

  #tenantDir (tenant: string): string {
    return path.join(this.tenantsDir, directoryNameOf(tenant))
  }

  #metaDir (tenant: string): string {
    return path.join(this.#tenantDir(tenant), 'meta')
  }
}

/**
 * Makes `dir` (and its missing parents) private to the service's user
 * (0700), also one an operator made open. Answers why not when it cannot
 * (another user's directory, a volume shared wrongly).
 */
export async function makePrivateDirectory (dir: string): Promise<unknown> {
  await mkdir(dir, { recursive: true, mode: 0o700 })
  return chmod(dir, 0o700).then(() => undefined, (error: unknown) => error)
}

/** Whether `dir` is there; a failure to tell (EIO, ESTALE on a network volume) is thrown, never taken for gone (that removes the workspace). */
export async function directoryExists (dir: string): Promise<boolean> {
  return stat(dir).then(() => true, absentOrThrow(false))
}

/** The record in a metadata file: null when there is none, CORRUPT when the file holds none; a read that failed otherwise is thrown. */
async function readMeta (file: string): Promise<WorkspaceMeta | null | typeof CORRUPT> {
  const text = await readTextIfPresent(file)
  if (text === null) return null
  try {
    const meta = JSON.parse(text) as WorkspaceMeta
    const valid = typeof meta === 'object' && meta !== null && typeof meta.tenant === 'string' && typeof meta.id === 'string' &&
      Number.isFinite(meta.createdAt) && Number.isFinite(meta.expiresAt) && Number.isFinite(meta.ttlSeconds) &&
      (meta.incarnation === undefined || typeof meta.incarnation === 'string')
    return valid ? meta : CORRUPT
  } catch {
    return CORRUPT
  }
}
