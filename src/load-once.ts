/**
 * Something loaded by its first use, once: a module imported lazily (so
 * that start-up does not pay for it), or what is built from one. A load that
 * fails is forgotten and tried again by the next use: a module that could
 * not be read for want of a descriptor (EMFILE) loads once some are free,
 * where a kept rejection would fail every later use while the service runs.
 */
export interface LoadedOnce<T> {
  /** The value, loading it on the first use (or the first after a failed load). */
  (): Promise<T>
  /** The value, if a load has begun (and not failed): undefined when none has, or when the load under way fails. For what must close it. */
  readonly begun: Promise<T | undefined> | undefined
}

export function loadOnce<T> (load: () => Promise<T>): LoadedOnce<T> {
  let loading: Promise<T> | undefined
  const get = (): Promise<T> => {
    loading ??= load().catch((error: unknown) => {
      loading = undefined
      throw error
    })
    return loading
  }
  return Object.defineProperty(get, 'begun', { get: () => loading?.catch(() => undefined) }) as LoadedOnce<T>
}
