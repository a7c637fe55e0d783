/**
 * A removal run where, if it ever climbed out of its tree, it could harm
 * nothing but the test's own directories: a child process in bubblewrap
 * with the whole filesystem read-only except `writable`. A test that races
 * a removal against a process moving directories must not be able to empty
 * the machine when the code under test is wrong.
 *
 * It also runs without capabilities: root then meets file permissions as
 * the service's own user does in production (a directory a command made
 * unreadable is unreadable to the removal too).
 *
 * As a script (`node confined-removal.ts <dir>`): removes <dir>; exits 0, or
 * 1 with the error on stderr.
 */
import { spawn } from 'node:child_process'
import { fileURLToPath } from 'node:url'
import { removeTree } from '../../src/workspaces/remove-tree.ts'

const SCRIPT = fileURLToPath(import.meta.url)

/** Removes `target` in a confined child process; true when it was removed. */
export async function removeTreeConfined (target: string, writable: string[]): Promise<boolean> {
  const binds = writable.flatMap((dir) => ['--bind', dir, dir])
  const args = ['--ro-bind', '/', '/', '--dev', '/dev', '--unshare-pid', '--proc', '/proc', ...binds, '--cap-drop', 'ALL', '--die-with-parent', '--', process.execPath, SCRIPT, target]
  const child = spawn('bwrap', args, { stdio: ['ignore', 'ignore', 'pipe'] })
  let stderr = ''
  child.stderr.on('data', (chunk: Buffer) => { stderr += chunk.toString() })
  const code = await new Promise<number | null>((resolve, reject) => child.once('exit', resolve).once('error', reject))
  if (code !== 0 && code !== 1) throw new Error(`the confined removal could not run (${code}): ${stderr}`)
  return code === 0
}

if (process.argv[1] === SCRIPT) {
  removeTree(process.argv[2] as string).then(() => process.exit(0), (error: unknown) => {
    process.stderr.write(`${String(error)}\n`)
    process.exit(1)
  })
}
