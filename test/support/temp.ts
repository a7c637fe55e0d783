/** Temporary directories for tests, removed after each test. */
import { mkdtemp, rm } from 'node:fs/promises'
import os from 'node:os'
import path from 'node:path'
import { afterEach } from 'vitest'

const cleanups: Array<() => Promise<void>> = []

afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup()
})

/** Runs `cleanup` after the current test (in reverse order of registration). */
export function onCleanup (cleanup: () => Promise<void>): void {
  cleanups.push(cleanup)
}

/** A fresh temporary directory, removed after the test. */
export async function tempDir (prefix = 'toolport-test-'): Promise<string> {
  const dir = await mkdtemp(path.join(os.tmpdir(), prefix))
  onCleanup(() => rm(dir, { recursive: true, force: true }))
  return dir
}
