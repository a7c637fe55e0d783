/** An in-process mutex per key: tasks on one key run one after another. */

const queues = new Map<string, Promise<unknown>>()

/** Runs `task` after every earlier task queued on the same key. */
export async function runExclusively<T> (key: string, task: () => Promise<T>): Promise<T> {
  const previous = queues.get(key) ?? Promise.resolve()
  const run = previous.then(task, task)
  const tail = run.catch(() => {})
  queues.set(key, tail)
  try {
    return await run
  } finally {
    if (queues.get(key) === tail) queues.delete(key)
  }
}
