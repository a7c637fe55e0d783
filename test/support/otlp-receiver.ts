/**
 * A real OTLP/HTTP trace receiver for tests: a node:http server on
 * 127.0.0.1, port 0, that keeps every POST /v1/traces (its content type and
 * raw body) and answers 200 as a collector does. OTLP/JSON bodies are
 * decoded into flat spans with plain attribute objects.
 */
import http from 'node:http'
import type net from 'node:net'
import { onCleanup } from './temp.ts'

export interface ExportRequest { path: string, contentType: string, body: Buffer }

type AnyValue = { stringValue?: string, intValue?: number | string, boolValue?: boolean, doubleValue?: number }
interface KeyValue { key: string, value: AnyValue }

/** One span as OTLP/JSON carries it, with its resource's and its own attributes made plain. */
export interface ReceivedSpan {
  traceId: string
  spanId: string
  parentSpanId: string | undefined
  name: string
  kind: number
  status: { code?: number, message?: string }
  attributes: Record<string, unknown>
  resource: Record<string, unknown>
}

export interface OtlpReceiver {
  /** `http://127.0.0.1:PORT`: the value for OTEL_EXPORTER_OTLP_ENDPOINT. */
  base: string
  requests: ExportRequest[]
  /** Every span received so far as OTLP/JSON. */
  spans: () => ReceivedSpan[]
}

/** OTLP's span kinds (SPAN_KIND_SERVER…). */
export const SpanKindOf = { internal: 1, server: 2 } as const
/** OTLP's status codes. */
export const StatusCodeOf = { unset: 0, ok: 1, error: 2 } as const

function plain (value: AnyValue): unknown {
  if (value.intValue !== undefined) return Number(value.intValue)
  return value.stringValue ?? value.boolValue ?? value.doubleValue
}

function attributesOf (list: KeyValue[] | undefined): Record<string, unknown> {
  return Object.fromEntries((list ?? []).map(({ key, value }) => [key, plain(value)]))
}

interface JsonExport {
  resourceSpans?: Array<{
    resource?: { attributes?: KeyValue[] }
    scopeSpans?: Array<{ spans?: Array<Omit<ReceivedSpan, 'attributes' | 'resource'> & { attributes?: KeyValue[] }> }>
  }>
}

function spansOf (body: Buffer): ReceivedSpan[] {
  const parsed = JSON.parse(body.toString('utf8')) as JsonExport
  return (parsed.resourceSpans ?? []).flatMap((rs) => {
    const resource = attributesOf(rs.resource?.attributes)
    return (rs.scopeSpans ?? []).flatMap((ss) => (ss.spans ?? []).map((span) => ({
      ...span,
      parentSpanId: span.parentSpanId || undefined,
      status: span.status ?? {},
      attributes: attributesOf(span.attributes),
      resource,
    })))
  })
}

export async function startOtlpReceiver (): Promise<OtlpReceiver> {
  const requests: ExportRequest[] = []
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (chunk: Buffer) => chunks.push(chunk))
    req.on('end', () => {
      if (req.method === 'POST' && req.url === '/v1/traces') {
        requests.push({ path: req.url, contentType: req.headers['content-type'] ?? '', body: Buffer.concat(chunks) })
      }
      const json = req.headers['content-type'] === 'application/json'
      res.writeHead(200, { 'content-type': json ? 'application/json' : 'application/x-protobuf' })
      res.end(json ? '{}' : '')
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  onCleanup(() => new Promise((resolve) => { server.closeAllConnections(); server.close(() => resolve()) }))
  const { port } = server.address() as net.AddressInfo
  return {
    base: `http://127.0.0.1:${port}`,
    requests,
    spans: () => requests.filter((r) => r.contentType.startsWith('application/json')).flatMap((r) => spansOf(r.body)),
  }
}
