/**
 * What the sandbox hides, found by real path.
 *
 * A file the service reads (its config, `auth.tokens_file`) may be reached
 * through a chain of symlinks: a Kubernetes Secret or ConfigMap mount is
 * `tokens.yaml → ..data/tokens.yaml`, `..data → ..2026_…/`, and the kubelet
 * swaps `..data` to a new timestamped directory on every update. bwrap cannot
 * mount over a symlink, so the chain is followed hop by hop, and what gets
 * hidden is the real directory holding each hop (an empty tmpfs over it hides
 * the links, the timestamped directories and the file at once) and the real
 * file itself. A directory that tools need whole (the root, anything directly
 * under it, the sandbox's PATH and its parents) is never covered; under one,
 * only the real file is.
 */
import { lstatSync, readlinkSync, type Stats } from 'node:fs'
import path from 'node:path'
import { isInside } from '../workspace-fs/paths.ts'
import { SAFE_PATH } from './environment.ts'

/** Links followed in one chain before giving up on it, as the kernel does (ELOOP). */
const MAX_LINKS = 40

export interface HiddenPaths {
  /** Real directories each covered by an empty tmpfs, none inside another. */
  dirs: string[]
  /** Real files each covered by /dev/null, none inside a hidden directory. */
  files: string[]
}

interface Chain {
  /** The real directory that holds each symlink of the chain, and the one that holds where it ends. */
  holders: string[]
  /** The real path the chain ends at, when it exists. */
  end?: { path: string, isDirectory: boolean }
}

function lstatOrUndefined (file: string): Stats | undefined {
  try {
    return lstatSync(file)
  } catch {
    return undefined
  }
}

function readlinkOrUndefined (file: string): string | undefined {
  try {
    return readlinkSync(file)
  } catch {
    return undefined
  }
}

/**
 * Follows `start` the way the kernel resolves a path, one component at a
 * time, so that a symlink anywhere in it (not only the last component) is a
 * hop of the chain; a relative link is read from the directory that holds it.
 */
export function followChain (start: string): Chain {
  // Not path.resolve: it would drop `link/..` as text, where the kernel goes up from the link's target.
  const pending = (path.isAbsolute(start) ? start : `${process.cwd()}/${start}`).split('/').filter(Boolean)
  const holders: string[] = []
  let current = '/'
  let links = 0
  for (let name = pending.shift(); name !== undefined; name = pending.shift()) {
    if (name === '.') continue
    if (name === '..') {
      current = path.dirname(current)
      continue
    }
    const next = path.join(current, name)
    const info = lstatOrUndefined(next)
    // A missing entry (a link replaced meanwhile, a file not there yet): its directory is still hidden.
    if (info === undefined) return { holders: [...holders, current] }
    if (!info.isSymbolicLink()) {
      current = next
      continue
    }
    holders.push(current)
    const target = readlinkOrUndefined(next)
    if (target === undefined || ++links > MAX_LINKS) return { holders }
    pending.unshift(...target.split('/').filter(Boolean))
    if (path.isAbsolute(target)) current = '/'
  }
  const info = lstatOrUndefined(current)
  return { holders: [...holders, path.dirname(current)], ...(info && { end: { path: current, isDirectory: info.isDirectory() } }) }
}

function selfAndAncestors (dir: string): string[] {
  return dir === '/' ? ['/'] : [dir, ...selfAndAncestors(path.dirname(dir))]
}

/** The sandbox's PATH directories and their parents: covering one would take the tools' programs away. */
const PROGRAM_DIRS = new Set(SAFE_PATH.split(':').flatMap(selfAndAncestors))

/** The root, anything directly under it (/etc, /usr, /tmp …) and the PATH directories: needed whole by tools. */
function neededWhole (dir: string): boolean {
  return dir === '/' || path.dirname(dir) === '/' || PROGRAM_DIRS.has(dir)
}

/**
 * The real paths that hide `masks` (directories and files hidden themselves:
 * /root, /etc/shadow, the workspaces roots) and `secrets` (files the service
 * reads, hidden with every link of their chains and the directories that
 * hold them). Read from the filesystem now: call again to see changes.
 */
export function findHiddenPaths (masks: string[], secrets: string[]): HiddenPaths {
  const dirs = new Set<string>()
  const files = new Set<string>()
  const hideEnd = (end: Chain['end']) => {
    if (end) (end.isDirectory ? dirs : files).add(end.path)
  }
  for (const mask of masks) hideEnd(followChain(mask).end)
  for (const secret of secrets) {
    const { holders, end } = followChain(secret)
    for (const dir of holders) if (!neededWhole(dir)) dirs.add(dir)
    hideEnd(end)
  }
  const outermost = [...dirs].filter((dir) => ![...dirs].some((other) => other !== dir && isInside(other, dir)))
  return { dirs: outermost, files: [...files].filter((file) => !outermost.some((dir) => isInside(dir, file))) }
}
