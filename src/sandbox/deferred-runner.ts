/**
 * The runner the tools hold while start-up is still choosing the real one
 * (createRunner's probes run after the service listens): each run waits for
 * the choice, so that a call made at once runs in the sandbox the config
 * asks for, never without it by accident.
 */
import type { LaunchOptions, PreparedLaunch, ProcessRunner, RunOptions, RunResult, SandboxMode } from './types.ts'

export class DeferredRunner implements ProcessRunner {
  readonly #choose: () => Promise<ProcessRunner>
  #chosen: ProcessRunner | undefined

  /** `choose` starts the choice (or joins it) and resolves to the chosen runner; it rejects when none may run. */
  constructor (choose: () => Promise<ProcessRunner>) {
    this.#choose = choose
  }

  /** The chosen runner's mode; asking before the choice is a mistake (the runtime's `runner` says it once known). */
  get mode (): SandboxMode {
    if (this.#chosen === undefined) throw new Error('the process runner is not chosen yet')
    return this.#chosen.mode
  }

  async run (options: RunOptions): Promise<RunResult> {
    this.#chosen ??= await this.#choose()
    return this.#chosen.run(options)
  }

  async prepare (options: LaunchOptions): Promise<PreparedLaunch> {
    this.#chosen ??= await this.#choose()
    return this.#chosen.prepare(options)
  }
}
