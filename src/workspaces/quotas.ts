/**
 * Per-tenant quotas: how many persistent workspaces a tenant may hold, and
 * how many bytes one workspace may hold. Limits come from `workspaces`
 * (the defaults every tenant gets) and `workspaces.tenant_quotas.<tenant>`
 * (overrides for one tenant).
 *
 * The byte quota is checked before a write lands (file tools, memory,
 * archive uploads), so a write that would go over is refused whole and
 * nothing is half-written. Processes (exec_shell, spawn, bash, executables)
 * are bounded per file by the sandbox's file-size limit instead: a running
 * command cannot be asked first. The check reads the workspace's running
 * usage (usage.ts), never a walk of its own: after a process, the first
 * growing write waits for (or makes) the scan that tells the truth.
 */
import type { Config } from '../config.ts'
import { ToolError } from '../errors.ts'
import { usageOf } from './usage.ts'

export interface TenantQuota {
  /** Persistent workspaces the tenant may hold at once. */
  maxWorkspaces: number
  /** Bytes of regular files one workspace may hold. */
  maxWorkspaceBytes: number
}

/** The quota of each tenant: the configured defaults, with per-tenant overrides. */
export function quotaResolver (workspaces: Config['workspaces']): (tenant: string) => TenantQuota {
  return (tenant) => {
    const override = workspaces.tenant_quotas[tenant]
    return {
      maxWorkspaces: override?.max_workspaces ?? workspaces.max_per_tenant,
      maxWorkspaceBytes: override?.max_workspace_bytes ?? workspaces.max_bytes,
    }
  }
}

/** A running call's view of its workspace's byte quota, and of its usage. */
export interface WorkspaceQuota {
  /**
   * Throws PayloadTooLarge when growing the workspace by `addedBytes` (the
   * new size minus what it replaces; may be negative) would exceed the quota.
   * Call it holding the workspace's quota lock (withQuotaLock), with the
   * write it admits: when something changed the tree outside the file tools
   * since the last scan, a growing write needs the truth and scans first.
   */
  ensureRoom: (addedBytes: number) => Promise<void>
  /** The write admitted landed in `directory` (relative to the workspace; undefined: anywhere): `files` more files and `bytes` more bytes (either may be negative). Under the same lock. */
  landed: (files: number, bytes: number, directory?: string) => void
  /** The tree changed in a way no delta describes (an archive moved in): the figure is brought up to date by a scan. */
  changed: () => void
}

/** The byte quota of the workspace at `dir` (canonical), checked against its running usage (usage.ts). */
export function workspaceQuota (dir: string, maxBytes: number): WorkspaceQuota {
  const usage = usageOf(dir)
  return {
    async ensureRoom (addedBytes) {
      if (addedBytes <= 0) return
      if (addedBytes > maxBytes) throw overQuota(addedBytes, maxBytes)
      if (usage.stale) await usage.scanHoldingLock()
      const { bytes } = usage.figure
      if (bytes + addedBytes > maxBytes) throw overQuota(bytes + addedBytes, maxBytes)
    },
    landed: (files, bytes, directory) => usage.add(files, bytes, directory),
    changed: () => usage.changed(),
  }
}

function overQuota (wouldBe: number, maxBytes: number): ToolError {
  return new ToolError('PayloadTooLarge', `the write would bring the workspace to ${wouldBe} bytes, over its quota of ${maxBytes} bytes; nothing was written`)
}

/** A quota that never refuses and keeps no figure (tools called outside the execution path). */
export const UNLIMITED: WorkspaceQuota = { ensureRoom: async () => {}, landed: () => {}, changed: () => {} }
