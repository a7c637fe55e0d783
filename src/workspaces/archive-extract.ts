/**
 * Workspace archives in. An upload is inflated as a stream (zlib, off the
 * event loop, one chunk at a time) and counted as it goes, so a gzip bomb
 * stops at the byte limit having held a few chunks, never the whole of it.
 * It is extracted safely: into a staging directory first (so a broken
 * archive changes nothing), keeping only plain files, directories and
 * symlinks that stay inside; then every entry is moved into the workspace
 * through the path-containment check (archive-move.ts), so neither the
 * archive nor links already in the workspace can lead a write outside.
 * Archives out (downloads) are archive-pack.ts.
 */
import { randomUUID } from 'node:crypto'
import type { Stats } from 'node:fs'
import { mkdir, rename } from 'node:fs/promises'
import path from 'node:path'
import { type Readable, Transform } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import type { Header, ReadEntry } from 'tar'
import { descriptorShortage, ToolError, volumeFull } from '../errors.ts'
import { directorySize } from './directory-size.ts'
import { isInside } from '../workspace-fs/paths.ts'
import { withQuotaLock } from '../workspace-fs/write.ts'
import { removeTree } from './remove-tree.ts'
import { PATH_MAX, StagedLinks } from './archive-links.ts'
import { bytesReplacedBy, moveInto as moveStaged } from './archive-move.ts'
import { type ExtractReport, skip } from './archive-report.ts'
import { compressedOnce, countedBytes } from './archive-streams.ts'
import type { WorkspaceQuota } from './quotas.ts'
import { type Identity, identityOf, identityOfStats, sameIdentity } from './usage-directory.ts'

export interface ArchiveLimits {
  maxEntries: number
  /** Bytes of the inflated tar stream (headers included), and of the files it holds. */
  maxBytes: number
  /** Bytes of the body as sent (compressed). */
  maxBodyBytes: number
}

const KEPT_TYPES = new Set(['File', 'OldFile', 'ContiguousFile', 'Directory', 'SymbolicLink'])
/**
 * Deeper entries are skipped: node-tar checks and reserves every parent of
 * every entry, one after another, so an archive of a few KB whose entries
 * are thousands of levels deep took minutes and gigabytes (and ended the
 * service). A real tree is rarely a tenth as deep.
 */
export const MAX_ENTRY_DEPTH = 64
/**
 * What node-tar holds for an archive grows with every entry's parent paths
 * (it checks and reserves each of them, and keeps the entries queued):
 * thousands of entries 64 levels deep with long names took gigabytes. The
 * sum of those paths' lengths is bounded, at this much an entry the archive
 * may hold (30 MiB for 10000); a real tree a dozen levels deep sums to under
 * a KiB an entry.
 */
const PARENT_PATH_BYTES_PER_ENTRY = 3 * 1024

/** The bytes of an entry's parent paths: `a/b/c` has `a` and `a/b`. */
function parentPathBytesOf (name: string): number {
  let total = 0
  for (let at = name.indexOf('/'); at > 0; at = name.indexOf('/', at + 1)) total += at
  return total
}

/** What a Linux filesystem takes (with PATH_MAX): a longer name or path could not be made, and its error would quote it whole. */
const MAX_NAME_BYTES = 255

