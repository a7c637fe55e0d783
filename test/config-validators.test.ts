/**
 * The config's validators are generated from its schema
 * (scripts/write-config-validators.ts): the committed file must be what the
 * schema generates today, and the defaults that depend on the machine are
 * filled in at run time, not frozen when the file was generated.
 */
import { readFileSync } from 'node:fs'
import os from 'node:os'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { configValidatorsSource, GENERATED_FILE } from '../scripts/write-config-validators.ts'
import { defaultConfig, parseConfig } from '../src/config.ts'

describe('the generated config validators', () => {
  it('are what src/config-schema.ts generates (run `node scripts/write-config-validators.ts` after changing it)', () => {
    expect(readFileSync(GENERATED_FILE, 'utf8')).toBe(configValidatorsSource())
  })

  it('need no module at run time', () => {
    expect(readFileSync(GENERATED_FILE, 'utf8')).not.toMatch(/\brequire\(|^import /m)
  })

  it('leave the workspaces root to the machine the service runs on', () => {
    expect(readFileSync(GENERATED_FILE, 'utf8')).not.toContain(os.tmpdir() + '/')
    expect(defaultConfig().workspaces.root).toBe(path.join(os.tmpdir(), 'toolport-workspaces'))
    expect(parseConfig({ workspaces: { root: '/srv/ws' } }).workspaces.root).toBe('/srv/ws')
  })

  it('count a string\'s length in characters, as the schema means', () => {
    expect(parseConfig({ auth: { tokens: [{ token: 't', tenant: '😀'.repeat(128) }] } }).auth.tokens[0]?.tenant).toHaveLength(256)
    expect(() => parseConfig({ auth: { tokens: [{ token: 't', tenant: '😀'.repeat(129) }] } })).toThrow(/auth\.tokens\.0\.tenant/)
  })
})
