/**
 * Reading a record that may not be there. Only a sure absence (ENOENT,
 * ENOTDIR; EISDIR for a file) is "none": a read that failed otherwise (no
 * descriptor free, EIO on a network volume) is thrown, never taken for an
 * absence, which would call a workspace or process that exists gone (404)
 * and let another take its id or its place.
 */
import { readdir, readFile } from 'node:fs/promises'

const ABSENT = new Set(['ENOENT', 'ENOTDIR', 'EISDIR'])

/** A rejection handler: `none` for a sure absence, the error thrown again otherwise. */
export function absentOrThrow<T> (none: T): (error: NodeJS.ErrnoException) => T {
  return (error) => {
    if (error.code !== undefined && ABSENT.has(error.code)) return none
    throw error
  }
}

/** The text of `file`, or null when it is not there. */
export function readTextIfPresent (file: string): Promise<string | null> {
  return readFile(file, 'utf8').catch(absentOrThrow(null))
}

/** The names in `dir`, or none when it is not there. */
export function listIfPresent (dir: string): Promise<string[]> {
  return readdir(dir).catch(absentOrThrow([] as string[]))
}
