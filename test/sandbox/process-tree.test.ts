/**
 * Processes found at one moment and signalled later: only while each is
 * still the process found (its pid and start time), never another process
 * that took the pid since. Real child processes.
 */
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { describe, expect, it } from 'vitest'
import { foundDescendantsOf, foundProcess, signalFound } from '../../src/sandbox/process-tree.ts'

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

describe('processes found, then signalled', () => {
  it('finds what a process started, and signals it while it is the one found', async () => {
    const shell = spawn('sh', ['-c', 'sleep 30 & echo $!; wait'], { stdio: ['ignore', 'pipe', 'ignore'] })
    const [line] = await once(shell.stdout, 'data') as [Buffer]
    const sleeper = Number(line.toString().trim())
    const root = foundProcess(shell.pid as number)
    if (root === undefined) throw new Error('the shell is gone')
    const found = foundDescendantsOf(root)
    expect(found.map((each) => each.pid)).toContain(sleeper)
    // Another start time is another process: nothing is found under it, nothing of it is signalled.
    expect(foundDescendantsOf({ ...root, startedAt: '1' })).toEqual([])
    signalFound(found.map((each) => ({ ...each, startedAt: '1' })), 'SIGKILL')
    expect(alive(sleeper)).toBe(true)
    signalFound(found, 'SIGKILL')
    await once(shell, 'exit')
    expect(alive(sleeper)).toBe(false)
  })
})

describe('a process that has ended', () => {
  it('is not found while it waits to be reaped (a zombie), as it is not once gone', async () => {
    // `sleep 0.1` is left to a parent that never waits for it (sh replaced by a long sleep): it stays a zombie.
    const parent = spawn('/bin/sh', ['-c', 'sleep 0.1 & echo $!; exec sleep 5'], { stdio: ['ignore', 'pipe', 'ignore'] })
    const [line] = await once(parent.stdout, 'data') as [Buffer]
    const zombie = Number(line.toString().trim())
    try {
      expect(foundProcess(zombie)).toBeDefined()
      for (let waited = 0; foundProcess(zombie) !== undefined && waited < 5000; waited += 20) await new Promise((resolve) => setTimeout(resolve, 20))
      expect(foundProcess(zombie)).toBeUndefined()
      // Still in the process table, as a zombie.
      expect(alive(zombie)).toBe(true)
    } finally {
      parent.kill('SIGKILL')
    }
  })
})
