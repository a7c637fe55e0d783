/**
 * Hand-built tar archives, so that hostile entries (`../x`, absolute paths,
 * links out) go in exactly as written, and a reader for the ones the server
 * sends back.
 */
import { gzipSync } from 'node:zlib'

/** `name` as bytes for one that is not UTF-8; `sparse` is GNU tar's sparse file (type S), which node-tar does not extract. */
export interface TarEntry { name: string | Buffer, type?: 'file' | 'dir' | 'symlink' | 'hardlink' | 'sparse', content?: string | Buffer, linkname?: string, mode?: number }

const TYPE = { file: '0', hardlink: '1', symlink: '2', dir: '5', sparse: 'S', pax: 'x' }

function header (entry: TarEntry | { name: string, type: 'pax' }, size: number): Buffer {
  const h = Buffer.alloc(512, 0)
  const put = (offset: number, length: number, value: string) => h.write(value, offset, Math.min(length, Buffer.byteLength(value)), 'utf8')
  const octal = (value: number, length: number) => `${value.toString(8).padStart(length - 1, '0')}\0`
  if (typeof entry.name === 'string') put(0, 100, entry.name)
  else entry.name.copy(h, 0, 0, 100)
  put(100, 8, octal(('mode' in entry ? entry.mode : undefined) ?? (entry.type === 'dir' ? 0o755 : 0o644), 8))
  put(108, 8, octal(0, 8))
  put(116, 8, octal(0, 8))
  put(124, 12, octal(size, 12))
  put(136, 12, octal(Math.floor(Date.now() / 1000), 12))
  put(148, 8, '        ')
  put(156, 1, TYPE[entry.type ?? 'file'])
  put(157, 100, ('linkname' in entry ? entry.linkname : undefined) ?? '')
  put(257, 6, 'ustar\0')
  put(263, 2, '00')
  let sum = 0
  for (const byte of h) sum += byte
  put(148, 8, `${sum.toString(8).padStart(6, '0')}\0 `)
  return h
}

/** A .tar.gz of the entries, as written. */
export function tarOf (entries: TarEntry[]): Buffer {
  const parts: Buffer[] = []
  const padding = (length: number) => Buffer.alloc((512 - (length % 512)) % 512)
  for (const entry of entries) {
    // A name or link target longer than the header's 100 bytes goes in a pax record before it, as `path=…` or `linkpath=…`.
    const long = [['path', entry.name], ['linkpath', entry.linkname]].filter((pair): pair is [string, string] => typeof pair[1] === 'string' && Buffer.byteLength(pair[1]) > 100)
    if (long.length > 0) {
      const record = Buffer.concat(long.map(([key, value]) => {
        const body = `${key}=${value}\n`
        let length = Buffer.byteLength(body) + 2
        while (String(length).length + 1 + Buffer.byteLength(body) !== length) length = String(length).length + 1 + Buffer.byteLength(body)
        return Buffer.from(`${length} ${body}`)
      }))
      parts.push(header({ name: 'PaxHeader', type: 'pax' }, record.length), record, padding(record.length))
    }
    const data = Buffer.from(entry.type === undefined || entry.type === 'file' ? entry.content ?? '' : '')
    parts.push(header(entry, data.length), data, padding(data.length))
  }
  parts.push(Buffer.alloc(1024))
  return gzipSync(Buffer.concat(parts))
}

/** The regular files of an (uncompressed) tar, by normalised name. */
export function tarEntries (tar: Buffer): Record<string, string> {
  const files: Record<string, string> = {}
  let offset = 0
  let longName: string | undefined
  while (offset + 512 <= tar.length) {
    const h = tar.subarray(offset, offset + 512)
    if (h.every((b) => b === 0)) break
    const field = (start: number, length: number) => h.subarray(start, start + length).toString('utf8').replace(/\0.*$/s, '')
    const size = parseInt(field(124, 12).trim() || '0', 8)
    const type = field(156, 1)
    const prefix = field(345, 155)
    const body = tar.subarray(offset + 512, offset + 512 + size)
    if (type === 'L') longName = body.toString('utf8').replace(/\0.*$/s, '')
    else {
      const name = (longName ?? (prefix ? `${prefix}/${field(0, 100)}` : field(0, 100))).replace(/^\.\//, '')
      if (type === '0' || type === '') files[name] = body.toString('utf8')
      longName = undefined
    }
    offset += 512 + Math.ceil(size / 512) * 512
  }
  return files
}
