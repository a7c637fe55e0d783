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

/** Linux's longest path, its terminating NUL counted. */
export const PATH_MAX = 4096
const TOO_LONG = 'a name or a target longer than the filesystem takes'

export class StagedLinks {
  /** Each link's path in the archive and its target, in the archive's order. */
  readonly #links = new Map<string, string>()

  /** A link at `entryPath` to `target`, made later. */
  noteLink (entryPath: string, target: string): void {
    const at = normalised(entryPath)
    this.#links.delete(at)
    this.#links.set(at, target)
  }

  /** Any other entry node-tar takes: it takes the place of a link the archive had at its path before it, as in tar. */
  noteOther (entryPath: string): void {
    this.#links.delete(normalised(entryPath))
  }

  /** Makes the links in `staging`, each replacing what the archive put at its path before it, but a directory. */
  async makeIn (staging: string, report: ExtractReport): Promise<void> {
    for (const [at, target] of this.#links) {
      // The rest of the upload is reached by its staged path (as node-tar reached each entry): one longer than
      // Linux takes could not be moved in.
      if (Buffer.byteLength(path.join(staging, at)) >= PATH_MAX) {
        skip(report, at, TOO_LONG)
        continue
      }
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
      } catch (error) {
        // What the filesystem refuses of one link (a name it cannot hold) is that link's, not the upload's.
        if ((error as NodeJS.ErrnoException).code !== 'ENAMETOOLONG') throw error
        skip(report, at, TOO_LONG)
      } finally {
        await dir.close()
      }
    }
  }
}

const normalised = (entryPath: string): string => path.posix.normalize(entryPath).replace(/\/+$/, '')
