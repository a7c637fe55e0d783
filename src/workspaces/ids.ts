/**
 * Workspace ids and their directory names. Ids are checked before anything
 * touches the filesystem: 1–256 bytes, no `..`, no `/` or `\`, no NUL or
 * control characters (clawft's session id rules).
 */
import { createHash } from 'node:crypto'
import { ToolError } from '../errors.ts'

export const MAX_ID_BYTES = 256

/* eslint-disable-next-line no-control-regex */
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/

/** Throws InvalidArgs unless `id` is a valid workspace id. */
export function validateWorkspaceId (id: unknown): asserts id is string {
  const fail = (why: string): never => { throw new ToolError('InvalidArgs', `invalid workspace id: ${why}`) }
  if (typeof id !== 'string') fail('must be a string')
  const text = id as string
  if (text.length === 0) fail('must not be empty')
  if (Buffer.byteLength(text) > MAX_ID_BYTES) fail(`must be at most ${MAX_ID_BYTES} bytes`)
  if (text.includes('..')) fail('must not contain ".."')
  if (text.includes('/') || text.includes('\\')) fail('must not contain "/" or "\\"')
  if (CONTROL.test(text)) fail('must not contain NUL or control characters')
  // A lone surrogate (`"\ud800"` is valid JSON) is no text: hashed or put in a URL it would become another id.
  if (!text.isWellFormed()) fail('must be well-formed Unicode (no unpaired surrogate)')
}

const PLAIN_NAME = /^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$/

/**
 * The directory name of an id (or a tenant name): the id itself when it is
 * short and plain, otherwise `~` and a hash (`~` never starts a plain name,
 * so the two kinds cannot collide, and no name exceeds the filesystem's 255).
 */
export function directoryNameOf (id: string): string {
  if (PLAIN_NAME.test(id)) return id
  return `~${createHash('sha256').update(id).digest('hex').slice(0, 40)}`
}
