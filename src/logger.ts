/**
 * The service's pino logger: JSON lines (pretty only on a terminal), with
 * every place a secret could appear redacted — bearer tokens in headers,
 * configured tokens, MCP servers' and channels' environments and webhook URLs.
 */
import { type DestinationStream, type Logger, pino } from 'pino'
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
 * Log lines are buffered and written a few kilobytes at a time, off the event
 * loop: one write per line cost each tool call more than its own work. A
 * line waits at most LOG_FLUSH_MS; at exit pino writes what is left. Should
 * stdout stop taking lines (a stalled log pipe), at most LOG_MAX_UNWRITTEN
 * bytes wait and later lines are dropped, rather than memory growing.
 */
const LOG_BUFFER_BYTES = 4096
const LOG_FLUSH_MS = 200
const LOG_MAX_UNWRITTEN = 16 * 1024 * 1024

/** The logger for `config`; `destination` (tests) replaces stdout. */
export function createLogger (config: Config, options: { destination?: DestinationStream, pretty?: boolean } = {}): Logger {
  const base = { level: config.logging.level, redact: { paths: REDACT_PATHS, censor: REDACTED } }
  if (options.destination) return pino(base, options.destination)
  if (options.pretty ?? process.stdout.isTTY) return pino({ ...base, transport: { target: 'pino-pretty', options: { colorize: true } } })
  return pino(base, pino.destination({ dest: 1, sync: false, minLength: LOG_BUFFER_BYTES, maxLength: LOG_MAX_UNWRITTEN, periodicFlush: LOG_FLUSH_MS }))
}
