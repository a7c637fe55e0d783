/** Counting a directory tree's regular files and bytes, without following symlinks. */
import { lstat, readdir } from 'node:fs/promises'
import path from 'node:path'

const MAX_ENTRIES = 1_000_000

export async function directorySize (root: string): Promise<{ files: number, bytes: number }> {
  let files = 0
  let bytes = 0
  let seen = 0
  const pending = [root]
  while (pending.length > 0 && seen < MAX_ENTRIES) {
    const dir = pending.pop() as string
    const entries = await readdir(dir, { withFileTypes: true }).catch(() => [])
    for (const entry of entries) {
      seen++
      const full = path.join(dir, entry.name)
      if (entry.isDirectory()) pending.push(full)
      else if (entry.isFile()) {
        files++
        bytes += (await lstat(full).catch(() => ({ size: 0 }))).size
      }
    }
  }
  return { files, bytes }
}
