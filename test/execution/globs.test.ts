/**
 * Tool-name globs: `*` and `?`, everything else literal, and a cost bounded
 * by the text given (a caller's `allowed` filter is one of these lists).
 */
import { describe, expect, it } from 'vitest'
import { globMatcher, MAX_GLOB_LIST_CHARS, parseGlobList } from '../../src/execution/globs.ts'
import { ToolError } from '../../src/errors.ts'

const matches = (glob: string, name: string): boolean => globMatcher([glob])(name)

describe('globMatcher', () => {
  it.each([
    ['*', 'read_file', true],
    ['*', '', true],
    ['', '', true],
    ['', 'a', false],
    ['read_*', 'read_file', true],
    ['read_*', 'read_', true],
    ['read_*', 'xread_file', false],
    ['*_file', 'write_file', true],
    ['*_file', 'write_files', false],
    ['fx__*', 'fx__greet', true],
    ['fx__*', 'fy__greet', false],
    ['claude-flow__memory_*', 'claude-flow__memory_usage', true],
    ['process_*', 'process_start', true],
    ['?ead_file', 'read_file', true],
    ['?ead_file', 'ead_file', false],
    ['a*b*c', 'abc', true],
    ['a*b*c', 'aXbYc', true],
    ['a*b*c', 'acb', false],
    ['a*a', 'a', false],
    ['a*a', 'aa', true],
    ['*a*a*', 'banana', true],
    ['*x*', 'banana', false],
    ['a**b', 'ab', true],
    ['*?', '', false],
    ['*?', 'x', true],
    ['read_file', 'read_file', true],
    ['read_file', 'Read_file', false],
    ['read.file', 'read_file', false],
    ['[a]', 'a', false],
    ['[a]', '[a]', true],
    ['{a,b}', '{a,b}', true],
    ['+(a)', 'a', false],
    ['dir/*', 'dir/x', true],
  ])('%j against %j: %s', (glob, name, expected) => {
    expect(matches(glob, name)).toBe(expected)
  })

  it('accepts a name matching any glob of a list; an empty list matches nothing', () => {
    expect(globMatcher(['read_*', 'exec_shell'])('exec_shell')).toBe(true)
    expect(globMatcher(['read_*', 'exec_shell'])('write_file')).toBe(false)
    expect(globMatcher([])('anything')).toBe(false)
  })

  it('matches crafted globs against long names at once (they held a regular-expression engine for minutes)', () => {
    const names = ['github__create_pull_request_review', 'e'.repeat(120), 'a'.repeat(256)]
    const crafted = ['+(*)'.repeat(6) + 'X', '*e'.repeat(40) + 'X', '*?'.repeat(60) + 'X', `*${'?a'.repeat(64)}*b`, '*a'.repeat(300)]
    for (const glob of crafted) for (const name of names) expect(matches(glob, name)).toBe(false)
    expect(matches('*?'.repeat(60), 'e'.repeat(120))).toBe(true)
  })
})

describe('parseGlobList', () => {
  it('splits on commas, trims, drops blanks, and refuses a list past its length', () => {
    expect(parseGlobList(' read_*, ,exec_shell,')).toEqual(['read_*', 'exec_shell'])
    expect(() => parseGlobList('*'.repeat(MAX_GLOB_LIST_CHARS + 1))).toThrow(ToolError)
  })
})
