/**
 * Every error code of the contract, its HTTP status and its problem+json shape.
 * This is the one place that knows about statuses: handlers and tools throw
 * `ToolError`s with a code and never pick a status themselves.
 */

/** Contract code → HTTP status. The first seven are clawft's ToolError variants. */
export const ERROR_STATUS = {
  NotFound: 404,
  InvalidArgs: 400,
  ExecutionFailed: 500,
  PermissionDenied: 403,
  FileNotFound: 404,
  InvalidPath: 400,
  Timeout: 504,
  BadRequest: 400,
  Unauthorized: 401,
  PayloadTooLarge: 413,
  Conflict: 409,
  Overloaded: 503,
  IdempotencyKeyReused: 422,
} as const

export type ErrorCode = keyof typeof ERROR_STATUS

const TITLES: Record<ErrorCode, string> = {
  NotFound: 'Not found',
  InvalidArgs: 'Invalid arguments',
  ExecutionFailed: 'Execution failed',
  PermissionDenied: 'Permission denied',
  FileNotFound: 'File not found',
  InvalidPath: 'Invalid path',
  Timeout: 'Timeout',
  BadRequest: 'Bad request',
  Unauthorized: 'Unauthorized',
  PayloadTooLarge: 'Payload too large',
  Conflict: 'Conflict',
  Overloaded: 'Overloaded',
  IdempotencyKeyReused: 'Idempotency key reused',
}

/** How clawft's `Display` of a ToolError starts (`{"error": "file not found: a.txt"}`). */
const MESSAGE_PREFIX: Record<ErrorCode, string> = {
  NotFound: 'tool not found',
  InvalidArgs: 'invalid arguments',
  ExecutionFailed: 'execution failed',
  PermissionDenied: 'permission denied',
  FileNotFound: 'file not found',
  InvalidPath: 'invalid path',
  Timeout: 'timeout',
  BadRequest: 'bad request',
  Unauthorized: 'unauthorized',
  PayloadTooLarge: 'payload too large',
  Conflict: 'conflict',
  Overloaded: 'overloaded',
  IdempotencyKeyReused: 'idempotency key reused',
}

export function isErrorCode (value: unknown): value is ErrorCode {
  return typeof value === 'string' && Object.hasOwn(ERROR_STATUS, value)
}

/**
 * The error every tool and every core function throws. `extra` holds
 * additional problem members (for example `partial_stdout` of a timed-out
 * command); `retryAfterSeconds` becomes a `Retry-After` header.
 */
export class ToolError extends Error {
  readonly code: ErrorCode
  readonly extra: Record<string, unknown>
  readonly retryAfterSeconds: number | undefined

  constructor (code: ErrorCode, message: string, options: { extra?: Record<string, unknown>, retryAfterSeconds?: number, cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause })
    this.name = 'ToolError'
    this.code = code
    this.extra = options.extra ?? {}
    // Every Overloaded answer says when to come back (the contract's rule): a second, unless the thrower knows better.
    this.retryAfterSeconds = options.retryAfterSeconds ?? (code === 'Overloaded' ? 1 : undefined)
  }

  get status (): number {
    return ERROR_STATUS[this.code]
  }

  /** clawft's one-line rendering, used as `{"error": "..."}` in tool messages. */
  toMessage (): string {
    return `${MESSAGE_PREFIX[this.code]}: ${this.message}`
  }
}

/**
 * A failure after which what was asked may have been done (a request
 * another instance may have acted on): 500, never turned into a 503 that
 * invites the same request again.
 */
export class OutcomeUnknown extends ToolError {
  constructor (message: string, options: { cause?: unknown } = {}) {
    super('ExecutionFailed', message, options)
  }
}

/** RFC 9457 problem details, with the contract's members. */
export interface Problem {
  type: string
  title: string
  status: number
  detail: string
  code: ErrorCode
  request_id: string
  tool?: string
  [member: string]: unknown
}

export const PROBLEM_MEDIA_TYPE = 'application/problem+json'
export const PROBLEM_CONTENT_TYPE = `${PROBLEM_MEDIA_TYPE}; charset=utf-8`

/** The problem+json body of an error. */
export function toProblem (error: ToolError, requestId: string, tool?: string): Problem {
  const problem: Problem = {
    ...error.extra,
    type: `urn:toolport:problem:${error.code}`,
    title: TITLES[error.code],
    status: error.status,
    detail: error.message,
    code: error.code,
    request_id: requestId,
  }
  if (tool !== undefined) problem.tool = tool
  return problem
}

/**
 * Whether a thrown value is a failure of the service, for the log at error
 * level with its stack, rather than an answer: anything not a ToolError, and
 * a ToolError that stands for something that went wrong here (its cause,
 * not itself a ToolError: a full volume, another instance gone mid-call).
 * A tool's own failure (a command's exit code, an MCP server's isError, a
 * timeout) is the caller's answer, and its message may hold what the tool
 * printed: the call's completion line records its code.
 */
export function isFailure (thrown: unknown): boolean {
  if (!(thrown instanceof ToolError)) return true
  return thrown.cause !== undefined && !(thrown.cause instanceof ToolError)
}

/**
 * Any thrown value as a ToolError. Unknown errors become ExecutionFailed with
 * a generic detail: their message may hold paths or stack frames, so it goes
 * to the log only (the caller logs `cause`).
 */
export function asToolError (error: unknown): ToolError {
  if (error instanceof ToolError) return error
  return descriptorShortage(error) ?? volumeFull(error) ?? new ToolError('ExecutionFailed', 'internal error while running the tool', { cause: error })
}

/**
 * A write that found its volume full (ENOSPC, EDQUOT): a failure the
 * operator is to know of (its cause is logged), said as what it is rather
 * than an internal error; `what` says where room was wanted.
 */
export function volumeFull (error: unknown, what = 'on the service\'s volume'): ToolError | undefined {
  const code = (error as { code?: unknown } | null)?.code
  if (code !== 'ENOSPC' && code !== 'EDQUOT') return undefined
  return new ToolError('ExecutionFailed', `no space left ${what}`, { cause: error })
}

/**
 * A failure for want of a file descriptor (this process's, EMFILE, or the
 * system's, ENFILE): no fault of the request, and gone once others close,
 * so 503 with Retry-After, as a full queue answers.
 */
export function descriptorShortage (error: unknown): ToolError | undefined {
  const code = (error as { code?: unknown } | null)?.code
  if (code !== 'EMFILE' && code !== 'ENFILE') return undefined
  return new ToolError('Overloaded', 'the service has no file descriptor free just now; retry shortly', { retryAfterSeconds: 1, cause: error })
}

/**
 * Why `signal` cut a request short, when its abort gave a ToolError as the
 * reason (a token revoked meanwhile: Unauthorized); undefined for a bare
 * abort (the client left), which the cut request answers as cancelled.
 */
export function abortReason (signal: AbortSignal | undefined): ToolError | undefined {
  const reason: unknown = signal?.aborted === true ? signal.reason : undefined
  return reason instanceof ToolError ? reason : undefined
}
