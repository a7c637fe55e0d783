/** Persistent workspaces: create, inspect, delete, and archives up and down. */
import { type Static, Type } from '@sinclair/typebox'
import type { FastifyInstance } from 'fastify'
import { extractArchive, packWorkspace } from '../core/archive.ts'
import type { Runtime } from '../core/runtime.ts'
import { workspaceQuota } from '../core/quotas.ts'
import { describeWorkspace } from '../core/workspaces.ts'
import { problems } from './schemas.ts'

const IdParams = Type.Object({ id: Type.String() })

const CreateBody = Type.Object({
  id: Type.Optional(Type.String({ description: '1–256 bytes, no "..", "/", "\\" or control characters; generated when absent' })),
  ttl_seconds: Type.Optional(Type.Integer({ minimum: 1, maximum: 365 * 24 * 3600 })),
}, { additionalProperties: false })

const Created = Type.Object({ id: Type.String(), created_at: Type.String(), expires_at: Type.String() })
const Info = Type.Object({ id: Type.String(), created_at: Type.String(), expires_at: Type.String(), files: Type.Integer(), bytes: Type.Integer() })
const ExtractReply = Type.Object({
  id: Type.String(),
  files: Type.Integer(),
  directories: Type.Integer(),
  symlinks: Type.Integer(),
  skipped: Type.Array(Type.Object({ path: Type.String(), reason: Type.String() })),
})

export const ARCHIVE_CONTENT_TYPES = ['application/gzip', 'application/x-gzip', 'application/x-tar', 'application/octet-stream']

export function workspaceRoutes (app: FastifyInstance, runtime: Runtime): void {
  const store = runtime.workspaces
  app.addContentTypeParser(ARCHIVE_CONTENT_TYPES, { parseAs: 'buffer' }, (_request, body, done) => done(null, body))
  // Every member of a creation is optional, so an empty JSON body asks for the defaults.
  const parseJson = app.getDefaultJsonParser('error', 'error')
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    if (body === '' && request.method === 'POST' && request.url === '/v1/workspaces') return done(null, {})
    parseJson(request, String(body), done)
  })

  app.post<{ Body: Static<typeof CreateBody> | undefined }>('/v1/workspaces', {
    schema: { summary: 'Create a persistent workspace', tags: ['workspaces'], body: CreateBody, response: { 201: Created, ...problems(400, 401, 403, 409) } },
  }, async (request, reply) => {
    const record = await store.create(request.principal.tenant, { id: request.body?.id, ttlSeconds: request.body?.ttl_seconds })
    return reply.code(201).header('location', `/v1/workspaces/${encodeURIComponent(record.id)}`).send(describeWorkspace(record))
  })

  app.get<{ Params: Static<typeof IdParams> }>('/v1/workspaces/:id', {
    schema: { summary: 'A workspace with its file count and size', tags: ['workspaces'], params: IdParams, response: { 200: Info, ...problems(400, 401, 404) } },
  }, async (request) => store.info(request.principal.tenant, request.params.id))

  app.delete<{ Params: Static<typeof IdParams> }>('/v1/workspaces/:id', {
    schema: { summary: 'Delete a workspace and its files', tags: ['workspaces'], params: IdParams, response: { 204: Type.Null(), ...problems(400, 401, 404) } },
  }, async (request, reply) => {
    await store.delete(request.principal.tenant, request.params.id)
    return reply.code(204).send()
  })

  app.put<{ Params: Static<typeof IdParams>, Body: Buffer }>('/v1/workspaces/:id/archive', {
    schema: {
      summary: 'Upload a .tar.gz into the workspace (created on first use); hostile entries are skipped and listed',
      tags: ['workspaces'],
      params: IdParams,
      response: { 200: ExtractReply, ...problems(400, 401, 403, 404, 413) },
    },
  }, async (request) => {
    const { tenant } = request.principal
    const existed = await store.find(tenant, request.params.id).then(() => true, () => false)
    const lease = await store.acquire(tenant, request.params.id)
    try {
      const body = Buffer.isBuffer(request.body) ? request.body : Buffer.alloc(0)
      const limits = { maxEntries: runtime.config.workspaces.max_archive_entries, maxBytes: runtime.config.workspaces.max_archive_bytes }
      const quota = workspaceQuota(lease.dir, runtime.quotaOf(tenant).maxWorkspaceBytes)
      return { id: request.params.id, ...await extractArchive(body, lease.dir, limits, quota) }
    } catch (error) {
      // A refused upload leaves nothing behind, not even the workspace it would have created.
      await lease.release()
      if (!existed) await store.delete(tenant, request.params.id).catch(() => {})
      throw error
    } finally {
      await lease.release()
    }
  })

  app.get<{ Params: Static<typeof IdParams> }>('/v1/workspaces/:id/archive', {
    schema: { summary: 'Download the workspace as a .tar.gz', tags: ['workspaces'], params: IdParams, produces: ['application/gzip'], response: problems(400, 401, 404) },
  }, async (request, reply) => {
    const record = await store.find(request.principal.tenant, request.params.id)
    const filename = `${record.id.replace(/[^A-Za-z0-9._-]/g, '_').slice(0, 100)}.tar.gz`
    return reply.type('application/gzip').header('content-disposition', `attachment; filename="${filename}"`).send(packWorkspace(record.dir))
  })
}
