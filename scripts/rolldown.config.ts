/**
 * `npm run build`'s second step: the service bundled for `npm start`, the
 * package's bin and the image (dist/bundle/server.js). tsc's dist/src and
 * dist/scripts stay for type checking and the scripts that import the
 * service's modules (the benchmark's raw spawns). The benchmark bundles its bare
 * server with the same options (`bundleOf`), so that start-ups compare like
 * for like.
 *
 * Node spends most of a start loading ~760 small modules; a few large
 * chunks load several times faster (docs/PERFORMANCE.md). What the service
 * imports lazily (the MCP SDK, undici, prom-client, OpenTelemetry, the docs
 * UI) stays lazy: dynamic imports become chunks of their own.
 *
 * Left external, resolved from node_modules at run time (the image copies
 * the production node_modules), are the packages that find files beside
 * their own code when they run, which a bundle would move away:
 * - pino-pretty, which src/logger.ts loads only for pretty lines on a
 *   terminal. pino itself is bundled: the service never uses its transports
 *   (a worker thread started from a file in pino's and thread-stream's
 *   folders, which the bundle does not have beside it);
 * - @fastify/swagger-ui: serves the Swagger UI's static files from its folder;
 * - re2-wasm: loads its WebAssembly module from its folder.
 * And OpenTelemetry, which loads only when tracing is on: its packages share
 * one global registry through @opentelemetry/api, so they stay the single
 * copy that node_modules holds (and a test can see that they never load
 * while tracing is off).
 */
import path from 'node:path'
import { defineConfig, type OutputOptions, type RolldownOptions } from 'rolldown'

const EXTERNAL = [/^pino-pretty(\/|$)/, /^@fastify\/swagger-ui(\/|$)/, /^re2-wasm(\/|$)/, /^@opentelemetry\//]

/** Rolldown's options for bundling `entry` (a path from the repository root) into `dir`. */
export function bundleOf (entry: string, dir: string): RolldownOptions & { output: OutputOptions } {
  return {
    input: { [path.basename(entry, '.ts')]: entry },
    platform: 'node',
    external: EXTERNAL,
    output: {
      dir,
      format: 'esm',
      // Not minified, with source maps: stack traces in the log stay readable.
      sourcemap: true,
      // V8 keeps each module's source in memory for as long as the service runs: without the doc
      // comments (the source maps still have them), and in ASCII, which V8 stores in one byte a
      // character where a single other character would make it two.
      comments: { legal: true, annotation: false, jsdoc: false },
      charset: 'ascii',
      // Names as written: pino logs an error's class name, fastify-plugin names plugins after their function.
      keepNames: true,
      cleanDir: true,
      entryFileNames: '[name].js',
      chunkFileNames: 'chunks/[name]-[hash].js',
    },
  }
}

export default defineConfig(bundleOf('src/server.ts', 'dist/bundle'))
