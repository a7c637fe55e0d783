/** Who a request acts for: a tenant, and the tools its token may see and call. */
import type { NameMatcher } from './globs.ts'

export interface Principal {
  tenant: string
  /** Matches the tool names the token's `allowed_tools` globs allow. */
  scope: NameMatcher
  allowedTools: string[]
  /**
   * Aborts when the token is revoked, or given another tenant or scope (a
   * tokens file changed): whatever the token still has open then ends.
   */
  revoked?: AbortSignal
}
