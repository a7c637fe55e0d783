/**
 * Fastify's own response serializers (fast-json-stringify), each compiled
 * by the first answer that needs it rather than all at start-up: most
 * routes' error statuses are seldom answered, and compiling every one of
 * them was a large part of the start-up's time and memory.
 */
import { SerializerSelector } from '@fastify/fast-json-stringify-compiler'

type SerializerFactory = ReturnType<typeof SerializerSelector>

export const lazySerializers: SerializerFactory = (externalSchemas, options) => {
  const compile = SerializerSelector()(externalSchemas, options)
  return (route) => {
    let serialize: ((doc: unknown) => string) | undefined
    return (doc) => {
      serialize ??= compile(route)
      return serialize(doc)
    }
  }
}
