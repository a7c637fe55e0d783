/** Shell commands that run until the test lets them end: a call that holds its slot exactly as long as the test needs. */
import { writeFile } from 'node:fs/promises'
import path from 'node:path'
import { processesWith } from './processes.ts'
import { tempDir } from './temp.ts'

export interface HeldCommand {
  /** A /bin/sh command that waits for its release, then prints `text`. */
  command: string
  /** Whether the command's process runs (its release file's path, unique, marks it in the process table). */
  running: () => boolean
  /** Lets the command end. */
  release: () => Promise<void>
}

/** A command held until `release()`, then printing `text`. */
export async function heldCommand (text: string): Promise<HeldCommand> {
  const file = path.join(await tempDir('toolport-held-'), 'release')
  return {
    command: `until [ -e '${file}' ]; do sleep 0.05; done; echo ${text}`,
    running: () => processesWith(file).length > 0,
    release: () => writeFile(file, ''),
  }
}
