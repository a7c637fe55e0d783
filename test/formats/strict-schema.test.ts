/** OpenAI strict mode: the rewriting (src/formats/strict-schema.ts) held against a checker written from OpenAI's rules. */
import { describe, expect, it } from 'vitest'
import { toStrictSchema } from '../../src/formats/strict-schema.ts'
import { strictViolations } from '../support/openai-strict.ts'

describe('strict schemas', () => {
  it('closes objects, requires every property and makes the optional ones nullable', () => {
    const strict = toStrictSchema({
      type: 'object',
      properties: {
        path: { type: 'string', description: 'p', minLength: 1 },
        offset: { type: 'integer', minimum: 1 },
        mode: { type: 'string', enum: ['a', 'b'] },
        nested: { type: 'object', properties: { deep: { type: 'boolean' } } },
        list: { type: 'array', items: { type: 'object', properties: { x: { type: 'number' } }, required: ['x'] } },
      },
      required: ['path'],
    })
    expect(strict).toEqual({
      type: 'object',
      properties: {
        path: { type: 'string', description: 'p' },
        offset: { type: ['integer', 'null'], minimum: 1 },
        mode: { anyOf: [{ type: 'string', enum: ['a', 'b'] }, { type: 'null' }] },
        nested: { type: ['object', 'null'], properties: { deep: { type: ['boolean', 'null'] } }, required: ['deep'], additionalProperties: false },
        list: { type: ['array', 'null'], items: { type: 'object', properties: { x: { type: 'number' } }, required: ['x'], additionalProperties: false } },
      },
      required: ['path', 'offset', 'mode', 'nested', 'list'],
      additionalProperties: false,
    })
    expect(strictViolations(strict)).toEqual([])
  })

  it('makes an optional argument nullable also where a choice or a reference beside its type would refuse null', () => {
    const strict = toStrictSchema({
      type: 'object',
      properties: {
        mode: { type: 'string', anyOf: [{ const: 'fast' }, { const: 'slow' }] },
        item: { $ref: '#/$defs/Item' },
      },
      $defs: { Item: { type: 'object', properties: { label: { type: 'string' } }, required: ['label'] } },
    })
    expect(strict?.['properties']).toEqual({
      mode: { anyOf: [{ type: 'string', anyOf: [{ const: 'fast' }, { const: 'slow' }] }, { type: 'null' }] },
      item: { anyOf: [{ $ref: '#/$defs/Item' }, { type: 'null' }] },
    })
    expect(strictViolations(strict)).toEqual([])
  })

  it('has no strict form for what cannot be closed or is not supported', () => {
    // A required name that is no property: closed, the object could not hold it.
    expect(toStrictSchema({ type: 'object', properties: { a: { type: 'string' } }, required: ['a', 'token'] })).toBeUndefined()
    // A schema of no type (any value): OpenAI wants each schema's type.
    expect(toStrictSchema({ type: 'object', properties: { v: { description: 'anything' } } })).toBeUndefined()
    expect(toStrictSchema({ type: 'object', properties: { env: { type: 'object', additionalProperties: { type: 'string' } } } })).toBeUndefined()
    expect(toStrictSchema({ type: 'object', properties: { any: { type: 'object' } } })).toBeUndefined()
    expect(toStrictSchema({ type: 'object', properties: { v: { oneOf: [{ type: 'string' }, { type: 'number' }] } } })).toBeUndefined()
    expect(toStrictSchema({ type: 'object', properties: { t: { type: 'array', items: [{ type: 'string' }] } } })).toBeUndefined()
    expect(toStrictSchema({ type: 'string' })).toBeUndefined()
    // An array of anything: OpenAI refuses an array schema without items (as MCP servers often write them).
    expect(toStrictSchema({ type: 'object', properties: { tags: { type: 'array' } }, required: ['tags'] })).toBeUndefined()
    expect(toStrictSchema({ type: 'object', properties: { m: { type: ['array', 'null'], maxItems: 3 } } })).toBeUndefined()
  })

  it('keeps only the string formats OpenAI takes', () => {
    const strict = toStrictSchema({
      type: 'object',
      properties: { url: { type: 'string', format: 'uri' }, when: { type: 'string', format: 'date-time' }, id: { type: 'string', format: 'uuid' }, odd: { type: 'string', format: 7 } },
      required: ['url', 'when', 'id', 'odd'],
    })
    expect(strict?.['properties']).toEqual({ url: { type: 'string' }, when: { type: 'string', format: 'date-time' }, id: { type: 'string', format: 'uuid' }, odd: { type: 'string' } })
    expect(strictViolations(strict)).toEqual([])
  })

  it('the checker itself catches what a strict schema must not have', () => {
    expect(strictViolations({ type: 'object', properties: { a: { type: 'string' } } })).toEqual([
      'parameters: additionalProperties must be false',
      'parameters: property a is not required',
    ])
    expect(strictViolations({ type: 'object', properties: {}, additionalProperties: false, oneOf: [] })).toEqual(['parameters: unsupported keyword oneOf'])
    expect(strictViolations({ type: 'object', properties: { a: { type: 'array' }, u: { type: 'string', format: 'uri' } }, required: ['a', 'u'], additionalProperties: false })).toEqual([
      'parameters.a: array without items',
      'parameters.u: unsupported format uri',
    ])
  })
})
