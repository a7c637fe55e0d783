/**
 * The service's pino logger: JSON lines (pretty only on a terminal), with
 * every place a secret could appear redacted — bearer tokens in headers,
 * configured tokens, MCP servers' and channels' environments and webhook URLs —
 * and errors reduced to what says what went wrong.
 */
import { createRequire } from 'node:module'
import { type DestinationStream, type Logger, pino } from 'pino'
import type { PrettyOptions } from 'pino-pretty'
import type { Config } from './config.ts'

export const REDACTED = '[redacted]'

export const REDACT_PATHS = [
  'req.headers.authorization',
  'headers.authorization',
  'authorization',
  '*.authorization',
  'token',
  '*.token',
  'auth.tokens',
  '*.tokens',
  'env',
  '*.env',
  'webhook',
  '*.webhook',
]

/**
 * What of an error a log line keeps: its kind, its message and stack (with
 * its causes'), and its codes. Nothing else: a ToolError's `extra` is the
 * caller's (a timed-out command's output), and other errors carry what they
 * were given (a URL, with its key in the query).
 */
const LOGGED_ERROR_FIELDS = ['type', 'message', 'stack', 'code', 'errno', 'syscall', 'statusCode']

function loggedError (error: unknown): unknown {
  const serialized = pino.stdSerializers.err(error as Error) as unknown as Record<string, unknown>
  if (serialized === error) return error
  const kept = Object.fromEntries(LOGGED_ERROR_FIELDS.filter((key) => serialized[key] !== undefined).map((key) => [key, serialized[key]]))
  const aggregated = serialized['aggregateErrors']
  return Array.isArray(aggregated) ? { ...kept, aggregateErrors: aggregated.map((inner: { raw?: unknown }) => loggedError(inner.raw)) } : kept
}

const LOG_BATCH_BYTES = 4096
const LOG_FLUSH_MS = 200
const LOG_MAX_WAITING_BYTES = 16 * 1024 * 1024
/** How long the exit waits for an output that is full (a pipe nobody reads) to take what is waiting. */
const LOG_EXIT_WAIT_MS = 1000

/**
 * Where log lines go: asynchronous and batched, so that a line per call does
 * not cost a write per call. A lone line leaves within the flush interval,
 * everything waiting at exit (pino flushes its destinations then), and a
 * stdout nobody reads holds a bounded backlog (past it, lines are dropped).
 */
export function logDestination (fd: number, options: { maxWaitingBytes?: number } = {}) {
  /** While the exit flushes: how long a full output is waited for. */
  let exitDeadline: number | undefined
  const destination = pino.destination({
    dest: fd,
    sync: false,
    minLength: LOG_BATCH_BYTES,
    periodicFlush: LOG_FLUSH_MS,
    maxLength: options.maxWaitingBytes ?? LOG_MAX_WAITING_BYTES,
    // A full output is retried for as long as the service runs (it may drain), but at exit only until the deadline.
    retryEAGAIN: () => exitDeadline === undefined || Date.now() < exitDeadline,
  })
  // The flush at exit (pino's, synchronous) throws when the output fails or stays full: the exit
  // goes on without what was waiting, rather than not at all.
  const flushSync = destination.flushSync.bind(destination)
  destination.flushSync = () => {
    exitDeadline = Date.now() + LOG_EXIT_WAIT_MS
    try {
      flushSync()
    } catch {
    } finally {
      exitDeadline = undefined
    }
  }
  // A destination that fails (a full disk, a closed descriptor) is cut off: its error would
  // otherwise end the service. Lines are dropped from then on.
  destination.once('error', (error: NodeJS.ErrnoException) => {
    process.stderr.write(`toolport: writing log lines failed (${error.code ?? error.message}); further log lines are dropped\n`)
    Object.assign(destination, {
      write: () => true,
      flush: (done?: (error?: Error) => void) => { done?.() },
      flushSync: () => {},
      end: () => {},
    })
    destination.on('error', () => {})
  })
  return destination
}

/**
 * Readable lines for a person at a terminal: pino-pretty as a stream in this
 * thread, not as a pino transport (a worker thread started from a file in
 * pino's folder), so that pino itself needs no file beside its code and is
 * bundled. Loaded only when asked for; the bundle leaves it in node_modules.
 */
function prettyStdout (): DestinationStream {
  const pretty = createRequire(import.meta.url)('pino-pretty') as (options: PrettyOptions) => DestinationStream
  return pretty({ colorize: true })
}

/** The logger for `config`; `destination` (tests) replaces stdout. */
export function createLogger (config: Config, options: { destination?: DestinationStream, pretty?: boolean } = {}): Logger {
  const base = { level: config.logging.level, redact: { paths: REDACT_PATHS, censor: REDACTED }, serializers: { err: loggedError } }
  if (options.destination) return pino(base, options.destination)
  if (options.pretty ?? process.stdout.isTTY) return pino(base, prettyStdout())
  return pino(base, logDestination(1))
}
