/**
 * The tool registry. Tools come in layers registered in the reference designs' order —
 * built-ins, executables, MCP tools, then `message` — and a later layer's tool
 * replaces an earlier one of the same name. Within a layer, tools come in
 * groups (one MCP server, one executables directory) that a source replaces
 * as a whole when its tool list changes.
 */
import { type NameMatcher } from './globs.ts'
import type { AnyTool } from './tool.ts'

export const LAYERS = ['builtin', 'executable', 'mcp', 'message'] as const
export type Layer = typeof LAYERS[number]

export class ToolRegistry {
  readonly #groups = new Map<string, AnyTool[]>()
  #merged: Map<string, AnyTool> | null = null
  #builtinsLower: Map<string, AnyTool> | null = null
  #version = 0

  /** Replaces the tools of one group (`layer` + `group`); an empty list removes the group. */
  setGroup (layer: Layer, group: string, tools: AnyTool[]): void {
    const key = `${LAYERS.indexOf(layer)}\u0000${layer}\u0000${group}`
    if (tools.length === 0) this.#groups.delete(key)
    else this.#groups.set(key, [...tools])
    this.#merged = null
    this.#builtinsLower = null
    this.#version++
  }

  /** Grows on every change: lets caches (validators) know when to look again. */
  get version (): number {
    return this.#version
  }

  /**
   * Finds a tool by name: exactly first, then case-insensitively among the
   * built-ins (models send `Read_File` now and then; MCP and executable names
   * are the source's own and stay exact).
   */
  get (name: string): AnyTool | undefined {
    const merged = this.#view()
    const exact = merged.get(name)
    if (exact) return exact
    return this.#lowerBuiltins(merged).get(name.toLowerCase())
  }

  /**
   * The tools a caller may see, sorted by name. Internal tools (MCP
   * `internal_only`) appear only when `allowed` globs are given and select them.
   */
  list (filter: { scope?: NameMatcher, allowed?: NameMatcher } = {}): AnyTool[] {
    const out: AnyTool[] = []
    for (const tool of this.#view().values()) {
      if (filter.scope && !filter.scope(tool.name)) continue
      if (filter.allowed ? !filter.allowed(tool.name) : tool.internal === true) continue
      out.push(tool)
    }
    return out.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
  }

  #view (): Map<string, AnyTool> {
    if (this.#merged) return this.#merged
    const merged = new Map<string, AnyTool>()
    const keys = [...this.#groups.keys()].sort()
    for (const key of keys) {
      for (const tool of this.#groups.get(key) ?? []) {
        merged.delete(tool.name)
        merged.set(tool.name, tool)
      }
    }
    this.#merged = merged
    return merged
  }

  #lowerBuiltins (merged: Map<string, AnyTool>): Map<string, AnyTool> {
    if (this.#builtinsLower) return this.#builtinsLower
    const lower = new Map<string, AnyTool>()
    for (const tool of merged.values()) {
      if (tool.source === 'builtin' && !lower.has(tool.name.toLowerCase())) lower.set(tool.name.toLowerCase(), tool)
    }
    this.#builtinsLower = lower
    return lower
  }
}
