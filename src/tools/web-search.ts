/**
 * web_search: a SearXNG-compatible endpoint (`GET {endpoint}?q=…&format=json`),
 * its results cut to `num_results` as `{title, url, snippet}`. The endpoint is
 * the operator's, so it is trusted (no SSRF check). Unconfigured, the tool
 * answers clawft's informational object, not an error.
 */
import { Type } from '@sinclair/typebox'
import type { Config } from '../config.ts'
import { ToolError } from '../errors.ts'
import { defineBuiltin } from '../execution/define.ts'
import { readCapped, requestFailure } from './http-body.ts'

export const SEARCH_TIMEOUT_MS = 15_000
/** More than any endpoint's page of results: a longer answer is not a search result, and is not read further. */
export const SEARCH_MAX_BYTES = 4 * 1024 * 1024

export interface WebSearchOptions {
  /** How long the endpoint may take to answer (tests shorten it). */
  timeoutMs?: number
}

interface SearxResult { title?: unknown, url?: unknown, content?: unknown, snippet?: unknown }

const text = (value: unknown): string => (typeof value === 'string' ? value : '')

/** The results of a SearXNG answer: entries that are not objects are skipped, fields that are not strings are empty. */
function resultsOf (payload: unknown, count: number): Array<{ title: string, url: string, snippet: string }> {
  const results = (payload as { results?: unknown } | null)?.results
  if (!Array.isArray(results)) return []
  return results
    .filter((item): item is SearxResult => typeof item === 'object' && item !== null && !Array.isArray(item))
    .slice(0, count)
    .map((item) => ({ title: text(item.title), url: text(item.url), snippet: text(item.content) || text(item.snippet) }))
}

export function createWebSearchTool (config: Config['tools']['web_search'], options: WebSearchOptions = {}) {
  const timeoutMs = options.timeoutMs ?? SEARCH_TIMEOUT_MS
  return defineBuiltin({
    name: 'web_search',
    description: 'Search the web through the configured search endpoint; answers titles, URLs and snippets.',
    parameters: Type.Object({
      query: Type.String({ minLength: 1, description: 'Search query string' }),
      num_results: Type.Optional(Type.Integer({ minimum: 1, maximum: 50, description: 'Maximum number of results to return (default: 5)' })),
    }),
    outputSchema: Type.Union([
      Type.Object({
        query: Type.String(),
        results: Type.Array(Type.Object({ title: Type.String(), url: Type.String(), snippet: Type.String() }, { additionalProperties: false })),
      }, { additionalProperties: false }),
      Type.Object({
        error: Type.String({ description: 'Why there are no results: no endpoint is configured' }),
        message: Type.String(),
        query: Type.String(),
      }, { additionalProperties: false }),
    ]),
    annotations: { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: true },
    async execute (args, ctx) {
      if (!config.endpoint) {
        return {
          error: 'web search not configured',
          message: "No search API endpoint is configured. Set 'tools.web_search.endpoint' in your config.",
          query: args.query,
        }
      }
      const url = new URL(config.endpoint)
      url.searchParams.set('q', args.query)
      url.searchParams.set('format', 'json')
      const timeout = AbortSignal.timeout(timeoutMs)
      let payload: unknown
      try {
        const { request } = await import('undici')
        const response = await request(url, { method: 'GET', headers: { accept: 'application/json' }, signal: AbortSignal.any([ctx.signal, timeout]) })
        if (response.statusCode < 200 || response.statusCode >= 300) {
          await response.body.dump()
          throw new ToolError('ExecutionFailed', `the search endpoint answered HTTP ${response.statusCode}`)
        }
        const { data, complete } = await readCapped(response.body, SEARCH_MAX_BYTES)
        if (!complete) throw new ToolError('ExecutionFailed', `the search endpoint answered more than ${SEARCH_MAX_BYTES / 1024 / 1024} MiB`)
        payload = JSON.parse(data.toString('utf8'))
      } catch (error) {
        if (error instanceof SyntaxError) throw new ToolError('ExecutionFailed', 'the search endpoint did not answer JSON')
        throw requestFailure(error, 'the search endpoint', { signal: ctx.signal, timeout, timeoutMs })
      }
      return { query: args.query, results: resultsOf(payload, args.num_results ?? 5) }
    },
  })
}
