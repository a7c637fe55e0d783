/** When tracing is on, and how, from the standard OTEL_* variables. */
import { describe, expect, it } from 'vitest'
import { ConfigError } from '../../src/config.ts'
import { tracingOptionsFrom } from '../../src/telemetry/options.ts'

const ENDPOINT = 'http://collector:4318'

describe('tracingOptionsFrom', () => {
  it('is off without an OTLP endpoint, with an empty one, and when the SDK or the trace exporter is disabled', () => {
    expect(tracingOptionsFrom({})).toBeUndefined()
    expect(tracingOptionsFrom({ OTEL_EXPORTER_OTLP_ENDPOINT: ' ', OTEL_SERVICE_NAME: 'x' })).toBeUndefined()
    expect(tracingOptionsFrom({ OTEL_EXPORTER_OTLP_ENDPOINT: ENDPOINT, OTEL_SDK_DISABLED: 'TRUE' })).toBeUndefined()
    expect(tracingOptionsFrom({ OTEL_EXPORTER_OTLP_ENDPOINT: ENDPOINT, OTEL_TRACES_EXPORTER: 'none' })).toBeUndefined()
  })

  it('is on with either endpoint, over http/protobuf unless told http/json (the traces variable first)', () => {
    expect(tracingOptionsFrom({ OTEL_EXPORTER_OTLP_ENDPOINT: ENDPOINT })?.protocol).toBe('http/protobuf')
    expect(tracingOptionsFrom({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${ENDPOINT}/v1/traces`, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' })?.protocol).toBe('http/json')
    expect(tracingOptionsFrom({ OTEL_EXPORTER_OTLP_ENDPOINT: ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc', OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json' })?.protocol).toBe('http/json')
  })

  it('takes the batch processor settings, and refuses what it cannot use', () => {
    expect(tracingOptionsFrom({ OTEL_EXPORTER_OTLP_ENDPOINT: ENDPOINT, OTEL_BSP_SCHEDULE_DELAY: '200', OTEL_BSP_MAX_QUEUE_SIZE: '4096' })?.batch)
      .toEqual({ scheduledDelayMillis: 200, exportTimeoutMillis: undefined, maxQueueSize: 4096, maxExportBatchSize: undefined })
    expect(() => tracingOptionsFrom({ OTEL_EXPORTER_OTLP_ENDPOINT: ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' })).toThrow(ConfigError)
    expect(() => tracingOptionsFrom({ OTEL_EXPORTER_OTLP_ENDPOINT: ENDPOINT, OTEL_BSP_SCHEDULE_DELAY: '1.5s' })).toThrow(/OTEL_BSP_SCHEDULE_DELAY: must be a whole number/)
  })
})
