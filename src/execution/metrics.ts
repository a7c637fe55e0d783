/**
 * Prometheus metrics (prom-client), one registry per app so tests can build
 * many apps side by side. prom-client is loaded by the first scrape or the
 * first call, not at start-up; what is recorded before that is kept and
 * applied once it is loaded.
 */
import { setTimeout as sleep } from 'node:timers/promises'
import type { Counter, Gauge, Histogram, Registry } from 'prom-client'
import { loadOnce } from '../load-once.ts'

type Labels<T extends string> = Partial<Record<T, string | number>>

export interface Metrics {
  registry: {
    /** The exposition text (loads prom-client if nothing has yet). */
    metrics: () => Promise<string>
    /** Its content type; read after `metrics()`. */
    readonly contentType: string
  }
  calls: { inc: (labels: Labels<'tool' | 'code'>) => void }
  duration: { observe: (labels: Labels<'tool' | 'code'>, seconds: number) => void }
  rejections: { inc: (labels: Labels<'limiter'>) => void }
  sandboxMode: { set: (labels: Labels<'mode'>, value: number) => void }
  mcpServerUp: { set: (labels: Labels<'server'>, value: number) => void }
}

/** What the gauges read when scraped. */
export interface MetricsSources {
  inFlight: () => number
  queued: () => number
}

interface Loaded {
  registry: Registry
  inFlight: Gauge
  queueDepth: Gauge
  calls: Counter<'tool' | 'code'>
  duration: Histogram<'tool' | 'code'>
  rejections: Counter<'limiter'>
  sandboxMode: Gauge<'mode'>
  mcpServerUp: Gauge<'server'>
}

/**
 * How often the event-loop delay is sampled (prom-client's default is every
 * 10 ms, which wakes an idle service a hundred times a second).
 */
const EVENT_LOOP_SAMPLE_MS = 100
/**
 * prom-client reports the event-loop delay as `Nan` (not a Prometheus value)
 * when its monitor has no sample since the last scrape, which resets it: a
 * scrape right after prom-client is loaded, or right after another scrape.
 * Such a scrape waits for a sample, at most this many sampling intervals.
 */
const SAMPLE_WAIT_ROUNDS = 5
const NO_SAMPLE_YET = / Nan$/m

async function load (sources: MetricsSources, defaultMetrics: boolean): Promise<Loaded> {
  const { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } = await import('prom-client')
  const registry = new Registry()
  if (defaultMetrics) collectDefaultMetrics({ register: registry, prefix: 'toolport_', eventLoopMonitoringPrecision: EVENT_LOOP_SAMPLE_MS })
  const registers = [registry]
  return {
    registry,
    inFlight: new Gauge({ name: 'toolport_calls_in_flight', help: 'Tool calls holding a limiter slot', registers, collect () { this.set(sources.inFlight()) } }),
    queueDepth: new Gauge({ name: 'toolport_limiter_queue_depth', help: 'Tool calls waiting for a limiter slot', registers, collect () { this.set(sources.queued()) } }),
    calls: new Counter({ name: 'toolport_tool_calls_total', help: 'Tool calls by tool and outcome code (ok, an error code, or cancelled: its caller left before the answer)', labelNames: ['tool', 'code'], registers }),
    duration: new Histogram({
      name: 'toolport_tool_call_duration_seconds',
      help: 'Tool call duration in seconds, by tool and outcome code',
      labelNames: ['tool', 'code'],
      buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300],
      registers,
    }),
    rejections: new Counter({ name: 'toolport_limiter_rejections_total', help: 'Calls refused by a limiter (queue full or wait timed out)', labelNames: ['limiter'], registers }),
    sandboxMode: new Gauge({ name: 'toolport_sandbox_mode', help: 'The sandbox mode in force (1 for the active mode)', labelNames: ['mode'], registers }),
    mcpServerUp: new Gauge({ name: 'toolport_mcp_server_up', help: 'Whether an upstream MCP server is connected (1) or not (0)', labelNames: ['server'], registers }),
  }
}

export function createMetrics (sources: MetricsSources, options: { defaultMetrics?: boolean } = {}): Metrics {
  let loaded: Loaded | undefined
  /** Counts and observations made before prom-client is loaded: the first of them starts loading it. */
  let early: Array<(metrics: Loaded) => void> = []
  /** Gauge values set before: only the last per gauge and labels matters, and setting one loads nothing. */
  const earlyGauges = new Map<string, (metrics: Loaded) => void>()

  const ensureLoaded = loadOnce(() => load(sources, options.defaultMetrics !== false).then((metrics) => {
    for (const apply of [...earlyGauges.values(), ...early]) apply(metrics)
    earlyGauges.clear()
    early = []
    loaded = metrics
    return metrics
  }))
  const recordEarly = (apply: (metrics: Loaded) => void): void => {
    early.push(apply)
    // A load that fails (no descriptor free) keeps what waits for it: the next count tries again.
    ensureLoaded().catch(() => {})
  }

  const scrape = async (): Promise<string> => {
    const metrics = await ensureLoaded()
    let text = await metrics.registry.metrics()
    for (let round = 0; round < SAMPLE_WAIT_ROUNDS && NO_SAMPLE_YET.test(text); round++) {
      await sleep(EVENT_LOOP_SAMPLE_MS * 1.5)
      text = await metrics.registry.metrics()
    }
    return text
  }
  // Scrapes that come together share one: each would reset the event-loop monitor the others wait on.
  let scraping: Promise<string> | undefined

  return {
    registry: {
      metrics: () => {
        scraping ??= scrape().finally(() => { scraping = undefined })
        return scraping
      },
      get contentType () {
        if (!loaded) throw new Error('metrics: contentType is known once metrics() has answered')
        return loaded.registry.contentType
      },
    },
    calls: { inc: (labels) => loaded ? loaded.calls.inc(labels) : recordEarly((m) => m.calls.inc(labels)) },
    duration: { observe: (labels, seconds) => loaded ? loaded.duration.observe(labels, seconds) : recordEarly((m) => m.duration.observe(labels, seconds)) },
    rejections: { inc: (labels) => loaded ? loaded.rejections.inc(labels) : recordEarly((m) => m.rejections.inc(labels)) },
    sandboxMode: {
      set: (labels, value) => loaded ? loaded.sandboxMode.set(labels, value) : earlyGauges.set(`mode ${JSON.stringify(labels)}`, (m) => m.sandboxMode.set(labels, value)),
    },
    mcpServerUp: {
      set: (labels, value) => loaded ? loaded.mcpServerUp.set(labels, value) : earlyGauges.set(`server ${JSON.stringify(labels)}`, (m) => m.mcpServerUp.set(labels, value)),
    },
  }
}
