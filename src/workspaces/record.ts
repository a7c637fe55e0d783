/** A persistent workspace as the store holds it, and as the API shows it. */
import type { WorkspaceMeta } from './meta.ts'

export interface WorkspaceRecord extends WorkspaceMeta {
  /** The workspace directory (canonical). */
  dir: string
}

/** `GET /v1/workspaces/{id}`. */
export interface WorkspaceInfo {
  id: string
  created_at: string
  expires_at: string
  files: number
  bytes: number
}

/** The API shape of a record (the creation answer: no usage yet). */
export function describeWorkspace (record: WorkspaceRecord): Omit<WorkspaceInfo, 'files' | 'bytes'> {
  return {
    id: record.id,
    created_at: new Date(record.createdAt).toISOString(),
    expires_at: new Date(record.expiresAt).toISOString(),
  }
}
