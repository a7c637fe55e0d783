/**
 * The service's pino logger: JSON lines (pretty only on a terminal), with
 * every place a secret could appear redacted — bearer tokens in headers,
 * configured tokens, MCP servers' and channels' environments and webhook URLs.
 */
import { type DestinationStream, type Logger, pino } from 'pino'
import type { Config } from './config.ts'
import { LogDestination } from './log-destination.ts'

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

/** The logger for `config`; `destination` (tests) replaces stdout. */
export function createLogger (config: Config, options: { destination?: DestinationStream, pretty?: boolean } = {}): Logger {
  const base = { level: config.logging.level, redact: { paths: REDACT_PATHS, censor: REDACTED } }
  if (options.destination) return pino(base, options.destination)
  if (options.pretty ?? process.stdout.isTTY) return pino({ ...base, transport: { target: 'pino-pretty', options: { colorize: true } } })
  // Written in batches off the event loop (log-destination.ts): a line per call must not cost a write per call.
  return pino(base, new LogDestination({ fd: 1 }))
}
