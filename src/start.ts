/**
 * Starting the service: config → buildApp → listen → graceful shutdown.
 * server.ts (the entry) loads this module once the Node.js version is known
 * to do. The only module that reads process.env or argv.
 */
import { parseArgs } from 'node:util'
import closeWithGrace from 'close-with-grace'
import type { Logger } from 'pino'
import { buildApp } from './app.ts'
import { allTokens, authIsOn, type Config, ConfigError, defaultConfig, loadConfigFile, parseConfig, readTokensFile } from './config.ts'
import { createLogger } from './logger.ts'
import { closeInheritedDescriptors } from './sandbox/inherited-descriptors.ts'
import { tracingOptionsFrom } from './telemetry/options.ts'
import type { Tracing, TracingOptions } from './telemetry/tracing.ts'

const LOOPBACK = new Set(['127.0.0.1', '::1', 'localhost'])
/** How long cancelled calls get to unwind (kill their processes, remove workspaces) at shutdown. */
const CANCEL_SETTLE_MS = 3000
/** How long the exit waits for buffered log lines to be written. */
const LOG_FLUSH_WAIT_MS = 2000
/** How long the exit waits for the last spans to reach the collector. */
const TRACE_FLUSH_WAIT_MS = 3000

function fail (message: string): never {
  process.stderr.write(`toolport: ${message}\n`)
  process.exit(1)
}

/** Reads the config file (if any) and applies HOST and PORT from the environment. */
async function readConfig (): Promise<{ config: Config, file: string | undefined, tracing: TracingOptions | undefined }> {
  const { values } = parseArgs({ options: { config: { type: 'string', short: 'c' }, help: { type: 'boolean', short: 'h' } }, strict: true })
  if (values.help) {
    process.stdout.write([
      'usage: toolport [--config FILE]',
      '  env: TOOLPORT_CONFIG=FILE, HOST (default 127.0.0.1), PORT (default 8080), TOOLPORT_ADVERTISE_URL,',
      '       TOOLPORT_TOKENS_FILE, OTEL_EXPORTER_OTLP_ENDPOINT and the other OTEL_* variables (tracing: docs/DEPLOY.md)',
      '',
    ].join('\n'))
    process.exit(0)
  }
  const file = values.config ?? process.env['TOOLPORT_CONFIG'] ?? undefined
  const config = file ? await loadConfigFile(file) : defaultConfig()
  if (process.env['TOOLPORT_TOKENS_FILE']) config.auth.tokens_file = process.env['TOOLPORT_TOKENS_FILE']
  // Checked now, to end the start with its one line; the auth plugin reads it again, and whenever it changes.
  if (config.auth.tokens_file !== undefined) allTokens(config.auth, await readTokensFile(config.auth.tokens_file))
  if (process.env['HOST']) config.server.host = process.env['HOST']
  if (process.env['PORT']) {
    // Decimal digits only: Number() would take `0x50` for 80 and `1e3` for 1000.
    const port = /^\d{1,5}$/.test(process.env['PORT']) ? Number(process.env['PORT']) : Number.NaN
    if (!Number.isInteger(port) || port < 0 || port > 65535) throw new ConfigError(`PORT: must be a port number, got ${JSON.stringify(process.env['PORT'])}`)
    config.server.port = port
  }
  // Kubernetes sets it from the pod's IP (the Downward API), which no config file can know.
  const advertised = process.env['TOOLPORT_ADVERTISE_URL']
  if (advertised) {
    try {
      config.server.advertise_url = parseConfig({ server: { advertise_url: advertised } }).server.advertise_url
    } catch {
      throw new ConfigError(`TOOLPORT_ADVERTISE_URL: must be this instance's http(s) URL without a path, got ${JSON.stringify(advertised)}`)
    }
  }
  return { config, file, tracing: tracingOptionsFrom(process.env) }
}

