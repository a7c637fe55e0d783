/**
 * Which workspace the calls of one request (a single call, a batch, an MCP
 * session) run in: a named persistent workspace of the caller's tenant, or
 * one ephemeral workspace shared by all the calls of the scope and removed
 * when the scope closes.
 */
import { validateWorkspaceId } from './ids.ts'
import type { WorkspaceLease, WorkspaceStore } from './store.ts'

export class WorkspaceScope {
  readonly #store: WorkspaceStore
  readonly #tenant: string
  readonly #workspaceId: string | undefined
  #ephemeral: Promise<WorkspaceLease> | undefined
  readonly #keepsProcesses: boolean
  #closed = false

  /** `keepsProcesses`: the ephemeral workspace lives as long as a session, and processes may run in it until then. */
  constructor (store: WorkspaceStore, tenant: string, workspaceId?: string, options: { keepsProcesses?: boolean } = {}) {
    this.#store = store
    this.#tenant = tenant
    this.#workspaceId = workspaceId
    this.#keepsProcesses = options.keepsProcesses === true
  }

  /** The persistent workspace the calls name; null for an ephemeral one, or an id that is not valid. */
  get named (): string | null {
    if (this.#workspaceId === undefined) return null
    try {
      validateWorkspaceId(this.#workspaceId)
      return this.#workspaceId
    } catch {
      return null
    }
  }

  /** Throws InvalidArgs for a bad workspace id, before anything touches the filesystem. */
  validate (): void {
    if (this.#workspaceId !== undefined) validateWorkspaceId(this.#workspaceId)
  }

  /** A workspace for one call; release it when the call ends. */
  async lease (): Promise<WorkspaceLease> {
    if (this.#closed) throw new Error('workspace scope already closed')
    if (this.#workspaceId !== undefined) return this.#store.acquire(this.#tenant, this.#workspaceId)
    this.#ephemeral ??= this.#store.ephemeral()
    const shared = await this.#ephemeral
    // The shared ephemeral workspace outlives each call: only close() removes it.
    return { id: null, dir: shared.dir, release: async () => {}, keepsProcesses: this.#keepsProcesses }
  }

  /** Removes the ephemeral workspace, if one was made. */
  async close (): Promise<void> {
    this.#closed = true
    const ephemeral = this.#ephemeral
    this.#ephemeral = undefined
    if (ephemeral) await (await ephemeral).release()
  }
}
