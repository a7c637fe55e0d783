/**
 * Creating a persistent workspace. It is cached at once, so that concurrent
 * creations here make it once and count against the quota at once; then its
 * directory is made and its id claimed on disk, where another instance may
 * have claimed it first.
 */
import { randomUUID } from 'node:crypto'
import { mkdir } from 'node:fs/promises'
import { ToolError } from '../errors.ts'
import { metaOf, type CachedWorkspace, type CachedWorkspaces } from './cached-workspaces.ts'
import { metaFileName, type WorkspaceLayout } from './meta.ts'
import { startUsage } from './usage.ts'

/** Thrown inside a creation when another instance claimed the id first. */
export class ClaimedElsewhere extends Error {}

export interface WorkspaceCreation {
  tenant: string
  id: string
  ttlSeconds: number
  /** How many persistent workspaces the tenant may hold. */
  limit: number
}

/**
 * Caches a new workspace and starts making it; `entry.ready` settles when its
 * directory and metadata exist, and rejects with ClaimedElsewhere when
 * another instance claimed the id first (the entry is then forgotten).
 */
export function materialise (cache: CachedWorkspaces, layout: WorkspaceLayout, { tenant, id, ttlSeconds, limit }: WorkspaceCreation): CachedWorkspace {
  const now = Date.now()
  const entry: CachedWorkspace = {
    tenant,
    id,
    dir: layout.workspaceDir(tenant, id),
    createdAt: now,
    expiresAt: now + ttlSeconds * 1000,
    ttlSeconds,
    incarnation: randomUUID(),
    users: 0,
    savedExpiresAt: now + ttlSeconds * 1000,
    checkedAt: now,
    ready: Promise.resolve(),
    made: false,
  }
  cache.add(entry)
  const { creating } = cache
  creating.push(entry)
  entry.ready = (async () => {
    // The disk counts every instance's workspaces (the cache may still hold ones another instance
    // removed); the creations begun here before this one and still under way count too, once each,
    // whether or not their metadata is on disk yet.
    const onDisk = await layout.metaFileNames(tenant)
    // Made meanwhile by another instance: a Conflict, not a quota it may fill.
    if (onDisk.has(metaFileName(id))) throw new ClaimedElsewhere()
    const before = creating.slice(0, creating.indexOf(entry)).filter((other) => other.tenant === tenant && !onDisk.has(metaFileName(other.id))).length
    // At the quota by the count of files, the expired ones (gone, whether or not a sweep has come by) do not count.
    if (onDisk.size + before >= limit && await layout.unexpiredCount(tenant, onDisk, now) + before >= limit) throw quotaError(limit)
    // A directory made here is empty: its usage is known without a scan.
    if (await mkdir(entry.dir, { recursive: true }) !== undefined) startUsage(entry.dir)
    if (!await layout.claim(metaOf(entry))) throw new ClaimedElsewhere()
    entry.made = true
  })()
  entry.ready.catch(() => cache.forget(entry)).finally(() => { creating.splice(creating.indexOf(entry), 1) })
  return entry
}

function quotaError (limit: number): ToolError {
  return new ToolError('PermissionDenied', `the tenant's quota of ${limit} workspaces is used up; delete one first`)
}
