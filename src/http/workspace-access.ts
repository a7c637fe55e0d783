/** What the workspace routes share: how a URL names a workspace, and who may read or change its files. */
import { Type } from '@sinclair/typebox'
import { ToolError } from '../errors.ts'
import type { Principal } from '../execution/principal.ts'

export const IdParams = Type.Object({ id: Type.String() })

/**
 * Uploading an archive and deleting a workspace change its files as
 * write_file does: with tokens configured, they need one that may use write_file.
 */
export function ensureMayChangeFiles (principal: Principal): void {
  if (!principal.scope('write_file')) throw new ToolError('PermissionDenied', 'changing a workspace\'s files needs a token whose allowed tools include write_file')
}

/**
 * Downloading a workspace's archive reads every file as read_file does: with
 * tokens configured, it needs one that may use read_file.
 */
export function ensureMayReadFiles (principal: Principal): void {
  if (!principal.scope('read_file')) throw new ToolError('PermissionDenied', 'reading a workspace\'s files needs a token whose allowed tools include read_file')
}
