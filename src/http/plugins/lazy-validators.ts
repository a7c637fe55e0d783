/**
 * Fastify's own request validators (ajv, through @fastify/ajv-compiler),
 * each compiled by the first request that needs it rather than all before
 * the service answers: compiling every route's schemas was a large part of
 * the start-up, and most routes are not called in a service's first
 * seconds. What a validator accepts and the errors it gives are ajv's, as
 * before.
 */
import { AjvCompiler, type ValidatorFactory } from '@fastify/ajv-compiler'
import type { FastifySchema } from 'fastify'

type Validate = ((data: unknown) => unknown) & { errors?: unknown }
/** What Fastify hands a validator compiler (its published types say a bare schema). */
interface RouteSchema { schema: FastifySchema, method: string, url: string, httpPart?: string }
type CompileRoute = (route: RouteSchema) => Validate

/**
 * Fastify lower-cases a header schema's property names for its own compiler
 * but not for a custom one (this is one): the service's header schemas name
 * their headers in lower case, which this holds them to.
 */
function checkHeaderNames (schema: FastifySchema): void {
  const { properties = {}, required = [] } = schema as { properties?: Record<string, unknown>, required?: string[] }
  const named = [...Object.keys(properties), ...required].find((name) => name !== name.toLowerCase())
  if (named !== undefined) throw new Error(`header schemas name headers in lower case: ${named}`)
}

/**
 * The validator factory of one app (`buildValidator`). Its contexts share
 * one pool, as with Fastify's default: those with the same shared schemas
 * and options share one ajv instance, made by the first request that needs it.
 */
export function lazyValidators (): ValidatorFactory {
  const compilers = AjvCompiler()
  return ((externalSchemas: Parameters<ValidatorFactory>[0], options: Parameters<ValidatorFactory>[1]) => {
    let compile: CompileRoute | undefined
    return (route: RouteSchema): Validate => {
      if (route.httpPart === 'headers') checkHeaderNames(route.schema)
      let validator: Validate | undefined
      const validate: Validate = (data) => {
        compile ??= compilers(externalSchemas, options) as unknown as CompileRoute
        validator ??= compile(route)
        const valid = validator(data)
        // Fastify reads the errors from the function it was given.
        validate.errors = validator.errors
        return valid
      }
      return validate
    }
  }) as unknown as ValidatorFactory
}
