/**
 * An upload's staged tree moved into the workspace (archive-extract.ts
 * stages it): entry by entry, each through path containment and then
 * through a descriptor-held directory, so neither a link already in the
 * workspace nor one swapped in meanwhile can redirect it, and every link
 * checked again where it lands.
 */
import type { Stats } from 'node:fs'
import { lstat, mkdir, readdir, readlink, realpath, rename, rm, stat, symlink } from 'node:fs/promises'
import path from 'node:path'
import { ToolError } from '../errors.ts'
import { openContainedDirectory, splitInWorkspace } from '../workspace-fs/open.ts'
import { isInside, resolveInWorkspace } from '../workspace-fs/paths.ts'
import { type ExtractReport, skip } from './archive-report.ts'
import { removeTree } from './remove-tree.ts'

/**
 * Moves the staged tree into the workspace, entry by entry, each through
 * path containment and then through a descriptor-held directory, so neither
 * a link already in the workspace nor one swapped in meanwhile can redirect
 * it. Once all are in, each link placed is checked again: one placed later
 * can change where an earlier one leads (`c → z/e/../..` before `z → .`).
 */
export async function moveInto (fromDir: string, workspaceDir: string, report: ExtractReport, checkRoot: (root: Stats) => void): Promise<void> {
  const placedLinks: Array<{ at: string, rel: string }> = []
  await moveTree(fromDir, workspaceDir, '', report, placedLinks, checkRoot)
  for (const { at, rel } of placedLinks) {
    const target = await readlink(at).catch(() => null)
    if (target === null || await linkStaysInside(at, target, workspaceDir)) continue
    const { relativeDir, name } = splitInWorkspace(workspaceDir, at)
    const dir = await openContainedDirectory(workspaceDir, relativeDir, rel, { checkRoot })
    try {
      await rm(dir.at(name), { force: true })
    } finally {
      await dir.close()
    }
    report.symlinks--
    skip(report, rel, 'symlink leaving the workspace through a link placed after it')
  }
}

async function moveTree (fromDir: string, workspaceDir: string, relative: string, report: ExtractReport, placedLinks: Array<{ at: string, rel: string }>, checkRoot: (root: Stats) => void): Promise<void> {
  for (const name of await readdir(path.join(fromDir, relative))) {
    const rel = relative === '' ? name : `${relative}/${name}`
    const source = path.join(fromDir, rel)
    const info = await lstat(source)
    if (info.isSymbolicLink() && !await linkStaysInside(source, await readlink(source), fromDir)) {
      skip(report, rel, 'symlink leaving the workspace through another link')
      continue
    }
    let target
    try {
      target = await placeOf(workspaceDir, relative, name, info)
    } catch (error) {
      if (!(error instanceof ToolError)) throw error
      skip(report, rel, 'would leave the workspace through an existing link')
      continue
    }
    // A link already in the workspace may put this entry elsewhere than its staged place (`a → .` puts
    // `a/a/l` at `l`): a link's target is checked again from where it lands.
    if (info.isSymbolicLink() && !await linkLandsInside(target, await readlink(source), workspaceDir)) {
      skip(report, rel, 'symlink leaving the workspace from where an existing link puts it')
      continue
    }
    await place(source, info, workspaceDir, target, rel, report, checkRoot)
    if (info.isSymbolicLink()) placedLinks.push({ at: target, rel })
    if (info.isDirectory()) await moveTree(fromDir, workspaceDir, rel, report, placedLinks, checkRoot)
  }
}

/**
 * The bytes of the workspace's files that the staged files will replace (a
 * file at the same name; a link there is replaced, not what it points to), so that restoring a workspace from its own archive is not
 * counted twice against its quota. Only files whose directory in the
 * workspace is reached without a link are credited: the credit must never
 * exceed what the move frees (the scan after it brings the figure to the truth).
 */
export async function bytesReplacedBy (stagingDir: string, workspaceDir: string): Promise<number> {
  let replaced = 0
  const plainDirectory = new Map<string, Promise<boolean>>()
  const reachedWithoutLink = (dir: string): Promise<boolean> => {
    let known = plainDirectory.get(dir)
    if (known === undefined) {
      known = realpath(dir).then((real) => real === dir, () => false)
      plainDirectory.set(dir, known)
    }
    return known
  }
  for (const entry of await readdir(stagingDir, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile()) continue
    const dir = path.join(workspaceDir, path.relative(stagingDir, entry.parentPath))
    if (!await reachedWithoutLink(dir)) continue
    const existing = await lstat(path.join(dir, entry.name)).catch(() => null)
    if (existing?.isFile() === true) replaced += existing.size
  }
  return replaced
}

