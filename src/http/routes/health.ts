/** /healthz, /readyz, /metrics and /openapi.json: what operators and orchestrators ask. */
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox'
import { Type } from '@sinclair/typebox'
import type { Runtime } from '../../runtime.ts'
import { ToolError } from '../../errors.ts'
import { INSTANCE_HEADER } from '../../processes/peers.ts'
import { problems } from '../schemas.ts'

export const healthRoutes: FastifyPluginAsyncTypebox<{ runtime: Runtime }> = async (app, { runtime }) => {
  app.get('/healthz', {
    schema: { summary: 'Liveness: 200 while the process is alive', tags: ['operations'], response: { 200: Type.Object({ status: Type.Literal('ok') }) } },
    // Its answer is a constant: plain JSON.stringify writes it, so that the first answer of a starting
    // service (what an orchestrator waits for) does not wait for a serializer to be compiled.
    serializerCompiler: () => JSON.stringify,
    exposeHeadRoute: true,
  }, async (_request, reply) => {
    // Which run of the service answers: another instance forwards a process's requests only to the run that started it.
    reply.header(INSTANCE_HEADER, runtime.instanceId)
    return { status: 'ok' as const }
  })

  app.get('/readyz', {
    schema: {
      summary: 'Readiness: 200 when serving; 503 while starting or draining',
      tags: ['operations'],
      response: {
        200: Type.Object({ status: Type.Literal('ready'), sandbox: Type.String(), mcp_servers: Type.Record(Type.String(), Type.String()) }),
        ...problems(503),
      },
    },
    // What an orchestrator polls from the start: written by JSON.stringify, as /healthz's answer is.
    serializerCompiler: () => JSON.stringify,
    exposeHeadRoute: true,
  }, async () => {
    const state = { sandbox: runtime.runner?.mode ?? 'unknown', mcp_servers: runtime.mcpStates() }
    if (runtime.readiness === 'ready') return { status: 'ready' as const, ...state }
    throw new ToolError('Overloaded', `the service is ${runtime.readiness}`, { extra: { readiness: runtime.readiness, ...state } })
  })

  app.get('/metrics', {
    schema: { summary: 'Prometheus metrics', tags: ['operations'], produces: ['text/plain'] },
  }, async (_request, reply) => {
    const text = await runtime.metrics.registry.metrics()
    return reply.type(runtime.metrics.registry.contentType).send(text)
  })

  app.get('/openapi.json', {
    schema: { summary: 'This OpenAPI 3.1 document', tags: ['operations'] },
  }, async () => app.openApiDocument())
}
