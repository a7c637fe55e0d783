/** Assertions on problem+json answers. */
import { expect } from 'vitest'

export interface Answer { status: number, body: Record<string, unknown>, headers: Record<string, unknown> }

/** Asserts a contract problem: status, code, content type, members, no stack trace. */
export function expectProblem (answer: Answer, status: number, code: string, tool?: string): Record<string, unknown> {
  expect(answer.status, JSON.stringify(answer.body)).toBe(status)
  expect(String(answer.headers['content-type'])).toMatch(/^application\/problem\+json/)
  expect(answer.body).toMatchObject({ status, code, type: expect.any(String), title: expect.any(String), detail: expect.any(String), request_id: expect.any(String) })
  if (tool !== undefined) expect(answer.body['tool']).toBe(tool)
  expect(JSON.stringify(answer.body)).not.toMatch(/\bat\s+\S+\s+\(?(file:|node:|\/)[^)]*:\d+:\d+/)
  return answer.body
}
