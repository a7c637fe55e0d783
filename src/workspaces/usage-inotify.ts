/**
 * The inotify watches of this process, shared by every workspace's
 * WatchedTree (usage-watch.ts): how many there may be, how many there are,
 * and how many events they delivered.
 *
 * Node's fs.watch sets one inotify watch per directory, and libuv keeps one
 * inotify descriptor per event loop, whose events the kernel queues in order
 * up to `max_queued_events`. libuv drops the event that tells the queue
 * overflowed, so an overflow is inferred from the count of events instead.
 */
import { type FSWatcher, readFileSync, watch } from 'node:fs'

/** Directories this instance watches at most, over all workspaces; a workspace that would go over is counted by full scans. (An object so that a test can lower it.) */
export const watchLimit = { directories: 65_536 }

let watchedDirectories = 0
/** Events delivered to the usage watches (the directories' and the markers'), for the overflow inference. */
let eventsSeen = 0
const queueLimit = readQueueLimit()

function readQueueLimit (): number {
  try {
    return Number(readFileSync('/proc/sys/fs/inotify/max_queued_events', 'utf8').trim()) || 16_384
  } catch {
    return 16_384
  }
}

/** Directories watched now by this instance (for tests and measurements). */
export function watchedDirectoryCount (): number {
  return watchedDirectories
}

/** The events delivered so far: a change's are counted from here. */
export function eventCount (): number {
  return eventsSeen
}

/** An event arrived on a usage watch. */
export function countEvent (): void {
  eventsSeen++
}

/** Events since `since` that may mean the queue overflowed: half the kernel's queue, as some queued events are never counted (those of watches removed meanwhile). */
export function mayHaveOverflowed (since: number): boolean {
  return eventsSeen - since >= queueLimit / 2
}

/**
 * Watches one directory (a path, e.g. a descriptor's `/proc/self/fd/N`),
 * calling `onEvent` for each of its events. Undefined when `watchLimit` is
 * reached or the kernel refuses (ENOSPC: its max_user_watches); `onError`
 * is called when a watch fails later. Either way the events can no longer
 * tell every change.
 */
export function watchDirectory (dir: string, onEvent: () => void, onError: () => void): FSWatcher | undefined {
  if (watchedDirectories >= watchLimit.directories) return undefined
  let watcher: FSWatcher
  try {
    watcher = watch(dir, { persistent: false }, () => {
      eventsSeen++
      onEvent()
    })
  } catch {
    return undefined
  }
  watchedDirectories++
  watcher.on('error', onError)
  return watcher
}

/** Closes a watch that `watchDirectory` set. */
export function unwatchDirectory (watcher: FSWatcher): void {
  watcher.close()
  watchedDirectories--
}