/** The OpenTelemetry SDK, loaded only when tracing is on: without it, the service runs none of its code. */
async function startTracing (options: TracingOptions | undefined, log: Logger): Promise<Tracing | undefined> {
  if (options === undefined) return undefined
  const { startTracing } = await import('./telemetry/otel.ts')
  log.info({ protocol: options.protocol }, 'tracing: exporting spans over OTLP/HTTP')
  return startTracing(options, log)
}

/** Sends what spans are buffered; a collector that does not answer does not hold the exit. */
async function stopTracing (tracing: Tracing | undefined): Promise<void> {
  if (tracing === undefined) return
  await Promise.race([
    tracing.shutdown().catch(() => {}),
    new Promise<void>((resolve) => setTimeout(resolve, TRACE_FLUSH_WAIT_MS).unref()),
  ])
}

/** Without tokens, only loopback is safe to listen on — unless the operator says otherwise. */
function checkExposure (config: Config, log: Logger): void {
  if (authIsOn(config.auth)) return
  if (!LOOPBACK.has(config.server.host) && !config.auth.disabled) {
    throw new ConfigError(`auth: no tokens are configured, so refusing to listen on ${config.server.host}; add auth.tokens or set auth.disabled: true`)
  }
  log.warn('auth is off: no tokens are configured')
}

async function main (): Promise<void> {
  let loaded
  try {
    loaded = await readConfig()
  } catch (error) {
    fail(error instanceof ConfigError || error instanceof TypeError ? error.message : String(error))
  }
  const { config, file } = loaded
  const log = createLogger(config)
  const inherited = closeInheritedDescriptors()
  if (inherited > 0) log.warn({ descriptors: inherited }, 'closed descriptors inherited from the parent process: every command started would have had them')
  try {
    checkExposure(config, log)
  } catch (error) {
    fail((error as Error).message)
  }
  const secrets = [file, config.auth.tokens_file].filter((p): p is string => p !== undefined)
  const tracing = await startTracing(loaded.tracing, log)
  // A sandbox the config requires but that does not work ends the service (it is chosen after listening, app.ts).
  const app = await buildApp(config, { logger: log, hidePaths: secrets, tracing, startFailed: (error) => { fail(error.message) } })
    .catch((error: unknown) => {
      // A workspace root that cannot be made or used (EACCES, EROFS, ENOTDIR) is the config's to fix: one line, no stack.
      if (error instanceof ConfigError) return fail(error.message)
      const { code, path } = error as NodeJS.ErrnoException
      if (code === undefined || path === undefined) throw error
      return fail(`cannot prepare ${path} (workspaces.root or workspaces.ephemeral_root): ${code}`)
    })
  closeWithGrace({ delay: config.server.drain_timeout_ms + CANCEL_SETTLE_MS + 5000, logger: false }, async ({ signal, err }) => {
    if (err) log.error({ err }, 'shutting down after an error')
    else log.info({ signal }, 'shutting down: draining in-flight calls')
    await app.runtime.drain(config.server.drain_timeout_ms)
    // Calls outliving the drain are cancelled, then given a moment to answer and
    // remove their workspaces before the connections and sources close.
    app.runtime.cancelRunning()
    await app.runtime.drain(CANCEL_SETTLE_MS)
    await app.close()
    await stopTracing(tracing)
    // What is buffered goes out first, so that 'stopped' is the last line (pino writes it at exit);
    // a log output that cannot take it (a stalled pipe) does not hold the exit.
    await new Promise<void>((resolve) => {
      log.flush(() => { resolve() })
      setTimeout(resolve, LOG_FLUSH_WAIT_MS).unref()
    })
    log.info('stopped')
  })
  // An address that cannot be listened on (in use, not this machine's, a privileged port, a name
  // that does not resolve) is the config's to fix: one line.
  await app.listen({ host: config.server.host, port: config.server.port }).catch((error: NodeJS.ErrnoException) => {
    if (error.code === undefined || (error.syscall !== 'listen' && error.syscall !== 'getaddrinfo')) throw error
    fail(`cannot listen on ${config.server.host} port ${config.server.port}: ${error.code}`)
  })
  // The start-up lines go out now, not with the first periodic flush.
  log.flush()
}

await main()
