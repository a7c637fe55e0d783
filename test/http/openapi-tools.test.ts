/**
 * The OpenAPI tools document with the schemas upstream servers send: a
 * schema that refers to its own parts keeps working inside the document,
 * checked by resolving it there as an OpenAPI 3.1 client does (Ajv's JSON
 * Schema 2020-12, and swagger-parser's dereferencing).
 */
import SwaggerParser from '@apidevtools/swagger-parser'
import { Ajv2020 } from 'ajv/dist/2020.js'
import { describe, expect, it } from 'vitest'
import type { AnyTool } from '../../src/execution/tool.ts'
import { toolsDocument } from '../../src/http/routes/openapi-tools.ts'

const DOCUMENT_ID = 'https://toolport.example/tools.json'

const toolOf = (name: string, parameters: Record<string, unknown>): AnyTool =>
  ({ name, description: name, parameters, source: 'mcp', execute: async () => null })

type Document = { paths: Record<string, { post: { requestBody: { content: { 'application/json': { schema: Record<string, unknown> } } } } }>, components: { schemas: Record<string, unknown> } }

function bodySchema (document: Document, name: string): Record<string, unknown> {
  const operation = document.paths[`/v1/tools/${name}/invoke`]
  if (!operation) throw new Error(`no operation for ${name}`)
  return operation.post.requestBody.content['application/json'].schema
}

/** Whether `value` is valid arguments of tool `name`, its schema resolved within the document. */
function validInDocument (document: Document, name: string, value: unknown): boolean {
  const ajv = new Ajv2020({ strict: false })
  ajv.addSchema({ $id: DOCUMENT_ID, components: document.components })
  const schema = JSON.parse(JSON.stringify(bodySchema(document, name)).replaceAll('"#/components/', `"${DOCUMENT_ID}#/components/`)) as Record<string, unknown>
  return ajv.validate(schema, value)
}

const Cfg = { type: 'object', required: ['x'], properties: { x: { type: 'integer' } } }

describe('the OpenAPI tools document', () => {
  it('keeps references into a schema\'s own parts resolvable, whatever its members are named', async () => {
    const tools = [
      toolOf('named', { type: 'object', properties: { default: { $ref: '#/$defs/Cfg' }, enum: { $ref: '#/$defs/Cfg' } }, $defs: { Cfg } }),
      toolOf('recursive', { type: 'object', properties: { label: { type: 'string' }, child: { $ref: '#' } }, required: ['label'] }),
      // Anchors resolve in the document as they do alone; data is data.
      toolOf('anchored', { type: 'object', properties: { a: { $ref: '#item' }, b: { $ref: '#/$defs/Cfg' } }, $defs: { Item: { $anchor: 'item', type: 'string' }, Cfg } }),
    ]
    const document = toolsDocument(tools, false) as unknown as Document
    await SwaggerParser.dereference(structuredClone(document) as never)
    expect(validInDocument(document, 'named', { default: { x: 1 }, enum: { x: 2 } })).toBe(true)
    expect(validInDocument(document, 'named', { default: { x: 'one' } })).toBe(false)
    expect(validInDocument(document, 'recursive', { label: 'a', child: { label: 'b' } })).toBe(true)
    expect(validInDocument(document, 'recursive', { label: 'a', child: { label: 3 } })).toBe(false)
    expect(validInDocument(document, 'anchored', { a: 'x', b: { x: 1 } })).toBe(true)
    expect(validInDocument(document, 'anchored', { a: 1 })).toBe(false)
  })

  it('leaves data as it is, a `$ref` in it included', () => {
    const document = toolsDocument([toolOf('with data', { type: 'object', properties: { p: { $ref: '#/$defs/Cfg', default: { $ref: '#/a/value' }, examples: [{ $ref: '#' }] } }, $defs: { Cfg } })], false) as unknown as Document
    const schema = document.components.schemas['with_data.arguments'] as { properties: { p: Record<string, unknown> } }
    expect(schema.properties.p).toEqual({ $ref: '#/components/schemas/with_data.arguments/$defs/Cfg', default: { $ref: '#/a/value' }, examples: [{ $ref: '#' }] })
  })

  it('leaves a schema that is a resource of its own ($id) as it is: its references resolve against its own id', () => {
    const parameters = { $id: 'https://tools.example/t3', type: 'object', properties: { a: { $ref: '#/$defs/S' } }, $defs: { S: { type: 'string' } } }
    const document = toolsDocument([toolOf('t3', parameters)], false) as unknown as Document
    expect(bodySchema(document, 't3')).toEqual(parameters)
    expect(validInDocument(document, 't3', { a: 'x' })).toBe(true)
    expect(validInDocument(document, 't3', { a: 1 })).toBe(false)
  })
})
