#!/usr/bin/env node
/**
 * The entry point (`npm start`, the package's bin, the image's CMD): checks
 * the Node.js version first, since the service and its dependencies need a
 * newer one than some machines have, then starts the service (start.ts).
 * Nothing else may be imported statically here: an import that needs the
 * newer Node would fail before the check could say so.
 */
import { nodeVersionProblem } from './node-version.ts'

const problem = nodeVersionProblem(process.versions.node)
if (problem !== undefined) {
  process.stderr.write(`toolport: ${problem}\n`)
  process.exit(1)
}
await import('./start.ts')
