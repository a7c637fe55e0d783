/**
 * Glob matching of tool names (`read_*`, `fx__*`): `*` is any run of
 * characters (none included), `?` is one character, and every other
 * character stands for itself.
 *
 * A caller's `allowed` filter is one of these lists, so matching must cost
 * no more than the text it is given: a glob library compiles patterns into
 * backtracking regular expressions, where a short crafted pattern (`*?*?*?…`)
 * held the event loop for seconds per tool name. Here a glob is cut at its
 * stars and each piece is found at its leftmost place after the one before
 * (which is enough for `*`): at most the name's length times the glob's.
 */
import { ToolError } from '../errors.ts'

export type NameMatcher = (name: string) => boolean

/** The longest `allowed` filter a request may give. */
export const MAX_GLOB_LIST_CHARS = 1024

/** A glob cut at its stars: the parts between them, and whether it begins and ends with one. */
interface Pieces {
  parts: string[]
  open: boolean
  closed: boolean
}

function piecesOf (glob: string): Pieces {
  const parts = glob.split('*')
  return { parts: parts.filter((part) => part !== ''), open: !glob.startsWith('*'), closed: !glob.endsWith('*') }
}

/** Whether `part` (where `?` is any character) matches `name` at `at`. */
function partAt (part: string, name: string, at: number): boolean {
  if (at + part.length > name.length) return false
  for (let i = 0; i < part.length; i++) {
    if (part[i] !== '?' && part[i] !== name[at + i]) return false
  }
  return true
}

/** The first place at or after `from` where `part` matches, or -1. */
function findPart (part: string, name: string, from: number): number {
  if (!part.includes('?')) return name.indexOf(part, from)
  for (let at = from; at + part.length <= name.length; at++) if (partAt(part, name, at)) return at
  return -1
}

function matches ({ parts, open, closed }: Pieces, glob: string, name: string): boolean {
  if (parts.length === 0) return open ? name === '' : true
  if (!glob.includes('*')) return name.length === glob.length && partAt(glob, name, 0)
  let start = 0
  let first = 0
  let last = parts.length
  // A glob that begins without a star is anchored at the name's start, one that ends without one at its end.
  if (open) {
    if (!partAt(parts[0] as string, name, 0)) return false
    start = (parts[0] as string).length
    first = 1
  }
  let end = name.length
  if (closed) {
    const tail = parts[parts.length - 1] as string
    end = name.length - tail.length
    if (end < start || !partAt(tail, name, end)) return false
    last = parts.length - 1
  }
  for (let i = first; i < last; i++) {
    const part = parts[i] as string
    const at = findPart(part, name, start)
    if (at === -1 || at + part.length > end) return false
    start = at + part.length
  }
  return true
}

/** A matcher that accepts a name matching any of the globs. An empty list matches nothing. */
export function globMatcher (globs: readonly string[]): NameMatcher {
  const compiled = [...new Set(globs)].map((glob) => ({ glob, pieces: piecesOf(glob) }))
  return (name) => compiled.some(({ glob, pieces }) => matches(pieces, glob, name))
}

/** Splits `read_*,write_file` into its globs, dropping blanks; BadRequest past MAX_GLOB_LIST_CHARS. */
export function parseGlobList (value: string): string[] {
  if (value.length > MAX_GLOB_LIST_CHARS) throw new ToolError('BadRequest', `allowed is longer than ${MAX_GLOB_LIST_CHARS} characters`)
  return value.split(',').map((s) => s.trim()).filter(Boolean)
}

/** The catalog filter of an `allowed` parameter (REST's and /mcp's); none when it is absent or names no glob (`allowed=`). */
export function allowedFilter (value: string | undefined): NameMatcher | undefined {
  const globs = value === undefined ? [] : parseGlobList(value)
  return globs.length === 0 ? undefined : globMatcher(globs)
}
