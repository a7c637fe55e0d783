#!/usr/bin/env node
/**
 * The entry point (`npm start`, the package's bin, the image's CMD): checks
 * the Node.js version first, since the service and its dependencies need a
 * newer one than some machines have, then starts the service (start.ts).
 * Nothing else may be imported statically here but Node's own modules, by
 * their default export: an import that needs the newer Node would fail
 * before the check could say so.
 */
import { existsSync } from 'node:fs'
import module from 'node:module'
import { fileURLToPath } from 'node:url'
import { nodeVersionProblem } from './node-version.ts'

const problem = nodeVersionProblem(process.versions.node)
if (problem !== undefined) {
  process.stderr.write(`toolport: ${problem}\n`)
  process.exit(1)
}

// V8's compile cache of the bundle, written by `npm run build` (scripts/write-compile-cache.ts)
// beside it: most of a start is compiling the modules it loads. Node checks each entry against
// the module's source and V8's version and flags, so an entry that does not match is compiled anew.
const compileCache = fileURLToPath(new URL('compile-cache', import.meta.url))
if (existsSync(compileCache)) module.enableCompileCache(compileCache)

await import('./start.ts')
