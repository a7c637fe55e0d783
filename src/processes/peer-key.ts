/**
 * The key that marks a request as one instance's to another
 * (`toolport-forwarded`). Such a request is answered from the receiving
 * instance's own processes, without the workspace's home lock and without
 * the other instances' processes counted: a client that could mark its own
 * requests so would start processes past `max_per_workspace` and outside its
 * workspace's network. The key is a random secret in the shared workspace
 * root, which only the instances read (commands never see the root). The
 * first instance to forward a request makes it; it is read again at each
 * use, so a key replaced on the volume holds everywhere at once.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto'
import { constants } from 'node:fs'
import { open } from 'node:fs/promises'
import { descriptorShortage, ToolError } from '../errors.ts'
import { createFileOnce, replaceFile } from '../replace-file.ts'

/** The key's file, in the workspace root. */
export const PEER_KEY_FILE = '.peer-key'
const KEY = /^[0-9a-f]{64}$/
/** What is read of the file: a key and a line end, and enough more to tell a longer file from one. */
const READ_BYTES = 80

const digest = (text: string): Buffer => createHash('sha256').update(text).digest()

export class PeerKey {
  readonly #file: () => string

  /** `file`: where the key is kept in the shared root (known once the root is). */
  constructor (file: () => string) {
    this.#file = file
  }

  /** The key, made first when no instance has made it yet (or what is there is no key). */
  async value (): Promise<string> {
    const found = await this.#read()
    if (found.key !== undefined) return found.key
    const file = this.#file()
    const key = randomBytes(32).toString('hex')
    // Where there is none, made once: of two instances making it at once one key stands and both read it.
    // What is there but no key (an emptied file) is replaced.
    if (found.missing) await createFileOnce(file, key, 0o600)
    else await replaceFile(file, key, 0o600)
    const made = await this.#read()
    if (made.key === undefined) throw new Error(`${file} holds no key for requests between instances`)
    return made.key
  }

  /** Whether `offered` is the key (compared in constant time); never when none has been made. */
  async admits (offered: string): Promise<boolean> {
    const { key } = await this.#read()
    return key !== undefined && timingSafeEqual(digest(offered), digest(key))
  }

  async #read (): Promise<{ key?: string, missing: boolean }> {
    let text: string
    try {
      // Not blocking: a FIFO in its place would hold a thread of the pool until someone wrote to it.
      const handle = await open(this.#file(), constants.O_RDONLY | constants.O_NONBLOCK)
      try {
        const { buffer, bytesRead } = await handle.read({ buffer: Buffer.alloc(READ_BYTES) })
        text = buffer.toString('latin1', 0, bytesRead).trim()
      } finally {
        await handle.close()
      }
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code
      if (code === 'ENOENT') return { missing: true }
      // No descriptor free just now: it passes.
      const shortage = descriptorShortage(error)
      if (shortage) throw shortage
      // Else a failure of the deployment (instances of different users on one volume, something else in its place): the operator's to mend.
      const mend = code === 'EACCES' || code === 'EPERM' ? 'every instance sharing the workspace root must run as the same user' : 'it must be a file the service made'
      throw new ToolError('ExecutionFailed', `the instances' key (${PEER_KEY_FILE} in the workspace root) cannot be read (${code ?? 'error'}); ${mend}`, { cause: error })
    }
    return KEY.test(text) ? { key: text, missing: false } : { missing: false }
  }
}
