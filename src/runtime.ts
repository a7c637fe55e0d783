/**
 * The running service without HTTP: registry, workspaces, limiter, metrics,
 * the process runner and the tool sources, with their start and shutdown.
 * app.ts wraps it in routes; tests may use it directly.
 */
import { randomUUID } from 'node:crypto'
import path from 'node:path'
import type { Logger } from 'pino'
import type { Config, McpServerConfig } from './config.ts'
import { createRunner } from './sandbox/index.ts'
import { DeferredRunner } from './sandbox/deferred-runner.ts'
import { WorkspaceNetworks } from './sandbox/workspace-network.ts'
import type { ProcessRunner } from './sandbox/types.ts'
import { ExecutableSource } from './sources/executables.ts'
import type { McpClientSource } from './sources/mcp-client.ts'
import { builtinTools, messageTools } from './tools/index.ts'
import type { ExecutionServices } from './execution/execute.ts'
import { Limiter } from './execution/limiter.ts'
import { createMetrics, type Metrics } from './execution/metrics.ts'
import { isInside } from './workspace-fs/paths.ts'
import { quotaResolver, type TenantQuota } from './workspaces/quotas.ts'
import { ToolRegistry } from './execution/registry.ts'
import { WorkspaceStore } from './workspaces/store.ts'
import { PEER_KEY_FILE, PeerKey } from './processes/peer-key.ts'
import { Peers } from './processes/peers.ts'
import { ProcessLocator } from './processes/process-locator.ts'
import { ProcessRecords } from './processes/process-records.ts'
import { ProcessTable } from './processes/process-table.ts'
import { DEFAULT_DENYLIST } from './sandbox/command-rules.ts'
import type { CallTracing } from './execution/execute.ts'

export type Readiness = 'starting' | 'ready' | 'draining'

/** How long start-up waits for MCP servers' first connection attempt before declaring ready. */
const MAX_SOURCE_WAIT_MS = 15_000

export interface RuntimeOptions {
  /** Files the service reads that no sandboxed process may see (the config file, the tokens file). */
  hidePaths?: string[]
  defaultMetrics?: boolean
  /** A span per tool call (tracing on). */
  tracing?: CallTracing
}

export class Runtime implements ExecutionServices {
  readonly config: Config
  readonly log: Logger
  readonly callLog: Logger
  readonly registry = new ToolRegistry()
  readonly limiter: Limiter
  readonly metrics: Metrics
  readonly workspaces: WorkspaceStore
  readonly maxResultBytes: number
  readonly quotaOf: (tenant: string) => TenantQuota
  readonly mcpServers = new Map<string, McpClientSource>()
  readonly tracing: CallTracing | undefined
  readiness: Readiness = 'starting'
  /** HTTP requests being answered (the MCP event streams excepted): a drain waits for them. */
  activeRequests = 0
  /** The runner chosen at start-up (set by `finishStart`; the tools hold a DeferredRunner that waits for it). */
  runner!: ProcessRunner
  readonly #kill = new AbortController()
  readonly #draining = new AbortController()
  readonly #options: RuntimeOptions
  /** Long-running processes (their tools and routes are on when `tools.builtin` globs match the process tools). */
  readonly processes: ProcessTable
  /** Finds a workspace's processes on whichever instance sharing the root runs them. */
  readonly processLocator: ProcessLocator
  /** With processes on: a call that runs commands in a workspace whose processes run on another instance runs there. */
  runAtProcessHome: ExecutionServices['runAtProcessHome']
  /** This run of the service, as /healthz names it to the other instances (a restart is another run). */
  readonly instanceId = randomUUID()
  /** What the tools run processes with until start-up has chosen the sandbox. */
  readonly #deferredRunner = new DeferredRunner(() => this.#chooseRunner())
  #executables: ExecutableSource | undefined
  #closeMessages: () => Promise<void> = async () => {}
  #choosingRunner: Promise<ProcessRunner> | undefined
  /** The workspaces' loopback networks (a sandbox with `sandbox.network` off); the bubblewrap runner joins them. */
  readonly #networks: WorkspaceNetworks | undefined
  #finishing: Promise<void> | undefined
  #closed = false