/**
 * Where an entry named `name` in `relative` lands. Its parent directories are
 * followed through the workspace's links (and must stay inside). A
 * directory merges into an existing link to a directory there, as tar
 * follows one (`current/app.js` updates what `current` points to); any other
 * entry replaces what is at its name, a link included, never followed
 * (re-uploading the link `current → releases/v2` removed releases/v2).
 */
async function placeOf (workspaceDir: string, relative: string, name: string, info: Stats): Promise<string> {
  const literal = path.join(relative === '' ? workspaceDir : (await resolveInWorkspace(workspaceDir, relative)).absolute, name)
  if (!info.isDirectory()) return literal
  const followed = (await resolveInWorkspace(workspaceDir, relative === '' ? name : `${relative}/${name}`)).absolute
  return followed !== literal && (await stat(followed).catch(() => null))?.isDirectory() === true ? followed : literal
}

/**
 * Puts the staged entry `source` at `target` in the workspace, replacing
 * what is there: a file renamed over a file or link there, so that a reader
 * sees the old file or the new one, never none.
 */
async function place (source: string, info: Stats, workspaceDir: string, target: string, rel: string, report: ExtractReport, checkRoot: (root: Stats) => void): Promise<void> {
  const { relativeDir, name: base } = splitInWorkspace(workspaceDir, target)
  const dir = await openContainedDirectory(workspaceDir, relativeDir, rel, { create: true, checkRoot })
  try {
    const existing = await lstat(dir.at(base)).catch(() => null)
    if (info.isDirectory()) {
      if (existing && !existing.isDirectory()) await rm(dir.at(base), { force: true })
      if (!existing?.isDirectory()) await mkdir(dir.at(base))
      report.directories++
    } else {
      if (existing && (existing.isDirectory() || info.isSymbolicLink())) await removeTree(dir.at(base))
      if (info.isSymbolicLink()) await symlink(await readlink(source), dir.at(base))
      else await rename(source, dir.at(base))
      if (info.isSymbolicLink()) report.symlinks++
      else report.files++
    }
  } finally {
    await dir.close()
  }
}

/** Whether a link made at `link` with `target` stays in `root`: by its words, and followed through the links there. */
async function linkLandsInside (link: string, target: string, root: string): Promise<boolean> {
  return !path.isAbsolute(target) && isInside(root, path.resolve(path.dirname(link), target)) && await linkStaysInside(link, target, root)
}

/** How many links one resolution follows, as Linux does (ELOOP past it). */
const MAX_LINKS_FOLLOWED = 40

/**
 * Whether a link at `link` with `target` leads into `root`, followed as the
 * kernel would (`u/..` goes up from where the link `u` points, not from `u`'s
 * directory): component by component, one lstat each, so its cost grows
 * with the target's length, not with its square; the part that does not
 * exist is taken by its words.
 */
async function linkStaysInside (link: string, target: string, root: string): Promise<boolean> {
  if (path.isAbsolute(target)) return false
  let here = path.dirname(link)
  const rest = target.split('/').reverse()
  let followed = 0
  for (let name = rest.pop(); name !== undefined; name = rest.pop()) {
    if (name === '' || name === '.') continue
    const next = name === '..' ? path.dirname(here) : path.join(here, name)
    if (!isInside(root, next)) return false
    const info = await lstat(next).catch(() => null)
    if (info === null) return isInside(root, path.resolve(next, ...rest.reverse()))
    if (info.isSymbolicLink()) {
      const inner = await readlink(next)
      if (path.isAbsolute(inner) || ++followed > MAX_LINKS_FOLLOWED) return false
      rest.push(...inner.split('/').reverse())
      continue
    }
    // Through a file nothing is reached (ENOTDIR): where its words lead is as far as it goes.
    if (!info.isDirectory() && rest.length > 0) return isInside(root, path.resolve(next, ...rest.reverse()))
    here = next
  }
  return isInside(root, here)
}