/** Why an entry is refused, or null when it may be extracted. */
function refusal (entry: ReadEntry | Header, stagingDir: string): string | null {
  const name = entry.path ?? ''
  if (!KEPT_TYPES.has(String(entry.type))) return `entry type ${String(entry.type)} is not allowed (only files, directories and symlinks)`
  if (name.startsWith('/') || /^[A-Za-z]:/.test(name)) return 'absolute path'
  const parts = name.split(/[\\/]/)
  if (parts.includes('..')) return 'path contains ".."'
  if (parts.filter((part) => part !== '' && part !== '.').length > MAX_ENTRY_DEPTH) return `deeper than ${MAX_ENTRY_DEPTH} levels`
  if (Buffer.byteLength(name) > PATH_MAX || parts.some((part) => Buffer.byteLength(part) > MAX_NAME_BYTES)) return `a name longer than ${MAX_NAME_BYTES} bytes, or a path longer than ${PATH_MAX}`
  // node-tar would drop it silently: a file cannot replace the workspace's own directory.
  if (entry.type !== 'Directory' && path.posix.normalize(name.replaceAll('\\', '/')).replace(/\/$/, '') === '.') return 'names the workspace itself'
  if (entry.type === 'SymbolicLink') {
    const target = entry.linkpath ?? ''
    // PATH_MAX counts the terminating NUL.
    if (Buffer.byteLength(target) >= PATH_MAX) return `a symlink target of ${PATH_MAX} bytes or more`
    if (path.isAbsolute(target)) return 'symlink to an absolute path'
    if (!isInside(stagingDir, path.resolve(stagingDir, path.dirname(name), target))) return 'symlink leaving the workspace'
  }
  return null
}

/** The workspace at a directory as it was seen, for a move into it later to tell whether it was deleted (and maybe made again) meanwhile. */
export type WorkspaceSeen = Identity | undefined
export const workspaceSeen = (workspaceDir: string): WorkspaceSeen => identityOf(workspaceDir)

/** An upload read whole into its staging directory, to move into a workspace or discard (always, once done). */
export interface StagedArchive {
  readonly report: ExtractReport
  /**
   * Moves it into the workspace at `workspaceDir` (canonical): its byte quota
   * is asked for the unpacked size, less the files it replaces, before
   * anything moves in, and its usage is then scanned again. NotFound when
   * the workspace is no longer the one `seen` saw.
   */
  moveInto: (workspaceDir: string, quota: WorkspaceQuota, seen: WorkspaceSeen) => Promise<void>
  discard: () => Promise<void>
}

/**
 * Reads the .tar.gz streamed in `body` into a staging directory, touching no
 * workspace: so a caller that makes its workspace only once this is done has
 * made none for an archive that is refused. `body` is read, never destroyed:
 * after a refusal the caller still answers on its connection.
 */
export async function stageArchive (body: Readable, stagingDir: string, limits: ArchiveLimits, signal?: AbortSignal): Promise<StagedArchive> {
  // Named by its start, so that one a crash abandoned is recognised and removed by the sweep.
  const staging = path.join(stagingDir, `${Date.now()}-${randomUUID()}`)
  // Private, as the tenants' workspaces are: what it holds is a tenant's, and the staging directory may be open.
  await mkdir(staging, { recursive: true, mode: 0o700 })
  const report: ExtractReport = { files: 0, directories: 0, symlinks: 0, skipped: [], skipped_count: 0 }
  try {
    await unpackInto(body, staging, limits, report, signal)
  } catch (error) {
    await discard(staging)
    throw error
  }
  const moveInto = async (workspaceDir: string, quota: WorkspaceQuota, seen: WorkspaceSeen): Promise<void> => {
    const staged = await directorySize(staging)
    // Checked and moved in alone among the workspace's writes, so two uploads (or an upload and a write) cannot both take the last bytes.
    await withQuotaLock(workspaceDir, async () => {
      ensureStillThere(workspaceDir, seen)
      await quota.ensureRoom(staged.bytes - await bytesReplacedBy(staging, workspaceDir))
      // Each entry goes into the workspace directory seen, opened and checked: never into one made again at its path.
      const checkRoot = (root: Stats): void => { if (!sameIdentity(identityOfStats(root), seen)) throw deletedDuringUpload() }
      try {
        await moveStaged(staging, workspaceDir, report, checkRoot)
      } catch (error) {
        // The workspace deleted under the move (its directory gone from under an entry) is NotFound, not that error.
        ensureStillThere(workspaceDir, seen)
        throw error
      } finally {
        // Replaced files and skipped entries make the staged count an estimate: a scan brings the figure to the truth.
        quota.landed(staged.files, staged.bytes)
        quota.changed()
      }
    })
    // A deletion during the move took what was moved with it.
    ensureStillThere(workspaceDir, seen)
  }
  return { report, moveInto, discard: () => discard(staging) }
}

