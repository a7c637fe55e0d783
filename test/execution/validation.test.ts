/** Argument parsing and validation: JSON-string arguments, schema errors named, each schema compiled once. */
import { pino } from 'pino'
import { describe, expect, it } from 'vitest'
import type { AnyTool } from '../../src/execution/tool.ts'
import { parseArguments, validateArguments } from '../../src/execution/validation.ts'

const log = pino({ level: 'silent' })

function toolWith (parameters: Record<string, unknown>): AnyTool {
  return { name: 't', description: '', parameters, source: 'builtin', execute: async () => null }
}

const codeOf = (fn: () => unknown): string => {
  try {
    fn()
    return 'ok'
  } catch (error) {
    return (error as { code: string }).code
  }
}

describe('parseArguments', () => {
  it('takes objects, JSON strings of objects, and nothing as {}', () => {
    expect(parseArguments({ a: 1 })).toEqual({ a: 1 })
    expect(parseArguments('{"a":1}')).toEqual({ a: 1 })
    expect(parseArguments(undefined)).toEqual({})
    expect(parseArguments(null)).toEqual({})
    expect(parseArguments('  ')).toEqual({})
  })

  it.each([['[1]'], ['"x"'], ['{bad'], [42], [[1]], [true]])('refuses %j with InvalidArgs', (raw) => {
    expect(codeOf(() => parseArguments(raw))).toBe('InvalidArgs')
  })
})

describe('validateArguments', () => {
  const schema = { type: 'object', properties: { path: { type: 'string' }, mode: { enum: ['append', 'overwrite'] } }, required: ['path'], additionalProperties: false }

  it('names the missing, unknown and mistyped properties', () => {
    const tool = toolWith(schema)
    const message = (args: Record<string, unknown>) => {
      try {
        validateArguments(tool, args, log)
        return 'ok'
      } catch (error) {
        return (error as Error).message
      }
    }
    expect(message({ path: 'a' })).toBe('ok')
    expect(message({})).toMatch(/missing required property "path"/)
    expect(message({ path: 'a', extra: 1 })).toMatch(/unknown property "extra"/)
    expect(message({ path: 1 })).toMatch(/arguments\.path must be string/)
    expect(message({ path: 'a', mode: 'x' })).toMatch(/must be one of "append", "overwrite"/)
  })

  it('does not coerce types', () => {
    const tool = toolWith({ type: 'object', properties: { n: { type: 'integer' } } })
    expect(codeOf(() => validateArguments(tool, { n: '5' }, log))).toBe('InvalidArgs')
  })

  it('compiles a schema once per tool, however many calls', () => {
    let reads = 0
    const parameters = new Proxy({ ...schema }, { get: (target, key, receiver) => { reads++; return Reflect.get(target, key, receiver) } })
    const tool = toolWith(parameters)
    validateArguments(tool, { path: 'a' }, log)
    const afterFirst = reads
    for (let i = 0; i < 100; i++) validateArguments(tool, { path: `a${i}` }, log)
    expect(afterFirst).toBeGreaterThan(0)
    expect(reads).toBe(afterFirst)
  })

  it('lets a tool whose schema does not compile run unvalidated', () => {
    const tool = toolWith({ type: 'object', properties: { a: { $ref: '#/nowhere' } } })
    expect(codeOf(() => validateArguments(tool, { a: 1 }, log))).toBe('ok')
  })
})

describe('patterns in a tool\'s schema', () => {
  it('match in linear time: a pattern a backtracking engine takes hours over refuses a short argument at once', () => {
    const tool = toolWith({ type: 'object', properties: { email: { type: 'string', pattern: '^(a+)+$' } } })
    expect(codeOf(() => validateArguments(tool, { email: `${'a'.repeat(64)}!` }, log))).toBe('InvalidArgs')
    expect(codeOf(() => validateArguments(tool, { email: 'a'.repeat(64) }, log))).toBe('ok')
  })

  it('keep a lookahead (which RE2 lacks) when the pattern has no nested repetition; leave a schema unchecked whose pattern has both', () => {
    const digit = toolWith({ type: 'object', properties: { code: { type: 'string', pattern: '^(?=.*\\d)[a-z0-9]+$' } } })
    expect(codeOf(() => validateArguments(digit, { code: 'abc' }, log))).toBe('InvalidArgs')
    expect(codeOf(() => validateArguments(digit, { code: 'a1' }, log))).toBe('ok')
    const lines: Array<Record<string, unknown>> = []
    const warned = pino({ level: 'warn' }, { write: (line: string) => { lines.push(JSON.parse(line)) } })
    const risky = toolWith({ type: 'object', properties: { code: { type: 'string', pattern: '^(?=(a+)+$)' } } })
    expect(codeOf(() => validateArguments(risky, { code: `${'a'.repeat(64)}!` }, warned))).toBe('ok')
    expect(lines.map((line) => line['msg'])).toEqual(['tool schema does not compile; its arguments are not validated here'])
  })
})
