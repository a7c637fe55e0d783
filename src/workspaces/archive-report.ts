/** What an archive upload did: what it extracted and what it left out (archive-extract.ts, archive-move.ts). */
export interface ExtractReport {
  files: number
  directories: number
  symlinks: number
  /** The first SKIPPED_LISTED entries skipped, with why. */
  skipped: Array<{ path: string, reason: string }>
  /** Every entry skipped. */
  skipped_count: number
}

/** How many skipped entries an upload's answer lists (a hostile archive may skip thousands). */
const SKIPPED_LISTED = 100

/** The longest entry path an answer shows whole: an archive's path may be a megabyte, which compresses to nothing. */
const SHOWN_PATH_CHARS = 512

/** Notes an entry left out of the workspace. */
export function skip (report: ExtractReport, entryPath: string, reason: string): void {
  report.skipped_count++
  // Cut between the halves of a surrogate pair, the half left is shown as U+FFFD.
  const shown = entryPath.length <= SHOWN_PATH_CHARS ? entryPath : `${entryPath.slice(0, SHOWN_PATH_CHARS).toWellFormed()}…`
  if (report.skipped.length < SKIPPED_LISTED) report.skipped.push({ path: shown, reason })
}