/**
 * NotFound when the workspace an upload moves into was deleted meanwhile (and
 * maybe made again), rather than a report of files written into a workspace
 * that is gone. (Deleted during the move itself, what was moved went with it;
 * made again meanwhile, nothing lands in the new one: each entry is placed
 * through the directory seen.)
 */
function ensureStillThere (workspaceDir: string, seen: WorkspaceSeen): void {
  if (!sameIdentity(identityOf(workspaceDir), seen)) throw deletedDuringUpload()
}

const deletedDuringUpload = (): ToolError => new ToolError('NotFound', 'the workspace was deleted during the upload')

/**
 * Removes the staging directory. After a failure node-tar can still have
 * writes under way in it; renamed first, it is out of their paths' reach,
 * so they fail instead of adding entries while it is removed.
 */
async function discard (staging: string): Promise<void> {
  const discarded = `${staging}-discarded`
  await rename(staging, discarded)
  await removeTree(discarded)
}

async function unpackInto (body: Readable, staging: string, limits: ArchiveLimits, report: ExtractReport, signal?: AbortSignal): Promise<void> {
  let entries = 0
  let bytes = 0
  let limitError: ToolError | undefined
  let parentPathBytes = 0
  const maxParentPathBytes = limits.maxEntries * PARENT_PATH_BYTES_PER_ENTRY
  const refused = new WeakMap<ReadEntry, string>()
  const links = new StagedLinks()
  const deferred = new WeakSet<ReadEntry>()
  // Files node-tar is writing: one the archive ends in the middle of (cut short, its client gone) is never
  // ended by node-tar, whose write stream then keeps its descriptor, and the blocks of the file removed
  // with the staging directory, for as long as the service runs.
  const unfinished = new Set<ReadEntry>()
  // A name that is not UTF-8 arrives with U+FFFD in place of its bytes: two such names that differ
  // only there would become one file, the second taking the first's place unseen.
  const unreadableNames = new Set<string>()
  const sameNameAsEarlier = (name: string): string | null => {
    if (!name.includes('\uFFFD')) return null
    if (unreadableNames.has(name)) return 'the name is not valid UTF-8, and reads the same as an earlier entry\'s'
    unreadableNames.add(name)
    return null
  }
  // tar (and node:zlib below) load with the first archive, not at every start of the service.
  const tar = await import('tar')
  const extractor = tar.x({
    cwd: staging,
    strict: true,
    preserveOwner: false,
    noChmod: true,
    filter: (entryPath, stat) => {
      const entry = stat as ReadEntry
      // Refused entries are reported as node-tar sets them aside ('ignoredEntry' below).
      const why = refusal(entry, staging) ?? sameNameAsEarlier(entryPath)
      if (why !== null) {
        refused.set(entry, why)
        return false
      }
      // No setuid, setgid or sticky bits: a workspace file must never become a privileged program.
      if (typeof entry.mode === 'number') entry.mode &= 0o777
      entries++
      bytes += Number(entry.size ?? 0)
      parentPathBytes += parentPathBytesOf(entryPath)
      if (entries > limits.maxEntries) limitError ??= new ToolError('PayloadTooLarge', `the archive has more than ${limits.maxEntries} entries`)
      if (parentPathBytes > maxParentPathBytes) limitError ??= new ToolError('PayloadTooLarge', `the archive's entries lie too deep for how many they are (their parent directories' paths add up to more than ${maxParentPathBytes} bytes)`)
      // The size a header announces counts before its bytes arrive: a bomb's file is refused at its header.
      if (bytes > limits.maxBytes) limitError ??= unpacksTooLarge(limits.maxBytes)
      if (limitError) {
        extractor.abort(limitError)
        return false
      }
      // Links are made once the rest is extracted (archive-links.ts), not by node-tar.
      if (entry.type !== 'SymbolicLink') {
        links.noteOther(entryPath)
        if (FILE_TYPES.has(entry.type)) {
          unfinished.add(entry)
          entry.once('end', () => unfinished.delete(entry))
        }
        return true
      }
      links.noteLink(entryPath, entry.linkpath ?? '')
      deferred.add(entry)
      return false
    },
  })
  // Its errors reach us through the pipeline; one from a write still under way after a failure must not go uncaught.
  extractor.on('error', () => {})
  // Entries the filter refused, and those node-tar sets aside before asking it (kinds it does not
  // extract, such as a GNU sparse file).
  extractor.on('ignoredEntry', (entry: ReadEntry) => {
    if (limitError === undefined && !deferred.has(entry)) skip(report, entry.path, refused.get(entry) ?? refusal(entry, staging) ?? `entry type ${String(entry.type)} is not extracted`)
  })
  const compressed = countedBytes(limits.maxBodyBytes, () => new ToolError('PayloadTooLarge', `the body is larger than ${limits.maxBodyBytes} bytes`))
  // Piped, not part of the pipeline: a failed pipeline destroys its streams, and destroying a request closes its socket.
  const forwardError = (error: Error): void => { compressed.destroy(error) }
  body.on('error', forwardError)
  body.pipe(compressed)
  // An archive of no entries is only its end: two or more zero blocks, which node-tar in strict mode
  // calls no archive. Anything else that fails so (a few zero bytes, nothing at all) is none.
  let onlyZeros = true
  let inflatedBytes = 0
  const zeros = new Transform({
    transform (chunk: Buffer, _encoding, callback) {
      inflatedBytes += chunk.length
      if (onlyZeros && !chunk.equals(Buffer.alloc(chunk.length))) onlyZeros = false
      callback(null, chunk)
    },
  })
  try {
    const inflated = countedBytes(limits.maxBytes, () => unpacksTooLarge(limits.maxBytes))
    await pipeline(compressed, process.getBuiltinModule('node:zlib').createGunzip(), inflated, compressedOnce(), zeros, extractor, signal ? { signal } : {})
  } catch (error) {
    for (const entry of unfinished) entry.end()
    const emptyArchive = onlyZeros && inflatedBytes >= 2 * TAR_BLOCK_BYTES && inflatedBytes % TAR_BLOCK_BYTES === 0
    if (emptyArchive && entries === 0 && (error as { code?: unknown }).code === 'TAR_BAD_ARCHIVE') return
    throw limitError ?? (error instanceof ToolError ? error : unreadable(error as NodeJS.ErrnoException, staging))
  } finally {
    body.unpipe(compressed)
    body.off('error', forwardError)
  }
  if (limitError) throw limitError
  await links.makeIn(staging, report)
}

/** The entry types node-tar writes as a file through a write stream of its own. */
const FILE_TYPES = new Set(['File', 'OldFile', 'ContiguousFile'])

const unpacksTooLarge = (maxBytes: number): ToolError => new ToolError('PayloadTooLarge', `the archive unpacks to more than ${maxBytes} bytes`)

const TAR_BLOCK_BYTES = 512

/** A reading failure as the client's problem, without the server's paths. */
function unreadable (error: NodeJS.ErrnoException, staging: string): ToolError {
  // The archive may be fine: no descriptor is free just now, or the volume is full.
  const shortage = descriptorShortage(error)
  if (shortage) return shortage
  const full = volumeFull(error, 'for the upload')
  if (full) return full
  if (error.code?.startsWith('Z_')) return new ToolError('BadRequest', `the body is not a gzip-compressed tar archive (${error.message})`)
  const message = (error.message.split('\n')[0] ?? '').replaceAll(`${staging}/`, '').replaceAll(staging, '.')
  return new ToolError('BadRequest', `the archive cannot be read: ${message.replace(/(^|[\s'"(])\/[^\s'"]*/g, '$1…')}`)
}
