/**
 * request.log, made on first use. Fastify gives every request a child
 * logger bound to its id, and making one (the bindings go through pino's
 * redaction pass) cost a small tool call more than all of its own logging.
 * Most requests never log through it: a call's completion line comes from
 * the execution path. A request that does log gets the very child Fastify
 * would have made.
 */
import type { FastifyBaseLogger } from 'fastify'
import type { Bindings, ChildLoggerOptions, LevelWithSilentOrString } from 'pino'

export class LazyChildLogger implements FastifyBaseLogger {
  readonly #parent: FastifyBaseLogger
  readonly #bindings: Bindings
  readonly #options: ChildLoggerOptions
  #made: FastifyBaseLogger | undefined

  constructor (parent: FastifyBaseLogger, bindings: Bindings, options: ChildLoggerOptions) {
    this.#parent = parent
    this.#bindings = bindings
    this.#options = options
  }

  get #logger (): FastifyBaseLogger {
    this.#made ??= this.#parent.child(this.#bindings, this.#options)
    return this.#made
  }

  get level (): LevelWithSilentOrString { return this.#logger.level }
  set level (level: LevelWithSilentOrString) { this.#logger.level = level }

  fatal (...args: unknown[]): void { this.#write('fatal', args) }
  error (...args: unknown[]): void { this.#write('error', args) }
  warn (...args: unknown[]): void { this.#write('warn', args) }
  info (...args: unknown[]): void { this.#write('info', args) }
  debug (...args: unknown[]): void { this.#write('debug', args) }
  trace (...args: unknown[]): void { this.#write('trace', args) }
  silent (): void {}

  child (bindings: Bindings, options?: ChildLoggerOptions): FastifyBaseLogger {
    return this.#logger.child(bindings, options)
  }

  #write (level: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace', args: unknown[]): void {
    const logger = this.#logger
    ;(logger[level] as (...args: unknown[]) => void).apply(logger, args)
  }
}
