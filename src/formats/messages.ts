/**
 * Tool-result messages ready to append to a conversation, in the format the
 * client's model API expects. A failed call's content is `{"error": "..."}`
 * as in clawft's tool lifecycle.
 */
import type { ToolError } from '../errors.ts'

export const MESSAGE_FORMATS = ['native', 'openai', 'responses', 'anthropic'] as const
export type MessageFormat = typeof MESSAGE_FORMATS[number]

export type CallResult =
  | { ok: true, result: unknown }
  | { ok: false, error: ToolError }

export function messageContent (outcome: CallResult): string {
  return outcome.ok ? JSON.stringify(outcome.result ?? null) : JSON.stringify({ error: outcome.error.toMessage() })
}

export function toolMessage (callId: string, outcome: CallResult, format: MessageFormat): Record<string, unknown> {
  const content = messageContent(outcome)
  if (format === 'anthropic') return { type: 'tool_result', tool_use_id: callId, content, is_error: !outcome.ok }
  if (format === 'responses') return { type: 'function_call_output', call_id: callId, output: content }
  return { role: 'tool', tool_call_id: callId, content }
}

/** Anthropic's one user message that carries a turn's tool_result blocks, ready to append to the conversation. */
export function anthropicUserMessage (blocks: Array<Record<string, unknown>>): { role: 'user', content: Array<Record<string, unknown>> } {
  return { role: 'user', content: blocks }
}
