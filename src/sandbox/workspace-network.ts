/**
 * One loopback network per workspace: with `sandbox.network` false, the
 * commands and processes of one workspace share a network namespace of
 * their own, so a server a process starts on 127.0.0.1 answers the
 * workspace's other commands, and no other workspace reaches it.
 *
 * bubblewrap cannot join an existing network namespace, so the network is
 * made once by a short bwrap (new user and network namespaces, `lo` up) and
 * the service keeps its two namespace files open; that bwrap then exits.
 * Each command first enters both namespaces with nsenter, through the
 * service's own descriptors (/proc/<service>/fd/<n>), and then runs the
 * usual bwrap with `--share-net`, whose user namespace nests in the
 * network's. Works unprivileged: the namespaces belong to the service's
 * uid, which may enter them.
 *
 * No process holds a network: nothing to kill from a sandbox, nothing left
 * when the service dies (its descriptors close with it). A network ends
 * when its workspace is removed, when nothing has run in it for `idleMs`,
 * and at shutdown; while a command that joined it is still starting or
 * running, its descriptors stay open (a closed descriptor's number could be
 * reused for another workspace's network).
 */
import { spawn } from 'node:child_process'
import { closeSync, existsSync, openSync } from 'node:fs'
import { once } from 'node:events'
import { BWRAP, NSENTER } from './programs.ts'

/** A network nothing has joined for this long is closed (a later command makes a new one). */
const DEFAULT_IDLE_MS = 5 * 60 * 1000

/** Longer than a bwrap start could ever take: the making is abandoned. */
const MAKE_TIMEOUT_MS = 10_000

export interface WorkspaceNetworkOptions {
  /** Workspaces whose every command joins their network (persistent ones); others get one once a process starts there. */
  sharedByEveryCommand: (dir: string) => boolean
  idleMs?: number | undefined
}

/** A command's place in its workspace's network: the prefix that enters it, and the release once the command has ended. */
export interface NetworkLease {
  prefix: string[]
  release: () => void
}

interface Network {
  userFd: number
  netFd: number
  users: number
  idle: NodeJS.Timeout | undefined
  /** Its workspace went (or the service stops): closed once no command uses it. */
  ending: boolean
  /** Its descriptors are closed: their numbers may already name something else. */
  closed: boolean
}

/** Whether nsenter is where the networks need it. */
export const nsenterAvailable = (): boolean => existsSync(NSENTER)

export class WorkspaceNetworks {
  readonly #options: WorkspaceNetworkOptions
  readonly #networks = new Map<string, Network>()
  readonly #making = new Map<string, Promise<Network>>()
  #closed = false

  constructor (options: WorkspaceNetworkOptions) {
    this.#options = options
  }

  /** How many workspaces have a network now (tests). */
  get size (): number {
    return this.#networks.size
  }

  /**
   * Joins the network of the workspace at `dir`, made on first need.
   * Undefined when the command gets a network of its own: an ephemeral
   * workspace before a long-running process started in it (an MCP
   * session's), or after shutdown.
   */
  async join (dir: string, longRunning: boolean): Promise<NetworkLease | undefined> {
    if (this.#closed) return undefined
    let network = this.#networks.get(dir)
    if (!network) {
      if (!longRunning && !this.#options.sharedByEveryCommand(dir)) return undefined
      network = await this.#make(dir)
    }
    // Ended while it was being made (its workspace removed, the service stopping): never leased, since its
    // descriptors may be closed and their numbers reused; the command gets a network of its own.
    if (network.ending) {
      if (network.users === 0) closeNetwork(network)
      return undefined
    }
    return this.#lease(network, dir)
  }

  /** The workspace is being removed (its processes were killed first): its network goes. */
  end (dir: string): void {
    const network = this.#networks.get(dir)
    if (network) this.#end(dir, network)
  }

  /** Shutdown: every network goes, and none is made after. */
  close (): void {
    this.#closed = true
    for (const [dir, network] of this.#networks) this.#end(dir, network)
  }

  #lease (network: Network, dir: string): NetworkLease {
    network.users++
    clearTimeout(network.idle)
    network.idle = undefined
    let released = false
    const self = `/proc/${process.pid}/fd`
    return {
      prefix: [NSENTER, `--user=${self}/${network.userFd}`, `--net=${self}/${network.netFd}`, '--preserve-credentials', '--'],
      release: () => {
        if (released) return
        released = true
        if (--network.users > 0) return
        if (network.ending) closeNetwork(network)
        else network.idle = setTimeout(() => this.#end(dir, network), this.#options.idleMs ?? DEFAULT_IDLE_MS).unref()
      },
    }
  }

  #make (dir: string): Promise<Network> {
    let making = this.#making.get(dir)
    if (!making) {
      making = makeNetwork().then((network) => {
        // Made while the service stopped: it goes at once (join gives the command a network of its own).
        if (this.#closed) network.ending = true
        else this.#networks.set(dir, network)
        return network
      }).finally(() => this.#making.delete(dir))
      this.#making.set(dir, making)
    }
    return making
  }

  /** Forgets the network; its descriptors close now, or when the last command using it ends. */
  #end (dir: string, network: Network): void {
    clearTimeout(network.idle)
    network.ending = true
    if (this.#networks.get(dir) === network) this.#networks.delete(dir)
    if (network.users === 0) closeNetwork(network)
  }
}

function closeNetwork (network: Network): void {
  if (network.closed) return
  network.closed = true
  closeSync(network.userFd)
  closeSync(network.netFd)
}

/**
 * A new user and network namespace with `lo` up, held by two descriptors.
 * The bwrap that makes them prints its pid once the namespaces are set up
 * and waits on its stdin; the descriptors are opened while it still runs
 * (so the pid cannot belong to another process yet), then its stdin closes
 * and it exits.
 */
async function makeNetwork (): Promise<Network> {
  const holder = spawn(BWRAP, [
    '--ro-bind', '/', '/',
    '--unshare-user',
    '--unshare-net',
    '--die-with-parent',
    '--',
    '/bin/sh', '-c', 'echo $$; exec cat',
  ], { stdio: ['pipe', 'pipe', 'pipe'], env: {} })
  const exited = once(holder, 'exit').catch(() => {})
  // A spawn that fails (EMFILE: no descriptor left for its pipes) has no pipes and emits 'error', never
  // 'exit': that command fails, never the service.
  await new Promise((resolve, reject) => { holder.once('spawn', resolve).once('error', reject) })
  const timer = setTimeout(() => holder.kill('SIGKILL'), MAKE_TIMEOUT_MS).unref()
  let stderr = ''
  holder.stderr.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk })
  try {
    const pid = await firstLine(holder.stdout)
    if (!/^\d+$/.test(pid)) throw new Error(`the workspace network could not be made: ${stderr.trim() || 'bwrap ended early'}`)
    const userFd = openSync(`/proc/${pid}/ns/user`, 'r')
    let netFd: number
    try {
      netFd = openSync(`/proc/${pid}/ns/net`, 'r')
    } catch (error) {
      closeSync(userFd)
      throw error
    }
    return { userFd, netFd, users: 0, idle: undefined, ending: false, closed: false }
  } finally {
    holder.stdin.end()
    clearTimeout(timer)
    if (holder.exitCode === null && holder.signalCode === null) await exited
  }
}

/** The first line of a stream, or '' when it ends without one. */
async function firstLine (stream: NodeJS.ReadableStream): Promise<string> {
  let text = ''
  stream.setEncoding('utf8')
  for await (const chunk of stream) {
    text += chunk as string
    const end = text.indexOf('\n')
    if (end >= 0) return text.slice(0, end)
  }
  return ''
}
