/**
 * Tracing with the OpenTelemetry SDK, exported over OTLP/HTTP. start.ts
 * imports this module only when an OTLP endpoint is configured. The
 * exporter reads its own OTEL_EXPORTER_OTLP_* variables (endpoint, headers,
 * timeout, compression, certificates), and the resource
 * OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES (over the default name `toolport`).
 */
import type { IncomingHttpHeaders } from 'node:http'
import { context, defaultTextMapGetter, defaultTextMapSetter, diag, DiagLogLevel, ROOT_CONTEXT, type Span, SpanKind, SpanStatusCode, trace, type Tracer } from '@opentelemetry/api'
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks'
import { W3CTraceContextPropagator } from '@opentelemetry/core'
import { OTLPTraceExporter as JsonTraceExporter } from '@opentelemetry/exporter-trace-otlp-http'
import { OTLPTraceExporter as ProtobufTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto'
import { defaultResource, detectResources, resourceAttributesEnvDetector, resourceFromAttributes, serviceNameEnvDetector } from '@opentelemetry/resources'
import { BatchSpanProcessor, type SpanExporter, TracerProvider } from '@opentelemetry/sdk-trace'
import {
  ATTR_ERROR_TYPE, ATTR_HTTP_REQUEST_METHOD, ATTR_HTTP_RESPONSE_STATUS_CODE, ATTR_HTTP_ROUTE,
  ATTR_SERVICE_NAME, ATTR_SERVICE_VERSION, ATTR_URL_PATH,
} from '@opentelemetry/semantic-conventions'
import type { Logger } from 'pino'
import { CANCELLED, type Outcome } from '../execution/execute.ts'
import { VERSION } from '../version.ts'
import type { CallSpan, RequestSpan, Tracing, TracingOptions } from './tracing.ts'

// The GenAI and MCP conventions are still incubating: their names are copied, as the semconv package advises.
const ATTR_GEN_AI_OPERATION_NAME = 'gen_ai.operation.name'
const ATTR_GEN_AI_TOOL_NAME = 'gen_ai.tool.name'
const ATTR_GEN_AI_TOOL_CALL_ID = 'gen_ai.tool.call.id'
const ATTR_TOOLPORT_WORKSPACE = 'toolport.workspace'
const EXECUTE_TOOL = 'execute_tool'
/** error.type of a request whose client left before any answer (nginx logs it as 499). */
const CLIENT_CLOSED = 'client_closed'

class HttpSpan implements RequestSpan {
  readonly span: Span

  constructor (span: Span) {
    this.span = span
  }

  setAttribute (key: string, value: string): void {
    this.span.setAttribute(key, value)
  }

  end (statusCode: number | undefined): void {
    if (statusCode === undefined) {
      // No answer was sent: the client closed the connection first (a timeout of its own, a cancelled call).
      this.span.setAttribute(ATTR_ERROR_TYPE, CLIENT_CLOSED)
      this.span.setStatus({ code: SpanStatusCode.ERROR, message: 'the client closed the connection before the answer' })
      this.span.end()
      return
    }
    this.span.setAttribute(ATTR_HTTP_RESPONSE_STATUS_CODE, statusCode)
    // A server span is in error for the server's failures only; a 4xx is the client's.
    if (statusCode >= 500) {
      this.span.setAttribute(ATTR_ERROR_TYPE, String(statusCode))
      this.span.setStatus({ code: SpanStatusCode.ERROR })
    }
    this.span.end()
  }
}

class ToolSpan implements CallSpan {
  readonly span: Span
  readonly #name: string

  constructor (span: Span, name: string) {
    this.span = span
    this.#name = name
  }

  end (outcome: Outcome, { left }: { left: boolean }): void {
    const span = this.span
    // The registered name, which a lookup may have corrected (`READ_FILE` → read_file).
    if (outcome.tool !== this.#name) {
      span.updateName(`${EXECUTE_TOOL} ${outcome.tool}`)
      span.setAttribute(ATTR_GEN_AI_TOOL_NAME, outcome.tool)
    }
    // A failed call too: one that failed in its workspace is where the workspace is wanted most.
    if (outcome.workspace !== null) span.setAttribute(ATTR_TOOLPORT_WORKSPACE, outcome.workspace)
    if (left) {
      // Its caller left (a client gone, an MCP cancel): no failure, as the calls metric counts it.
      span.setAttribute(ATTR_ERROR_TYPE, CANCELLED)
    } else if (!outcome.ok) {
      span.setAttribute(ATTR_ERROR_TYPE, outcome.error.code)
      span.setStatus({ code: SpanStatusCode.ERROR, message: outcome.error.code })
    }
    span.end()
  }
}

function exporterFor (protocol: TracingOptions['protocol']): SpanExporter {
  return protocol === 'http/json' ? new JsonTraceExporter() : new ProtobufTraceExporter()
}

let contextManagerSet = false

/** Spans nest across awaits through one AsyncLocalStorage context manager for the process (the API's global). */
function ensureContextManager (): void {
  if (contextManagerSet) return
  contextManagerSet = true
  const manager = new AsyncLocalStorageContextManager().enable()
  if (!context.setGlobalContextManager(manager)) manager.disable()
}

/** The SDK's own warnings and errors (a collector that does not answer) go to the service's log. */
function logDiagnostics (log: Logger): void {
  const ignore = (): void => {}
  diag.setLogger({
    error: (message, ...args) => { log.error({ otel: args }, `tracing: ${message}`) },
    warn: (message, ...args) => { log.warn({ otel: args }, `tracing: ${message}`) },
    info: ignore,
    debug: ignore,
    verbose: ignore,
  }, { logLevel: DiagLogLevel.WARN, suppressOverrideMessage: true })
}

/** Starts the SDK: a tracer provider with a batching OTLP/HTTP exporter. */
export function startTracing (options: TracingOptions, log: Logger): Tracing {
  ensureContextManager()
  logDiagnostics(log)
  // The operator's OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME win over the defaults.
  const resource = defaultResource()
    .merge(resourceFromAttributes({ [ATTR_SERVICE_NAME]: 'toolport', [ATTR_SERVICE_VERSION]: VERSION }))
    .merge(detectResources({ detectors: [resourceAttributesEnvDetector, serviceNameEnvDetector] }))
  const provider = new TracerProvider({
    resource,
    spanProcessors: [new BatchSpanProcessor({ exporter: exporterFor(options.protocol), ...options.batch })],
  })
  const tracer: Tracer = provider.getTracer('toolport', VERSION)
  const propagator = new W3CTraceContextPropagator()

  return {
    startRequest (method: string, route: string | undefined, path: string, headers: IncomingHttpHeaders): RequestSpan {
      const parent = propagator.extract(ROOT_CONTEXT, headers, defaultTextMapGetter)
      const attributes: Record<string, string> = { [ATTR_HTTP_REQUEST_METHOD]: method, [ATTR_URL_PATH]: path }
      if (route !== undefined) attributes[ATTR_HTTP_ROUTE] = route
      const name = route === undefined ? method : `${method} ${route}`
      return new HttpSpan(tracer.startSpan(name, { kind: SpanKind.SERVER, attributes }, parent))
    },
    within (span: RequestSpan, next: () => void): void {
      context.with(trace.setSpan(context.active(), (span as HttpSpan).span), next)
    },
    startCall (tool: string, callId: string | undefined): CallSpan {
      const attributes: Record<string, string> = { [ATTR_GEN_AI_OPERATION_NAME]: EXECUTE_TOOL, [ATTR_GEN_AI_TOOL_NAME]: tool }
      if (callId !== undefined) attributes[ATTR_GEN_AI_TOOL_CALL_ID] = callId
      return new ToolSpan(tracer.startSpan(`${EXECUTE_TOOL} ${tool}`, { kind: SpanKind.INTERNAL, attributes }), tool)
    },
    during <T>(span: CallSpan, work: () => Promise<T>): Promise<T> {
      return context.with(trace.setSpan(context.active(), (span as ToolSpan).span), work)
    },
    annotateRequest (key: string, value: string): void {
      trace.getActiveSpan()?.setAttribute(key, value)
    },
    outgoingHeaders (): Record<string, string> {
      const headers: Record<string, string> = {}
      propagator.inject(context.active(), headers, defaultTextMapSetter)
      return headers
    },
    shutdown: () => provider.shutdown(),
  }
}
