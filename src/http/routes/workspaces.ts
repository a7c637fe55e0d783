/** Persistent workspaces: create, inspect, delete; archives up and down are workspace-archive.ts. */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from '@sinclair/typebox'
import type { Runtime } from '../../runtime.ts'
import { describeWorkspace } from '../../workspaces/record.ts'
import { installJsonBody } from '../plugins/json-body.ts'
import { problems } from '../schemas.ts'
import { ensureMayChangeFiles, IdParams } from '../workspace-access.ts'

const CreateBody = Type.Object({
  id: Type.Optional(Type.String({ description: '1–256 bytes, no "..", "/", "\\" or control characters; generated when absent' })),
  ttl_seconds: Type.Optional(Type.Integer({ minimum: 1, maximum: 365 * 24 * 3600 })),
}, { additionalProperties: false })

const Created = Type.Object({ id: Type.String(), created_at: Type.String(), expires_at: Type.String() })
const Info = Type.Object({ id: Type.String(), created_at: Type.String(), expires_at: Type.String(), files: Type.Integer(), bytes: Type.Integer() })

export const workspaceRoutes: FastifyPluginAsyncTypebox<{ runtime: Runtime }> = async (app, { runtime }) => {
  const store = runtime.workspaces
  // Every member of a creation is optional, so an empty JSON body asks for the defaults.
  installJsonBody(app, () => ({}))

  app.post('/v1/workspaces', {
    config: { idempotent: true },
    schema: { summary: 'Create a persistent workspace', tags: ['workspaces'], body: CreateBody, response: { 201: Created, ...problems(400, 401, 403, 409) } },
  }, async (request, reply) => {
    const record = await store.create(request.principal.tenant, { id: request.body.id, ttlSeconds: request.body.ttl_seconds })
    return reply.code(201).header('location', `/v1/workspaces/${encodeURIComponent(record.id)}`).send(describeWorkspace(record))
  })

  app.get('/v1/workspaces/:id', {
    schema: { summary: 'A workspace with its file count and size', tags: ['workspaces'], params: IdParams, response: { 200: Info, ...problems(400, 401, 404) } },
  }, async (request) => store.info(request.principal.tenant, request.params.id))

  app.delete('/v1/workspaces/:id', {
    schema: { summary: 'Delete a workspace and its files', tags: ['workspaces'], params: IdParams, response: { 204: Type.Null(), ...problems(400, 401, 403, 404) } },
  }, async (request, reply) => {
    ensureMayChangeFiles(request.principal)
    await store.delete(request.principal.tenant, request.params.id)
    return reply.code(204).send(null)
  })
}
