/**
 * The oldest Node.js the service runs on, checked by the entry (server.ts)
 * before anything that needs it is loaded: on an older Node a newcomer gets
 * one line saying what to do, not a stack trace from inside a dependency.
 * The floor is undici's (`engines` in its package.json), the highest of our
 * dependencies'.
 */
export const MIN_NODE = { major: 22, minor: 19 } as const

/** What is wrong with `version` (`process.versions.node`), or undefined when it is new enough. */
export function nodeVersionProblem (version: string): string | undefined {
  const [major = 0, minor = 0] = version.split('.').map(Number)
  if (major > MIN_NODE.major || (major === MIN_NODE.major && minor >= MIN_NODE.minor)) return undefined
  return `Node.js ${MIN_NODE.major}.${MIN_NODE.minor} or newer is needed (this is ${version}); ` +
    'on an older machine, run ". scripts/use-node24.sh" (see README "Run it")'
}
