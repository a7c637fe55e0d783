/**
 * Reading an HTTP answer's body for the outbound tools (web_fetch,
 * web_search): never more than a bound, decoded from its content-coding
 * (the bound counts decoded bytes, so a small gzip bomb stays small) and
 * from the charset its content type names; and what a request that failed
 * means to the caller.
 */
import { pipeline, type Readable, type Transform } from 'node:stream'
import { MIMEType } from 'node:util'
import { descriptorShortage, ToolError } from '../errors.ts'

/** undici's refusals of a request it will not send: the caller's method or headers. */
const UNSENDABLE = new Set(['UND_ERR_INVALID_ARG', 'UND_ERR_NOT_SUPPORTED'])

/**
 * A request to `peer` ("the site") that failed, as the caller's error: no
 * answer in time is Timeout; the caller gone, cancelled; a request undici
 * will not send (the caller's method or headers), InvalidArgs; anything
 * else the connection failing.
 */
export function requestFailure (error: unknown, peer: string, call: { signal: AbortSignal, timeout: AbortSignal, timeoutMs: number }): ToolError {
  if (error instanceof ToolError) return error
  if (call.timeout.aborted) return new ToolError('Timeout', `${peer} gave no answer within ${call.timeoutMs / 1000}s`)
  if (call.signal.aborted) return new ToolError('ExecutionFailed', 'cancelled')
  // No descriptor free for the socket: no fault of the site or the call, and gone once others close.
  const shortage = descriptorShortage(error) ?? descriptorShortage((error as { cause?: unknown }).cause)
  if (shortage) return shortage
  const code = (error as { code?: string }).code
  if (code !== undefined && UNSENDABLE.has(code)) return new ToolError('InvalidArgs', `the request cannot be sent: ${(error as Error).message}`)
  return new ToolError('ExecutionFailed', `the connection to ${peer} failed: ${code ?? (error as Error).message}`)
}

export interface CappedBody {
  data: Buffer
  /** False when the body went on past the bound (and was not read further). */
  complete: boolean
}

/** At most `maxBytes` of `body`; a longer body is cut there and the rest is not read. */
export async function readCapped (body: Readable, maxBytes: number): Promise<CappedBody> {
  const chunks: Buffer[] = []
  let read = 0
  for await (const chunk of body as AsyncIterable<Buffer>) {
    const room = maxBytes - read
    if (chunk.length > room) {
      chunks.push(chunk.subarray(0, room))
      body.destroy()
      return { data: Buffer.concat(chunks), complete: false }
    }
    chunks.push(chunk)
    read += chunk.length
  }
  return { data: Buffer.concat(chunks), complete: true }
}

/** The content-codings undone (node:zlib is loaded with the first encoded body, not at start-up). */
const CODINGS = new Set(['gzip', 'x-gzip', 'deflate', 'br'])

/** A decoder of `coding`; for `deflate`, raw when `first` (the body's first bytes) has no zlib header, as browsers take it. */
function decoderOf (coding: string, first: Buffer | undefined): Transform {
  const zlib = process.getBuiltinModule('node:zlib')
  if (coding === 'br') return zlib.createBrotliDecompress()
  if (coding === 'deflate') return first !== undefined && !zlibWrapped(first) ? zlib.createInflateRaw() : zlib.createInflate()
  return zlib.createGunzip()
}

/**
 * At most `maxBytes` of `body` decoded from the content-coding its answer
 * names (a list is undone from the last coding applied). A coding we cannot
 * undo, or a body that is not valid in its coding, is ExecutionFailed: its
 * bytes read as text would be noise. An empty body is empty whatever its
 * coding (a HEAD, a 204 or a 304 sent with its GET's headers).
 */
