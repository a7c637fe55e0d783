/**
 * What the service asks of tracing, with no OpenTelemetry code: the HTTP
 * hooks, the execution path and the MCP sessions hold these interfaces, and
 * the SDK behind them (otel.ts) is loaded only when tracing is configured,
 * so a service without it neither imports nor runs any of it.
 */
import type { IncomingHttpHeaders } from 'node:http'
import type { CallTracing } from '../execution/execute.ts'

// The MCP conventions are still incubating: their names are copied, as the semconv package advises.
export const ATTR_MCP_METHOD_NAME = 'mcp.method.name'
export const ATTR_MCP_SESSION_ID = 'mcp.session.id'

/**
 * How start.ts configures tracing. The exporter reads its own
 * OTEL_EXPORTER_OTLP_* variables, the resource OTEL_SERVICE_NAME (default
 * `toolport`) and OTEL_RESOURCE_ATTRIBUTES.
 */
export interface TracingOptions {
  protocol: 'http/protobuf' | 'http/json'
  /** The batch span processor's settings (OTEL_BSP_*); the SDK's defaults where absent. */
  batch: { scheduledDelayMillis?: number, exportTimeoutMillis?: number, maxQueueSize?: number, maxExportBatchSize?: number }
}

/** The span of one HTTP request. */
export interface RequestSpan {
  setAttribute: (key: string, value: string) => void
  /** Ends it with the response's status; undefined when the client left before any answer was sent. */
  end: (statusCode: number | undefined) => void
}

export type { CallSpan, CallTracing } from '../execution/execute.ts'

export interface Tracing extends CallTracing {
  /** A server span continuing the caller's W3C `traceparent`, if it sent one. */
  startRequest: (method: string, route: string | undefined, path: string, headers: IncomingHttpHeaders) => RequestSpan
  /** Runs `next` (and everything it awaits) with `span` as the active span. */
  within: (span: RequestSpan, next: () => void) => void
  /** Exports what is buffered and stops the exporter. */
  shutdown: () => Promise<void>
}
