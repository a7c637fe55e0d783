/** Following a secret's path the way the kernel does (src/sandbox/hidden-paths.ts). */
import { mkdir, realpath, symlink, writeFile } from 'node:fs/promises'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { findHiddenPaths, followChain } from '../../src/sandbox/hidden-paths.ts'
import { tempDir } from '../support/temp.ts'

describe('the chain of a secret path', () => {
  it('goes up from a link\'s target at `link/..`, not from the link as text (a release layout: current/../shared/config.yaml)', async () => {
    const base = await realpath(await tempDir('hidden-'))
    await mkdir(path.join(base, 'releases', 'v2', 'app'), { recursive: true })
    await mkdir(path.join(base, 'deploy'))
    await writeFile(path.join(base, 'releases', 'v2', 'config.yaml'), 'secret')
    await symlink(path.join(base, 'releases', 'v2', 'app'), path.join(base, 'deploy', 'current'))
    const chain = followChain(`${base}/deploy/current/../config.yaml`)
    expect(chain.end?.path).toBe(path.join(base, 'releases', 'v2', 'config.yaml'))
    const hidden = findHiddenPaths([], [`${base}/deploy/current/../config.yaml`])
    const covers = (file: string) => hidden.files.includes(file) || hidden.dirs.some((dir) => file.startsWith(`${dir}/`))
    expect(covers(path.join(base, 'releases', 'v2', 'config.yaml'))).toBe(true)
  })

  it('reads a relative path from the working directory, as the service opens it', async () => {
    const base = await realpath(await tempDir('hidden-'))
    await writeFile(path.join(base, 'tokens.yaml'), 'secret')
    const cwd = process.cwd()
    process.chdir(base)
    try {
      expect(followChain('tokens.yaml').end?.path).toBe(path.join(base, 'tokens.yaml'))
    } finally {
      process.chdir(cwd)
    }
  })
})
