/** Glob matching of tool names (`read_*`, `fx__*`), compiled once per pattern list. */
import picomatch from 'picomatch'

export type NameMatcher = (name: string) => boolean

const cache = new Map<string, NameMatcher>()

/** A matcher that accepts a name matching any of the globs. An empty list matches nothing. */
export function globMatcher (globs: readonly string[]): NameMatcher {
  const key = globs.join('\u0000')
  let matcher = cache.get(key)
  if (!matcher) {
    const compiled = globs.length === 0 ? () => false : picomatch([...globs], { dot: true, nonegate: false })
    matcher = (name: string) => compiled(name)
    if (cache.size < 1000) cache.set(key, matcher)
  }
  return matcher
}

/** Splits `read_*,write_file` into its globs, dropping blanks. */
export function parseGlobList (value: string): string[] {
  return value.split(',').map((s) => s.trim()).filter(Boolean)
}