export async function readDecoded (body: Readable, contentEncoding: string | string[] | undefined, maxBytes: number): Promise<CappedBody> {
  const codings = [contentEncoding ?? ''].flat().join(',').split(',').map((coding) => coding.trim().toLowerCase()).filter((coding) => coding !== '' && coding !== 'identity')
  if (codings.length === 0) return readCapped(body, maxBytes)
  const unknown = codings.find((coding) => !CODINGS.has(coding))
  if (unknown !== undefined) {
    // undici's body reports being destroyed as an error, of no interest here.
    body.once('error', () => {}).destroy()
    throw new ToolError('ExecutionFailed', `the body is encoded as ${JSON.stringify(unknown.slice(0, 40))}, which cannot be decoded (gzip, deflate and br can)`)
  }
  const first = await firstChunk(body)
  if (first === null) return { data: Buffer.alloc(0), complete: true }
  // Which stage failed first: the body itself (a timeout, a cancellation, a reset) or a decoder.
  let failure: { coding?: string } | undefined
  body.once('error', () => { failure ??= {} })
  const decoders = await Promise.all(codings.reverse().map(async (coding, index) => {
    // Only the outermost coding's first bytes are known.
    const decoder = decoderOf(coding, index === 0 ? first : undefined)
    decoder.once('error', () => { failure ??= { coding } })
    return decoder
  }))
  try {
    // pipeline destroys every stage once the last is destroyed, as readCapped does when it has enough.
    return await readCapped(pipeline([body, ...decoders], () => {}) as unknown as Readable, maxBytes)
  } catch (error) {
    if (failure?.coding !== undefined) throw new ToolError('ExecutionFailed', `the body is not valid ${failure.coding}: ${(error as Error).message}`)
    throw error
  }
}

/** Whether bytes start with a zlib header (RFC 1950: method 8, a check that makes the pair a multiple of 31). */
function zlibWrapped (bytes: Buffer): boolean {
  return bytes.length < 2 || (((bytes[0] as number) & 0x0f) === 8 && (((bytes[0] as number) << 8) | (bytes[1] as number)) % 31 === 0)
}

/** The body's first chunk, put back to be read again; null when the body is empty. */
function firstChunk (body: Readable): Promise<Buffer | null> {
  return new Promise((resolve, reject) => {
    const settle = (chunk: Buffer | null, error?: unknown): void => {
      body.off('data', onData).off('end', onEnd).off('error', onError)
      if (error !== undefined) reject(error)
      else resolve(chunk)
    }
    const onData = (chunk: Buffer): void => {
      body.pause()
      body.unshift(chunk)
      settle(chunk)
    }
    const onEnd = (): void => { settle(null) }
    const onError = (error: unknown): void => { settle(null, error) }
    body.on('data', onData).once('end', onEnd).once('error', onError)
  })
}

/** Byte order marks, which name the encoding whatever the label says (as browsers decode, WHATWG Encoding). */
const BOMS: Array<[number[], string]> = [[[0xef, 0xbb, 0xbf], 'utf-8'], [[0xfe, 0xff], 'utf-16be'], [[0xff, 0xfe], 'utf-16le']]

/**
 * The charset a Content-Type names, given once, twice or as a list (as Fetch
 * extracts a MIME type): the last type that parses decides; without a
 * charset of its own, it takes the one an earlier type of the same essence named.
 */
function charsetOf (contentType: string | string[] | undefined): string | undefined {
  const values = (Array.isArray(contentType) ? contentType : [contentType ?? '']).flatMap((value) => value.split(','))
  let essence: string | undefined
  let charset: string | undefined
  for (const value of values) {
    let type: MIMEType
    try {
      type = new MIMEType(value.trim())
    } catch {
      continue
    }
    const named = type.params.get('charset') ?? undefined
    if (type.essence !== essence) charset = named
    else charset = named ?? charset
    essence = type.essence
  }
  return charset
}

/**
 * `data` as text: in the encoding its byte order mark names, else in the
 * charset of `contentType`, else (no charset, or one this runtime does not
 * know) UTF-8. A body cut short (`complete` false) may end inside a
 * character: that part is left out, not shown as U+FFFD.
 */
export function textOf (data: Buffer, contentType: string | string[] | undefined, complete = true): string {
  const bom = BOMS.find(([bytes]) => bytes.every((byte, index) => data[index] === byte))?.[1]
  const options = { stream: !complete }
  try {
    return new TextDecoder(bom ?? charsetOf(contentType) ?? 'utf-8').decode(data, options)
  } catch {
    // An unknown label.
    return new TextDecoder('utf-8').decode(data, options)
  }
}
