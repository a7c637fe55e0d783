/**
 * message: sends text to a configured channel. The call only enqueues (the
 * clawft: "the return value confirms dispatch, not delivery"); a background
 * sender POSTs `{channel, chat_id, content}` to the channel's webhook with
 * retries. Each channel's queue is bounded (in messages and in bytes);
 * content is sanitised first.
 */
import { Type } from '@sinclair/typebox'
import type { Logger } from 'pino'
import type { Config } from '../config.ts'
import type { AnyTool } from '../execution/tool.ts'
import { ToolError } from '../errors.ts'
import { defineBuiltin } from '../execution/define.ts'
import { clipText } from '../execution/truncate.ts'

/** What one channel's queue holds at most: so many messages, and so many bytes of them. */
export const MAX_QUEUED_MESSAGES = 1000
export const MAX_QUEUED_BYTES = 16 * 1024 * 1024
export const SEND_ATTEMPTS = 3
const SEND_TIMEOUT_MS = 10_000
/** When a caller refused by a full queue may try again. */
const FULL_RETRY_AFTER_SECONDS = 30

/** Strips NUL, DEL and control characters, keeping newline, carriage return and tab (clawft's tool lifecycle). */
export function sanitiseContent (text: string): string {
  // eslint-disable-next-line no-control-regex
  return text.replace(/[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f]/g, '')
}

interface Outgoing { channel: string, chat_id: string, content: string, webhook: string, bytes: number }

/** One channel's messages waiting, and the bytes they hold; sent one at a time, in order. */
interface ChannelQueue { waiting: Outgoing[], bytes: number, running: Promise<void> | undefined }

/**
 * A queue per channel: a webhook that is slow or down holds back and fills
 * only its own channel's queue, never another's.
 */
class WebhookSender {
  readonly #queues = new Map<string, ChannelQueue>()
  readonly #log: Logger
  #closing = false

  constructor (log: Logger) {
    this.#log = log
  }

  enqueue (message: Omit<Outgoing, 'bytes'>): void {
    if (this.#closing) throw new ToolError('ExecutionFailed', 'the service is shutting down')
    const queue = this.#queues.get(message.channel) ?? { waiting: [], bytes: 0, running: undefined }
    this.#queues.set(message.channel, queue)
    const bytes = Buffer.byteLength(message.content) + Buffer.byteLength(message.chat_id)
    if (queue.waiting.length >= MAX_QUEUED_MESSAGES || queue.bytes + bytes > MAX_QUEUED_BYTES) {
      throw new ToolError('Overloaded', `the ${message.channel} channel's queue is full (${queue.waiting.length} messages, ${queue.bytes} bytes waiting for its webhook)`, { retryAfterSeconds: FULL_RETRY_AFTER_SECONDS })
    }
    queue.waiting.push({ ...message, bytes })
    queue.bytes += bytes
    queue.running ??= this.#drain(queue).finally(() => { queue.running = undefined })
  }

  /** Stops accepting; gives what is queued up to `graceMs` to go out. */
  async close (graceMs = 2000): Promise<void> {
    this.#closing = true
    const running = [...this.#queues.values()].map((queue) => queue.running)
    await Promise.race([Promise.all(running), new Promise((resolve) => setTimeout(resolve, graceMs).unref())])
    this.#queues.clear()
  }

  async #drain (queue: ChannelQueue): Promise<void> {
    for (let message = queue.waiting.shift(); message; message = queue.waiting.shift()) {
      queue.bytes -= message.bytes
      await this.#deliver(message)
    }
  }

  async #deliver (message: Outgoing): Promise<void> {
    const body = JSON.stringify({ channel: message.channel, chat_id: message.chat_id, content: message.content })
    for (let attempt = 1; attempt <= SEND_ATTEMPTS; attempt++) {
      try {
        const { request } = await import('undici')
        const response = await request(message.webhook, { method: 'POST', headers: { 'content-type': 'application/json' }, body, signal: AbortSignal.timeout(SEND_TIMEOUT_MS) })
        await response.body.dump()
        if (response.statusCode < 300) return
        // A redirect is not followed (the message would go where the operator did not say); nor is it delivered.
        if (response.statusCode < 500) {
          this.#log.warn({ channel: message.channel, status: response.statusCode }, 'webhook refused a message')
          return
        }
        this.#log.debug({ channel: message.channel, status: response.statusCode, attempt }, 'webhook failed; retrying')
      } catch (error) {
        this.#log.debug({ channel: message.channel, code: (error as { code?: string }).code, attempt }, 'webhook unreachable; retrying')
      }
      if (attempt < SEND_ATTEMPTS && !this.#closing) await new Promise((resolve) => setTimeout(resolve, 200 * 2 ** attempt))
    }
    // Never the content: it may be private. The caller's chat_id is cut short, as the log is no place for megabytes.
    this.#log.warn({ channel: message.channel, chat_id: clipText(message.chat_id, 200) }, 'message not delivered after retries')
  }
}

export function createMessageTool (channels: Config['channels'], log: Logger): { tool: AnyTool, close: () => Promise<void> } {
  const sender = new WebhookSender(log)
  const names = Object.keys(channels).sort()
  const tool = defineBuiltin({
    name: 'message',
    description: `Send a message to a chat channel (${names.join(', ')}). Confirms dispatch, not delivery.`,
    parameters: Type.Object({
      channel: Type.String({ description: `Target channel (one of: ${names.join(', ')})` }),
      chat_id: Type.String({ description: 'Target chat or conversation ID' }),
      content: Type.String({ description: 'Message content to send' }),
    }),
    outputSchema: Type.Object({
      status: Type.Literal('sent', { description: 'Queued for the webhook: dispatch, not delivery' }),
      channel: Type.String(),
      chat_id: Type.String(),
      content_length: Type.Integer({ minimum: 0, description: 'Characters sent, once sanitised' }),
    }, { additionalProperties: false }),
    // Each call sends one more message: it adds, never changes what was sent, and cannot be repeated harmlessly.
    annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: true },
    async execute (args) {
      // Its own keys only: `toString` or `__proto__` name no channel.
      const channel = Object.hasOwn(channels, args.channel) ? channels[args.channel] : undefined
      if (!channel) throw new ToolError('InvalidArgs', `unknown channel ${JSON.stringify(args.channel)}; configured channels: ${names.join(', ')}`)
      const content = sanitiseContent(args.content)
      sender.enqueue({ channel: args.channel, chat_id: args.chat_id, content, webhook: channel.webhook })
      return { status: 'sent' as const, channel: args.channel, chat_id: args.chat_id, content_length: content.length }
    },
  })
  return { tool, close: () => sender.close() }
}