  constructor (config: Config, log: Logger, options: RuntimeOptions = {}) {
    this.config = config
    this.log = log
    this.callLog = log.child({}, { redact: [] })
    this.#options = options
    this.tracing = options.tracing
    this.maxResultBytes = config.limits.max_result_bytes
    this.quotaOf = quotaResolver(config.workspaces)
    this.limiter = new Limiter({
      name: 'service',
      maxConcurrent: config.limits.max_concurrent,
      maxQueue: config.limits.max_queue,
      queueTimeoutMs: config.limits.queue_timeout_ms,
    })
    this.metrics = createMetrics({ inFlight: () => this.limiter.inFlight, queued: () => this.limiter.queued }, { defaultMetrics: options.defaultMetrics })
    this.workspaces = new WorkspaceStore({
      root: config.workspaces.root,
      ephemeralRoot: config.workspaces.ephemeral_root,
      ttlSeconds: config.workspaces.ttl_seconds,
      sweepIntervalSeconds: config.workspaces.sweep_interval_seconds,
      log,
      maxWorkspacesOf: (tenant) => this.quotaOf(tenant).maxWorkspaces,
    })
    // Every command of a persistent workspace shares its network; an ephemeral one's (an MCP session's) once a process starts there.
    if (config.sandbox.mode !== 'none' && !config.sandbox.network) {
      this.#networks = new WorkspaceNetworks({ sharedByEveryCommand: (dir) => isInside(this.workspaces.root, dir) && !isInside(this.workspaces.ephemeralRoot, dir) })
    }
    const records = new ProcessRecords(() => this.workspaces.root)
    const self = config.server.advertise_url?.replace(/\/$/, '') ?? null
    this.processes = new ProcessTable({
      config: config.tools.processes,
      denylist: config.tools.exec_shell.denylist ?? DEFAULT_DENYLIST,
      runner: this.#deferredRunner,
      store: this.workspaces,
      records,
      self: { url: self, instance: this.instanceId },
    })
    // A forwarded call may take as long as the slowest tool that runs commands (omega's bash: 120 s), and a kill's grace.
    const longestCallMs = (Math.max(config.tools.exec_shell.timeout_max, config.tools.executable_timeout_seconds, config.tools.spawn.timeout_default, 120) + 2) * 1000
    this.processLocator = new ProcessLocator({ table: this.processes, records, peers: new Peers(new PeerKey(() => path.join(this.workspaces.root, PEER_KEY_FILE)), () => this.tracing?.outgoingHeaders() ?? {}), self, keepEnded: config.tools.processes.keep_ended, longestCallMs })
  }

  /** Fires when running calls must stop (the drain timeout of a shutdown ran out). */
  get killSignal (): AbortSignal {
    return this.#kill.signal
  }

  /** Fires when the drain of a shutdown begins. */
  get drainSignal (): AbortSignal {
    return this.#draining.signal
  }

