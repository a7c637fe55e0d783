/**
 * Whether tracing is on, and how, from the standard OTEL_* variables that
 * start.ts hands over (it alone reads the environment). On when an OTLP
 * endpoint is set, unless OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none.
 */
import { ConfigError } from '../config.ts'
import type { TracingOptions } from './tracing.ts'

type Env = Record<string, string | undefined>

const PROTOCOLS = ['http/protobuf', 'http/json'] as const

/** A variable's value, with an empty one taken as unset (as the SDK takes it). */
function valueOf (env: Env, name: string): string | undefined {
  return env[name]?.trim() || undefined
}

function wholeNumberOf (env: Env, name: string): number | undefined {
  const value = valueOf(env, name)
  if (value === undefined) return undefined
  const number = Number(value)
  if (!Number.isInteger(number) || number < 0) throw new ConfigError(`${name}: must be a whole number, got ${JSON.stringify(value)}`)
  return number
}

/** Tracing's settings, or undefined when it is off. */
export function tracingOptionsFrom (env: Env): TracingOptions | undefined {
  if (valueOf(env, 'OTEL_EXPORTER_OTLP_TRACES_ENDPOINT') === undefined && valueOf(env, 'OTEL_EXPORTER_OTLP_ENDPOINT') === undefined) return undefined
  if (valueOf(env, 'OTEL_SDK_DISABLED')?.toLowerCase() === 'true') return undefined
  if (valueOf(env, 'OTEL_TRACES_EXPORTER')?.toLowerCase() === 'none') return undefined
  const name = valueOf(env, 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL') === undefined ? 'OTEL_EXPORTER_OTLP_PROTOCOL' : 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL'
  const protocol = valueOf(env, name) ?? 'http/protobuf'
  if (!PROTOCOLS.includes(protocol as TracingOptions['protocol'])) {
    throw new ConfigError(`${name}: ${JSON.stringify(protocol)} is not supported; use ${PROTOCOLS.join(' or ')}`)
  }
  return {
    protocol: protocol as TracingOptions['protocol'],
    batch: {
      scheduledDelayMillis: wholeNumberOf(env, 'OTEL_BSP_SCHEDULE_DELAY'),
      exportTimeoutMillis: wholeNumberOf(env, 'OTEL_BSP_EXPORT_TIMEOUT'),
      maxQueueSize: wholeNumberOf(env, 'OTEL_BSP_MAX_QUEUE_SIZE'),
      maxExportBatchSize: wholeNumberOf(env, 'OTEL_BSP_MAX_EXPORT_BATCH_SIZE'),
    },
  }
}
