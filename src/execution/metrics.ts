/**
 * Prometheus metrics (prom-client), one registry per app so tests can build
 * many apps side by side.
 */
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from 'prom-client'

export interface Metrics {
  registry: Registry
  calls: Counter<'tool' | 'code'>
  duration: Histogram<'tool' | 'code'>
  inFlight: Gauge
  queueDepth: Gauge
  rejections: Counter<'limiter'>
  sandboxMode: Gauge<'mode'>
  mcpServerUp: Gauge<'server'>
}

/** What the gauges read when scraped. */
export interface MetricsSources {
  inFlight: () => number
  queued: () => number
}

export function createMetrics (sources: MetricsSources, options: { defaultMetrics?: boolean } = {}): Metrics {
  const registry = new Registry()
  if (options.defaultMetrics !== false) collectDefaultMetrics({ register: registry, prefix: 'toolport_' })
  const registers = [registry]
  return {
    registry,
    calls: new Counter({ name: 'toolport_tool_calls_total', help: 'Tool calls by tool and outcome code (ok or an error code)', labelNames: ['tool', 'code'], registers }),
    duration: new Histogram({
      name: 'toolport_tool_call_duration_seconds',
      help: 'Tool call duration in seconds, by tool and outcome code',
      labelNames: ['tool', 'code'],
      buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300],
      registers,
    }),
    inFlight: new Gauge({
      name: 'toolport_calls_in_flight',
      help: 'Tool calls holding a limiter slot',
      registers,
      collect () { this.set(sources.inFlight()) },
    }),
    queueDepth: new Gauge({
      name: 'toolport_limiter_queue_depth',
      help: 'Tool calls waiting for a limiter slot',
      registers,
      collect () { this.set(sources.queued()) },
    }),
    rejections: new Counter({ name: 'toolport_limiter_rejections_total', help: 'Calls refused by a limiter (queue full or wait timed out)', labelNames: ['limiter'], registers }),
    sandboxMode: new Gauge({ name: 'toolport_sandbox_mode', help: 'The sandbox mode in force (1 for the active mode)', labelNames: ['mode'], registers }),
    mcpServerUp: new Gauge({ name: 'toolport_mcp_server_up', help: 'Whether an upstream MCP server is connected (1) or not (0)', labelNames: ['server'], registers }),
  }
}
