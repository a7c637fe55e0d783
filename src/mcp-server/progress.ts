/**
 * Progress for an MCP tools/call that asked for it (`_meta.progressToken`):
 * a notification every PROGRESS_INTERVAL_MS while the call runs, so that a
 * client that resets its timeout on progress waits for long calls. The
 * progress is the elapsed milliseconds: every tool has it, and it grows.
 */
import type { ProgressToken, ServerNotification } from '@modelcontextprotocol/sdk/types.js'

/** Well inside the contract's "at least every 5 s", timers being late under load. */
export const PROGRESS_INTERVAL_MS = 2000

/** What the SDK gives a request handler that progress needs. */
interface HandlerExtra {
  signal: AbortSignal
  sendNotification: (notification: ServerNotification) => Promise<void>
}

const NOTHING_TO_STOP = (): void => {}

/**
 * Starts the notifications for `token` (none without one); the function
 * returned stops them, and must be called before the call's result is
 * sent. A cancelled call stops them at once.
 */
export function reportProgress (token: ProgressToken | undefined, extra: HandlerExtra): () => void {
  if (token === undefined) return NOTHING_TO_STOP
  const started = performance.now()
  const timer = setInterval(() => {
    const elapsed = Math.round(performance.now() - started)
    const params = { progressToken: token, progress: elapsed, message: `running for ${Math.round(elapsed / 1000)} s` }
    // A client gone mid-call is the transport's business; the call ends by its signal.
    extra.sendNotification({ method: 'notifications/progress', params }).catch(() => {})
  }, PROGRESS_INTERVAL_MS)
  const stop = (): void => {
    clearInterval(timer)
    extra.signal.removeEventListener('abort', stop)
  }
  extra.signal.addEventListener('abort', stop, { once: true })
  return stop
}
