/** The registry: layers in the seeds' order, replacement by name, groups, lookups and catalog filtering. */
import { describe, expect, it } from 'vitest'
import { globMatcher } from '../../src/execution/globs.ts'
import { ToolRegistry } from '../../src/execution/registry.ts'
import type { AnyTool, ToolSource } from '../../src/execution/tool.ts'

function tool (name: string, source: ToolSource, description = name, internal = false): AnyTool {
  return { name, description, parameters: { type: 'object' }, source, internal, execute: async () => description }
}

describe('ToolRegistry', () => {
  it('lets a later layer replace an earlier one, whatever the order of registration', () => {
    const registry = new ToolRegistry()
    registry.setGroup('message', 'message', [tool('message', 'builtin', 'the message tool')])
    registry.setGroup('mcp', 'fs', [tool('read_file', 'mcp', 'from mcp'), tool('message', 'mcp', 'mcp message')])
    registry.setGroup('builtin', 'builtin', [tool('read_file', 'builtin', 'built-in'), tool('exec_shell', 'builtin')])
    expect(registry.get('read_file')?.description).toBe('from mcp')
    expect(registry.get('message')?.description).toBe('the message tool')
    expect(registry.list().map((t) => t.name)).toEqual(['exec_shell', 'message', 'read_file'])
  })

  it('replaces a group as a whole and removes it with an empty list', () => {
    const registry = new ToolRegistry()
    registry.setGroup('mcp', 'a', [tool('a__x', 'mcp'), tool('a__y', 'mcp')])
    registry.setGroup('mcp', 'b', [tool('b__x', 'mcp')])
    const before = registry.version
    registry.setGroup('mcp', 'a', [tool('a__z', 'mcp')])
    expect(registry.version).toBeGreaterThan(before)
    expect(registry.list().map((t) => t.name)).toEqual(['a__z', 'b__x'])
    registry.setGroup('mcp', 'a', [])
    expect(registry.list().map((t) => t.name)).toEqual(['b__x'])
    expect(registry.get('a__z')).toBeUndefined()
  })

  it('finds built-ins case-insensitively, but other sources only by their exact names', () => {
    const registry = new ToolRegistry()
    registry.setGroup('builtin', 'builtin', [tool('read_file', 'builtin')])
    registry.setGroup('executable', 'dirs', [tool('Weather', 'executable')])
    expect(registry.get('READ_FILE')?.name).toBe('read_file')
    expect(registry.get('Read_File')?.name).toBe('read_file')
    expect(registry.get('Weather')?.name).toBe('Weather')
    expect(registry.get('weather')).toBeUndefined()
  })

  it('lists sorted by code point, hides internal tools unless allowed globs select them, and applies a scope', () => {
    const registry = new ToolRegistry()
    registry.setGroup('builtin', 'builtin', [tool('write_file', 'builtin'), tool('Zeta', 'builtin'), tool('read_file', 'builtin')])
    registry.setGroup('mcp', 'hidden', [tool('hidden__secret', 'mcp', '', true), tool('hidden__other', 'mcp', '', true)])
    expect(registry.list().map((t) => t.name)).toEqual(['Zeta', 'read_file', 'write_file'])
    expect(registry.list({ allowed: globMatcher(['hidden__s*']) }).map((t) => t.name)).toEqual(['hidden__secret'])
    expect(registry.list({ allowed: globMatcher(['*']), scope: globMatcher(['read_*', 'hidden__*']) }).map((t) => t.name)).toEqual(['hidden__other', 'hidden__secret', 'read_file'])
  })
})