  /**
   * Prepares what the first request needs: the workspaces and the built-in
   * and message tools. The rest (choosing the sandbox, the tool sources)
   * waits for `finishStart`, which the app calls once it has answered its
   * first request or shortly after listening, whichever comes first; a
   * process the tools start meanwhile chooses the sandbox itself.
   */
  async start (): Promise<void> {
    await this.workspaces.init()
    const builtins = builtinTools(this.config, this.#deferredRunner, this.processLocator)
    // A workspace that goes takes its processes with it.
    if (builtins.some((tool) => tool.name === 'process_start')) {
      this.workspaces.onRemoval((dir) => this.processes.endWorkspace(dir))
      this.runAtProcessHome = ({ tool, args, maxResultBytes, signal }, caller, workspaceId) => this.processLocator.runAtHome(tool, args, {
        tenant: caller.tenant, workspace: workspaceId, dir: '', credentials: caller.credentials, forwarded: caller.forwarded === true, requestId: caller.requestId, signal, maxResultBytes,
      })
    }
    // After the processes (registered first), so that the network goes once nothing runs in it.
    if (this.#networks) this.workspaces.onRemoval(async (dir) => { this.#networks?.end(dir) })
    this.registry.setGroup('builtin', 'builtin', builtins)
    const messages = messageTools(this.config, this.log)
    this.#closeMessages = messages.close
    this.registry.setGroup('message', 'message', messages.tools)
  }

  /**
   * The start-up work that can wait until the service has answered (app.ts
   * says when): the sandbox probes, the executables' scan and the MCP
   * connections. Resolves when the service is ready (every MCP server has
   * had its first connection attempt, or MAX_SOURCE_WAIT_MS passed); rejects
   * when the sandbox the config requires does not work. Calling it again
   * joins the first call.
   */
  finishStart (): Promise<void> {
    this.#finishing ??= this.#finish()
    return this.#finishing
  }

  async #finish (): Promise<void> {
    if (this.#closed) return
    const runner = await this.#chooseRunner()
    if (this.#closed) return
    const sources: Array<Promise<void>> = [this.#startExecutables(runner)]
    const servers = Object.entries(this.config.tools.mcp_servers)
    if (servers.length > 0) sources.push(...await this.#connectMcpServers(servers))
    const settled = Promise.allSettled(sources)
    const timeout = new Promise((resolve) => setTimeout(resolve, MAX_SOURCE_WAIT_MS).unref())
    await Promise.race([settled, timeout])
    if (this.readiness === 'starting') this.readiness = 'ready'
  }

  /**
   * Starts a client per upstream MCP server; each promise ends with its
   * first connection attempt. The MCP client (the SDK and its schemas) is
   * loaded only when there is a server to connect to.
   */
  async #connectMcpServers (servers: Array<[string, McpServerConfig]>): Promise<Array<Promise<void>>> {
    const { McpClientSource } = await import('./sources/mcp-client.ts')
    if (this.#closed) return []
    return servers.map(([name, serverConfig]) => {
      const source = new McpClientSource({
        name,
        config: serverConfig,
        log: this.log.child({ mcp_server: name }),
        onChange: (tools) => {
          this.registry.setGroup('mcp', name, tools)
          this.metrics.mcpServerUp.set({ server: name }, source.state === 'up' ? 1 : 0)
        },
      })
      this.mcpServers.set(name, source)
      return source.start().then(() => { this.metrics.mcpServerUp.set({ server: name }, source.state === 'up' ? 1 : 0) })
    })
  }

  /** The probes that choose the process runner, run once, on the first need (a process to start, or `finishStart`). */
  #chooseRunner (): Promise<ProcessRunner> {
    this.#choosingRunner ??= (async () => {
      // Every workspace but a call's own is hidden from its processes.
      const { root, ephemeralRoot } = this.workspaces
      const workspaceRoots = isInside(root, ephemeralRoot) ? [root] : [root, ephemeralRoot]
      this.runner = await createRunner(this.config.sandbox, { log: this.log, hidePaths: workspaceRoots, secretFiles: this.#options.hidePaths ?? [], networks: this.#networks })
      this.metrics.sandboxMode.set({ mode: this.runner.mode }, 1)
      this.log.info({ sandbox: this.runner.mode }, 'sandbox chosen: tool processes can run')
      return this.runner
    })()
    return this.#choosingRunner
  }

  /** Resolves when start-up is complete or has failed (tests; the server does not wait), starting `finishStart` if nothing has. */
  async whenReady (timeoutMs = MAX_SOURCE_WAIT_MS + 1000): Promise<void> {
    const timeout = new Promise((resolve) => setTimeout(resolve, timeoutMs).unref())
    await Promise.race([this.finishStart().catch(() => {}), timeout])
  }

  /** The states of the MCP servers, for /readyz. */
  mcpStates (): Record<string, string> {
    return Object.fromEntries(Object.keys(this.config.tools.mcp_servers).map((name) => [name, this.mcpServers.get(name)?.state ?? 'connecting']))
  }

  /** Stops taking calls: readiness turns 503 and new calls are refused as Overloaded. */
  beginDrain (): void {
    this.readiness = 'draining'
    this.limiter.close()
    this.#draining.abort()
  }

  /**
   * Graceful stop, part one: refuse new calls, stop the processes, and wait
   * (at most `timeoutMs`) for the running calls to finish. `close` then
   * cancels whatever is left.
   */
  async drain (timeoutMs: number): Promise<void> {
    this.beginDrain()
    // The processes stop now, as they would at the end: who follows their output gets their end
    // (a stream's `end` event, a long-poll's answer) instead of a connection cut when the service exits.
    void this.processes.stopAll('TERM')
    const deadline = Date.now() + timeoutMs
    while ((this.limiter.inFlight > 0 || this.activeRequests > 0) && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 25))
  }

  /**
   * Cancels the running calls (their processes are killed): each still answers
   * (with an error) and removes its workspace, which a later `drain` waits for.
   */
  cancelRunning (): void {
    this.beginDrain()
    this.#kill.abort()
  }

  /** Ends everything: running calls are cancelled (their processes killed), sources closed. */
  async close (): Promise<void> {
    this.#closed = true
    this.cancelRunning()
    this.#executables?.close()
    await Promise.allSettled([...this.mcpServers.values()].map((source) => source.close()))
    await this.#closeMessages()
    await this.processes.close()
    await this.processLocator.peers.close()
    this.#networks?.close()
    this.workspaces.close()
  }

  async #startExecutables (runner: ProcessRunner): Promise<void> {
    if (this.config.tools.dirs.length === 0) return
    this.#executables = new ExecutableSource({
      // Absolute, so that the sandbox can bind them (a config file's relative dirs are resolved at load).
      dirs: this.config.tools.dirs.map((dir) => path.resolve(dir)),
      stub: this.config.tools.stub,
      timeoutSeconds: this.config.tools.executable_timeout_seconds,
      runner,
      log: this.log.child({ source: 'executables' }),
      onChange: (tools) => this.registry.setGroup('executable', 'dirs', tools),
    })
    await this.#executables.start()
  }
}
