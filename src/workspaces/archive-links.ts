/**
 * The symlinks of an upload, made in its staging directory once node-tar
 * has extracted everything else. node-tar refuses a link whose target
 * passes through another link (a virtualenv's `python → python3`, a
 * library's `libfoo.so → libfoo.so.1`), and that refusal failed the whole
 * upload, a workspace's own download included. Making a link writes nothing
 * through one: each is made in its directory as walked without following
 * links (one under another link of the archive is skipped), and
 * archive-move.ts checks each again, followed, before and where it lands.
 */
import { lstat, rm, symlink } from 'node:fs/promises'
import path from 'node:path'
import { ToolError } from '../errors.ts'
import { openContainedDirectory } from '../workspace-fs/open.ts'
import { type ExtractReport, skip } from './archive-report.ts'

export class StagedLinks {
  /** Each link's path in the archive and its target, in the archive's order. */
  readonly #links = new Map<string, string>()

  /**
   * An entry node-tar takes, at `entryPath`: a link to `target`, made later;
   * or (no target) anything else, which takes the place of a link the
   * archive had at that path before it, as it would in tar.
   */
  note (entryPath: string, target?: string): void {
    const at = path.posix.normalize(entryPath).replace(/\/+$/, '')
    this.#links.delete(at)
    if (target !== undefined) this.#links.set(at, target)
  }

  /** Makes the links in `staging`, each replacing what the archive put at its path before it, but a directory. */
  async makeIn (staging: string, report: ExtractReport): Promise<void> {
    for (const [at, target] of this.#links) {
      const { dir: relativeDir, base } = path.posix.parse(at)
      const dir = await openContainedDirectory(staging, relativeDir, at, { create: true }).catch((error: unknown) => {
        if (error instanceof ToolError || (error as NodeJS.ErrnoException).code === 'ENOTDIR') return undefined
        throw error
      })
      if (dir === undefined) {
        skip(report, at, 'its directory is a symlink or a file of the archive')
        continue
      }
      try {
        const existing = await lstat(dir.at(base)).catch(() => null)
        if (existing?.isDirectory() === true) {
          skip(report, at, 'a directory of the archive has its name')
          continue
        }
        if (existing) await rm(dir.at(base))
        await symlink(target, dir.at(base))
      } finally {
        await dir.close()
      }
    }
  }
}
