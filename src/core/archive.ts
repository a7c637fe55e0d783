/**
 * Workspace archives. Upload extracts a .tar.gz safely: into a staging
 * directory first (so a broken archive changes nothing), keeping only plain
 * files, directories and symlinks that stay inside; then every entry is
 * moved into the workspace through the path-containment check, so neither
 * the archive nor links already in the workspace can lead a write outside.
 * Download streams the workspace as a gzipped tar without following links.
 */
import { randomUUID } from 'node:crypto'
import { lstat, mkdir, readdir, readlink, rename, rm, symlink } from 'node:fs/promises'
import path from 'node:path'
import { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import * as tar from 'tar'
import { ToolError } from '../errors.ts'
import { openContainedDirectory, splitInWorkspace } from './contained-fs.ts'
import { directorySize } from './directory-size.ts'
import { isInside, resolveInWorkspace } from './paths.ts'
import { removeTree } from './remove-tree.ts'
import { UNLIMITED, type WorkspaceQuota } from './quotas.ts'

export interface ArchiveLimits {
  maxEntries: number
  maxBytes: number
}

export interface ExtractReport {
  files: number
  directories: number
  symlinks: number
  skipped: Array<{ path: string, reason: string }>
}

const KEPT_TYPES = new Set(['File', 'OldFile', 'ContiguousFile', 'Directory', 'SymbolicLink'])

/** Why an entry is refused, or null when it may be extracted. */
function refusal (entry: tar.ReadEntry | tar.Header, stagingDir: string): string | null {
  const name = entry.path ?? ''
  if (!KEPT_TYPES.has(String(entry.type))) return `entry type ${String(entry.type)} is not allowed (only files, directories and symlinks)`
  if (name.startsWith('/') || /^[A-Za-z]:/.test(name)) return 'absolute path'
  if (name.split(/[\\/]/).includes('..')) return 'path contains ".."'
  if (entry.type === 'SymbolicLink') {
    const target = entry.linkpath ?? ''
    if (path.isAbsolute(target)) return 'symlink to an absolute path'
    if (!isInside(stagingDir, path.resolve(stagingDir, path.dirname(name), target))) return 'symlink leaving the workspace'
  }
  return null
}

/**
 * Extracts a .tar.gz held in `archive` into `workspaceDir` (canonical). The
 * workspace's byte quota is asked for the whole unpacked size before anything
 * moves in (files the archive replaces are not credited: a conservative check).
 */
export async function extractArchive (archive: Buffer, workspaceDir: string, limits: ArchiveLimits, quota: WorkspaceQuota = UNLIMITED): Promise<ExtractReport> {
  if (archive.length < 2 || archive[0] !== 0x1f || archive[1] !== 0x8b) throw new ToolError('BadRequest', 'the body is not a gzip-compressed tar archive')
  const staging = path.join(path.dirname(workspaceDir), `.staging-${randomUUID()}`)
  await mkdir(staging)
  const report: ExtractReport = { files: 0, directories: 0, symlinks: 0, skipped: [] }
  try {
    await unpackInto(archive, staging, limits, report)
    await quota.ensureRoom((await directorySize(staging)).bytes)
    await moveInto(staging, workspaceDir, '', report)
    return report
  } finally {
    // Retried: after a failed extraction, writes still under way can make a directory non-empty for a moment.
    await removeTree(staging)
  }
}

async function unpackInto (archive: Buffer, staging: string, limits: ArchiveLimits, report: ExtractReport): Promise<void> {
  let entries = 0
  let bytes = 0
  let limitError: ToolError | undefined
  const extractor = tar.x({
    cwd: staging,
    strict: true,
    preserveOwner: false,
    noChmod: true,
    // The entry and byte limits below are the real bound; this only stops a pathological stream early.
    maxDecompressionRatio: MAX_DECOMPRESSION_RATIO,
    filter: (entryPath, stat) => {
      const entry = stat as tar.ReadEntry
      const why = refusal(entry, staging)
      if (why) {
        if (report.skipped.length < 100) report.skipped.push({ path: entryPath, reason: why })
        return false
      }
      // No setuid, setgid or sticky bits: a workspace file must never become a privileged program.
      if (typeof entry.mode === 'number') entry.mode &= 0o777
      entries++
      bytes += Number(entry.size ?? 0)
      if (entries > limits.maxEntries) limitError ??= new ToolError('PayloadTooLarge', `the archive has more than ${limits.maxEntries} entries`)
      if (bytes > limits.maxBytes) limitError ??= new ToolError('PayloadTooLarge', `the archive unpacks to more than ${limits.maxBytes} bytes`)
      // Stop reading (and decompressing) at once: the rest of a bomb is never inflated.
      if (limitError) extractor.abort(limitError)
      return limitError === undefined
    },
  })
  try {
    await pipeline(Readable.from([archive]), extractor)
  } catch (error) {
    if (limitError) throw limitError
    throw unreadable(error as Error, staging)
  }
  if (limitError) throw limitError
}

const MAX_DECOMPRESSION_RATIO = 100_000

/** A reading failure as the client's problem, without the server's paths. */
function unreadable (error: Error, staging: string): ToolError {
  const message = (error.message.split('\n')[0] ?? '').replaceAll(`${staging}/`, '').replaceAll(staging, '.')
  if (/decompression ratio exceeded/.test(message)) return new ToolError('PayloadTooLarge', `the archive expands more than ${MAX_DECOMPRESSION_RATIO} times`)
  return new ToolError('BadRequest', `the archive cannot be read: ${message.replace(/(^|[\s'"(])\/[^\s'"]*/g, '$1…')}`)
}

/**
 * Moves the staged tree into the workspace, entry by entry, each through
 * path containment and then through a descriptor-held directory, so neither
 * a link already in the workspace nor one swapped in meanwhile can redirect it.
 */
async function moveInto (fromDir: string, workspaceDir: string, relative: string, report: ExtractReport): Promise<void> {
  for (const name of await readdir(path.join(fromDir, relative))) {
    const rel = relative === '' ? name : `${relative}/${name}`
    const source = path.join(fromDir, rel)
    const info = await lstat(source)
    let target
    try {
      target = await resolveInWorkspace(workspaceDir, rel)
    } catch (error) {
      if (!(error instanceof ToolError)) throw error
      report.skipped.push({ path: rel, reason: 'would leave the workspace through an existing link' })
      continue
    }
    const { relativeDir, name: base } = splitInWorkspace(workspaceDir, target.absolute)
    const dir = await openContainedDirectory(workspaceDir, relativeDir, rel, { create: true })
    try {
      const existing = await lstat(dir.at(base)).catch(() => null)
      if (info.isDirectory()) {
        if (existing && !existing.isDirectory()) await rm(dir.at(base), { force: true })
        if (!existing?.isDirectory()) await mkdir(dir.at(base))
        report.directories++
      } else {
        if (existing) await removeTree(dir.at(base))
        if (info.isSymbolicLink()) await symlink(await readlink(source), dir.at(base))
        else await rename(source, dir.at(base))
        if (info.isSymbolicLink()) report.symlinks++
        else report.files++
      }
    } finally {
      await dir.close()
    }
    if (info.isDirectory()) await moveInto(fromDir, workspaceDir, rel, report)
  }
}

/** The workspace as a gzipped tar stream (links stored as links, never followed). */
export function packWorkspace (workspaceDir: string): Readable {
  return Readable.from(tar.c({ gzip: true, cwd: workspaceDir, portable: true, follow: false }, ['.']))
}
