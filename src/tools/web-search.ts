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

export const SEARCH_TIMEOUT_MS = 15_000

interface SearxResult { title?: unknown, url?: unknown, content?: unknown, snippet?: unknown }

export function createWebSearchTool (config: Config['tools']['web_search']) {
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
      let payload: { results?: SearxResult[] }
      try {
        const { request } = await import('undici')
        const response = await request(url, { method: 'GET', headers: { accept: 'application/json' }, signal: AbortSignal.any([ctx.signal, AbortSignal.timeout(SEARCH_TIMEOUT_MS)]) })
        if (response.statusCode < 200 || response.statusCode >= 300) {
          await response.body.dump()
          throw new ToolError('ExecutionFailed', `the search endpoint answered HTTP ${response.statusCode}`)
        }
        payload = await response.body.json() as { results?: SearxResult[] }
      } catch (error) {
        if (error instanceof ToolError) throw error
        if (error instanceof SyntaxError) throw new ToolError('ExecutionFailed', 'the search endpoint did not answer JSON')
        throw new ToolError('ExecutionFailed', `the search endpoint failed: ${(error as { code?: string }).code ?? (error as Error).message}`)
      }
      const results = (Array.isArray(payload?.results) ? payload.results : []).slice(0, args.num_results ?? 5).map((item) => ({
        title: String(item.title ?? ''),
        url: String(item.url ?? ''),
        snippet: String(item.content ?? item.snippet ?? ''),
      }))
      return { query: args.query, results }
    },
  })
}
