/**
 * The sandbox's own scratch space cannot take the host's memory: /tmp and
 * /dev/shm are each a tmpfs of sandbox.tmp_bytes, and past it a write fails
 * with "No space left on device" inside the command; every other tmpfs bwrap
 * makes (/dev itself, the ones hiding /root, /home, /run, the workspaces root
 * and the service's config directory) takes no write at all.
 */
import { randomBytes } from 'node:crypto'
import { mkdir, mkdtemp, rm, stat, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { buildApp } from '../../src/app.ts'
import { parseConfig } from '../../src/config.ts'
import { buildTestApp, exec, onCleanup } from '../helper.ts'

const MIB = 1024 * 1024
/** Above the scratch size, so that the file-size limit is not what stops the writes. */
const FILE_LIMIT = 64 * MIB

const isDirectory = (file: string): Promise<boolean> => stat(file).then((info) => info.isDirectory(), () => false)

describe('the sandbox scratch space', () => {
  for (const dir of ['/tmp', '/dev/shm']) {
    it(`stops writes to ${dir} at sandbox.tmp_bytes with "No space left on device"`, async () => {
      const app = await buildTestApp({ sandbox: { mode: 'bwrap', tmp_bytes: MIB, max_file_bytes: FILE_LIMIT } })
      // Files of 256 KiB in a loop, as a runaway command would write them, until the first refusal.
      const command = [
        `df -B1 --output=size ${dir} | tail -n 1`,
        `for i in $(seq 1 40); do head -c 262144 /dev/zero > ${dir}/fill.$i || break; done`,
        `echo "written=$(cat ${dir}/fill.* | wc -c)"`,
      ].join('; ')
      const answer = await exec(app, 'exec_shell', { command, timeout: 20 })
      expect(answer.status, JSON.stringify(answer.body)).toBe(200)
      const { stdout, stderr } = answer.body.result as { stdout: string, stderr: string }
      expect(stderr).toContain('No space left on device')
      expect(Number(stdout.split('\n')[0])).toBe(MIB)
      const written = Number(/written=(\d+)/.exec(stdout)?.[1])
      expect(written).toBeGreaterThan(MIB / 2)
      expect(written).toBeLessThanOrEqual(MIB)
    })
  }

  it('cannot write to /dev or to the tmpfs that hide /root, /home, /run, the workspaces root and the config directory', async () => {
    // Not under /tmp: there, the sandbox's private /tmp would be what hides it.
    const dir = await mkdtemp('/var/tmp/toolport-scratch-')
    onCleanup(() => rm(dir, { recursive: true, force: true }))
    const configFile = path.join(dir, 'conf', 'toolport.json')
    await mkdir(path.dirname(configFile))
    await writeFile(configFile, '{}')
    const root = path.join(dir, 'workspaces')
    const app = await buildApp(parseConfig({ workspaces: { root }, sandbox: { mode: 'bwrap', max_file_bytes: FILE_LIMIT } }), { defaultMetrics: false, hidePaths: [configFile] })
    onCleanup(() => app.close())
    await app.runtime.whenReady()
    const name = `fill-${randomBytes(4).toString('hex')}`
    const targets = ['/dev', '/root', '/run', root, path.dirname(configFile), ...(await isDirectory('/home') ? ['/home'] : [])]
    const command = [
      ...targets.map((target) => `head -c 65536 /dev/zero > '${target}/${name}' && echo "wrote ${target}"; mkdir '${target}/${name}.d' && echo "made ${target}"`),
      'echo x > in-workspace.txt && echo workspace-writable',
      'echo x > /dev/null && echo dev-null-writable',
    ].join('; ')
    const answer = await exec(app, 'exec_shell', { command, timeout: 20 }, { workspace: 'mine' })
    expect(answer.status, JSON.stringify(answer.body)).toBe(200)
    const { stdout, stderr } = answer.body.result as { stdout: string, stderr: string }
    expect(stdout).toBe('workspace-writable\ndev-null-writable\n')
    expect(stderr.match(/Read-only file system/g)).toHaveLength(targets.length * 2)
  })
})
