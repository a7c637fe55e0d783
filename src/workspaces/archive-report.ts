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

/** Notes an entry left out of the workspace. */
export function skip (report: ExtractReport, entryPath: string, reason: string): void {
  report.skipped_count++
  if (report.skipped.length < SKIPPED_LISTED) report.skipped.push({ path: entryPath, reason })
}
