#!/usr/bin/env node
// disk-usage: a shellclaw shim around `du`. `--describe` prints the tool's
// interface; otherwise $1 holds the JSON arguments and the answer is JSON on
// stdout. Only paths inside the working directory (the workspace) are
// measured: absolute paths, `..` and symlinks out are refused.
import { execFileSync } from 'node:child_process'
import { realpathSync } from 'node:fs'
import path from 'node:path'

const DESCRIPTION = {
  name: 'disk_usage',
  description: 'Disk usage of a file or directory in the workspace, in kilobytes (du -sk)',
  parameters: {
    type: 'object',
    properties: {
      path: { type: 'string', description: 'A path relative to the workspace (default ".")' },
    },
    required: [],
  },
}

function fail (message) {
  process.stderr.write(`disk_usage: ${message}\n`)
  process.exit(1)
}

/** The real path of `relative`, refused unless it stays inside the working directory. */
function containedPath (relative) {
  if (typeof relative !== 'string' || relative === '' || relative.includes('\0')) fail('path must be a non-empty string')
  if (path.isAbsolute(relative)) fail(`path must be relative to the workspace: ${relative}`)
  if (relative.split(/[\\/]/).includes('..')) fail(`path must not contain "..": ${relative}`)
  const root = realpathSync(process.cwd())
  let real
  try {
    real = realpathSync(path.resolve(root, relative))
  } catch {
    fail(`no such file or directory: ${relative}`)
  }
  // A symlink inside the workspace may still point out of it.
  if (real !== root && !real.startsWith(root + path.sep)) fail(`path leaves the workspace: ${relative}`)
  return real
}

if (process.argv[2] === '--describe') {
  process.stdout.write(`${JSON.stringify(DESCRIPTION, null, 2)}\n`)
  process.exit(0)
}

let args
try {
  args = JSON.parse(process.argv[2] ?? '{}')
} catch {
  fail('the arguments ($1) are not JSON')
}
const relative = args?.path ?? '.'
const target = containedPath(relative)
// `--` so that a file named `-x` is a path, not an option.
const output = execFileSync('du', ['-sk', '--', target], { encoding: 'utf8' })
const kilobytes = Number(output.split('\t')[0])
process.stdout.write(`${JSON.stringify({ path: relative, kilobytes })}\n`)
