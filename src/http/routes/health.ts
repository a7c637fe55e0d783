/** /healthz, /readyz, /metrics and /openapi.json: what operators and orchestrators ask. */
import { Type } from '@sinclair/typebox'
import type { FastifyInstance } from 'fastify'
import type { Runtime } from '../../runtime.ts'
import { PROBLEM_CONTENT_TYPE, toProblem, ToolError } from '../../errors.ts'

export function healthRoutes (app: FastifyInstance, runtime: Runtime): void {
  app.get('/healthz', {
    schema: { summary: 'Liveness: 200 while the process is alive', tags: ['operations'], response: { 200: Type.Object({ status: Type.Literal('ok') }) } },
  }, async () => ({ status: 'ok' as const }))

  app.get('/readyz', {
    schema: { summary: 'Readiness: 200 when serving; 503 while starting or draining', tags: ['operations'] },
  }, async (request, reply) => {
    const state = { sandbox: runtime.runner?.mode ?? 'unknown', mcp_servers: runtime.mcpStates() }
    if (runtime.readiness === 'ready') return { status: 'ready', ...state }
    const problem = toProblem(new ToolError('Overloaded', `the service is ${runtime.readiness}`), request.id)
    return reply.code(503).type(PROBLEM_CONTENT_TYPE).send({ ...problem, readiness: runtime.readiness, ...state })
  })

  app.get('/metrics', {
    schema: { summary: 'Prometheus metrics', tags: ['operations'], produces: ['text/plain'] },
  }, async (_request, reply) => {
    const text = await runtime.metrics.registry.metrics()
    return reply.type(runtime.metrics.registry.contentType).send(text)
  })

  app.get('/openapi.json', {
    schema: { summary: 'This OpenAPI 3.1 document', tags: ['operations'] },
  }, async () => app.swagger())
}
