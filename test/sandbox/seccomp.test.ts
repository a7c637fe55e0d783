/**
 * The sandbox's seccomp filter (src/sandbox/seccomp.ts) run through a small
 * interpreter of classic BPF, on every architecture it knows: the machine's
 * own is also checked for real under bubblewrap (test/security/sandbox-escape.test.ts);
 * the others only can be here. Numbers are the kernel's, from its syscall tables.
 */
import { describe, expect, it } from 'vitest'
import { SECCOMP_FILTER } from '../../src/sandbox/seccomp.ts'

const ALLOW = 0x7fff0000
const EPERM = 0x00050001

/** What the filter answers for system call `nr` of architecture `arch` with these arguments (`struct seccomp_data`). */
function verdict (nr: number, arch: number, args: bigint[] = []): number {
  const data = Buffer.alloc(64)
  data.writeInt32LE(nr, 0)
  data.writeUInt32LE(arch, 4)
  args.forEach((arg, i) => data.writeBigUInt64LE(arg, 16 + 8 * i))
  const count = SECCOMP_FILTER.length / 8
  let accumulator = 0
  for (let pc = 0, steps = 0; pc < count && steps < 1000; steps++) {
    const code = SECCOMP_FILTER.readUInt16LE(pc * 8)
    const jt = SECCOMP_FILTER.readUInt8(pc * 8 + 2)
    const jf = SECCOMP_FILTER.readUInt8(pc * 8 + 3)
    const k = SECCOMP_FILTER.readUInt32LE(pc * 8 + 4)
    if (code === 0x06) return k
    if (code === 0x20) {
      accumulator = data.readUInt32LE(k)
      pc++
    } else if (code === 0x15) {
      pc += 1 + (accumulator === k ? jt : jf)
    } else {
      throw new Error(`an instruction the filter should not hold: ${code}`)
    }
  }
  throw new Error('the filter ran off its end')
}

const ARCHES = {
  x86_64: { arch: 0xc000003e, addKey: 248, requestKey: 249, keyctl: 250, fcntl: [72], other: [0, 1, 2, 56, 59, 231] },
  x32: { arch: 0xc000003e, addKey: 0x40000000 + 248, requestKey: 0x40000000 + 249, keyctl: 0x40000000 + 250, fcntl: [0x40000000 + 72], other: [0x40000000 + 1] },
  i386: { arch: 0x40000003, addKey: 286, requestKey: 287, keyctl: 288, fcntl: [55, 221], other: [1, 3, 4, 20] },
  aarch64: { arch: 0xc00000b7, addKey: 217, requestKey: 218, keyctl: 219, fcntl: [25], other: [56, 63, 64, 93] },
  arm: { arch: 0x40000028, addKey: 309, requestKey: 310, keyctl: 311, fcntl: [55, 221], other: [1, 3, 4, 20] },
}

describe('the sandbox\'s seccomp filter', () => {
  for (const [name, abi] of Object.entries(ARCHES)) {
    it(`refuses the keyring calls and F_SETLEASE on ${name}, and allows the rest`, () => {
      for (const nr of [abi.addKey, abi.requestKey, abi.keyctl]) expect(verdict(nr, abi.arch), `${name} ${nr}`).toBe(EPERM)
      for (const fcntl of abi.fcntl) {
        // F_SETLEASE (1024), also with bits above the int the kernel reads; F_GETFL (3), F_GETLEASE (1025), F_SETLK (6) pass.
        expect(verdict(fcntl, abi.arch, [3n, 1024n, 1n])).toBe(EPERM)
        expect(verdict(fcntl, abi.arch, [3n, (1n << 32n) + 1024n])).toBe(EPERM)
        for (const command of [0n, 3n, 4n, 6n, 1025n, 1026n]) expect(verdict(fcntl, abi.arch, [3n, command])).toBe(ALLOW)
      }
      for (const nr of abi.other) expect(verdict(nr, abi.arch, [3n, 1024n])).toBe(ALLOW)
    })
  }

  it('lets another architecture\'s calls pass, whatever their numbers', () => {
    for (const nr of [72, 248, 250, 25, 219]) expect(verdict(nr, 0xc00000f3, [3n, 1024n])).toBe(ALLOW)
  })
})
