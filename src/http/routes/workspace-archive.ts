/**
 * A workspace's archive: upload (PUT, a .tar.gz taken as a stream) and
 * download (GET). Registered as its own encapsulated plugin, so the stream
 * parser of the archive content types applies to these routes only.
 */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Readable } from 'node:stream'
import { Type } from '@sinclair/typebox'
import type { Logger } from 'pino'
import { stageArchive, workspaceSeen } from '../../workspaces/archive-extract.ts'
import { packWorkspace } from '../../workspaces/archive-pack.ts'
import { acquireAll } from '../../execution/execute.ts'
import { Limiter } from '../../execution/limiter.ts'
import { workspaceQuota } from '../../workspaces/quotas.ts'
import type { Runtime } from '../../runtime.ts'
import { ToolError } from '../../errors.ts'
import { callerOf } from '../caller.ts'
import { problems } from '../schemas.ts'
import { ensureMayChangeFiles, ensureMayReadFiles, IdParams } from '../workspace-access.ts'

export const ARCHIVE_CONTENT_TYPES = ['application/gzip', 'application/x-gzip', 'application/x-tar', 'application/octet-stream']

const ExtractReply = Type.Object({
  id: Type.String(),
  files: Type.Integer(),
  directories: Type.Integer(),
  symlinks: Type.Integer(),
  skipped: Type.Array(Type.Object({ path: Type.String(), reason: Type.String() }), { description: 'the first 100 entries left out, with why' }),
  skipped_count: Type.Integer({ description: 'every entry left out' }),
})

export const archiveRoutes: FastifyPluginAsyncTypebox<{ runtime: Runtime }> = async (app, { runtime }) => {
  const store = runtime.workspaces
  const serviceLimits = runtime.config.limits
  // Archives move at the pace of their client: each direction takes turns in a limiter of its own (a quarter of the
  // service's slots), so that clients that send or read slowly hold no slot a tool call needs.
  const archiveLimiter = (name: string): Limiter => new Limiter({
    name,
    maxConcurrent: Math.max(1, Math.ceil(serviceLimits.max_concurrent / 4)),
    maxQueue: serviceLimits.max_queue,
    queueTimeoutMs: serviceLimits.queue_timeout_ms,
  })
  const uploads = archiveLimiter('archive uploads')
  const downloads = archiveLimiter('archive downloads')
  // The body is read as the extraction goes, never buffered (stageArchive counts and bounds it).
  app.addContentTypeParser(ARCHIVE_CONTENT_TYPES, (_request, payload, done) => { done(null, payload) })

  app.put('/v1/workspaces/:id/archive', {
    schema: {
      summary: 'Upload a .tar.gz into the workspace (created on first use); hostile entries are skipped and listed',
      tags: ['workspaces'],
      params: IdParams,
      response: { 200: ExtractReply, ...problems(400, 401, 403, 404, 413, 503) },
    },
  }, async (request, reply) => {
    try {
      ensureMayChangeFiles(request.principal)
      const body = request.body
      if (!(body instanceof Readable)) throw new ToolError('BadRequest', 'send the .tar.gz as application/gzip')
      const maxBodyBytes = runtime.config.server.body_limit_bytes
      if (Number(request.headers['content-length']) > maxBodyBytes) throw new ToolError('PayloadTooLarge', `the body is larger than ${maxBodyBytes} bytes`)
      // The client leaving, or the drain of a shutdown running out, stops the upload.
      const signal = AbortSignal.any([callerOf(request, reply).signal, runtime.killSignal])
      const release = await acquireAll([uploads], signal, runtime.metrics, request.principal.tenant)
      try {
        const { tenant } = request.principal
        const { id } = request.params
        // One that exists is held while its archive is read (its TTL renewed, no sweep takes it), as it was seen then.
        const held = await store.acquire(tenant, id, { existing: true }).catch((error: unknown) => {
          if (error instanceof ToolError && error.code === 'NotFound') return undefined
          throw error
        })
        try {
          const seen = held === undefined ? undefined : workspaceSeen(held.dir)
          const limits = { maxEntries: runtime.config.workspaces.max_archive_entries, maxBytes: runtime.config.workspaces.max_archive_bytes, maxBodyBytes }
          const staged = await stageArchive(body, store.stagingDir, limits, signal)
          try {
            // A new one is made only now: an archive refused while it was read has made none, and removes none.
            const lease = held ?? await store.acquire(tenant, id)
            try {
              await staged.moveInto(lease.dir, workspaceQuota(lease.dir, runtime.quotaOf(tenant).maxWorkspaceBytes), held === undefined ? workspaceSeen(lease.dir) : seen)
            } finally {
              if (lease !== held) await lease.release()
            }
            return { id, ...staged.report }
          } finally {
            await staged.discard()
          }
        } finally {
          await held?.release()
        }
      } finally {
        release()
      }
    } catch (error) {
      // Stopped by the shutdown, it changed nothing (its staging is discarded): another instance can take it.
      if (runtime.killSignal.aborted) throw new ToolError('Overloaded', 'the service is shutting down and stopped this upload before it finished; send it again', { retryAfterSeconds: 1 })
      throw error
    }
  })

  app.get('/v1/workspaces/:id/archive', {
    schema: {
      summary: 'Download the workspace as a .tar.gz',
      tags: ['workspaces'],
      params: IdParams,
      response: { 200: { description: 'The workspace as a .tar.gz', content: { 'application/gzip': { schema: { type: 'string', format: 'binary' } } } }, ...problems(400, 401, 403, 404, 503) },
    },
  }, async (request, reply) => {
    ensureMayReadFiles(request.principal)
    const record = await store.find(request.principal.tenant, request.params.id)
    const { signal } = callerOf(request, reply)
    const release = await acquireAll([downloads], signal, runtime.metrics, request.principal.tenant)
    // A client gone just as its turn came would never close the answer that gives the slot back.
    if (request.raw.socket.destroyed) {
      release()
      return reply
    }
    const archive = packWorkspace(record.dir, request.log as Logger)
    // A token revoked meanwhile ends the download, as it ends calls and streams (the client sees it cut short);
    // so does a client that takes nothing for request_timeout_ms, which would hold its slot for good (app.ts).
    const stop = (): void => { archive.destroy() }
    signal.addEventListener('abort', stop, { once: true })
    reply.raw.once('close', () => {
      signal.removeEventListener('abort', stop)
      release()
    })
    const filename = `${record.id.replace(/[^A-Za-z0-9._-]/g, '_').slice(0, 100)}.tar.gz`
    return reply.type('application/gzip').header('content-disposition', `attachment; filename="${filename}"`).send(archive)
  })
}
