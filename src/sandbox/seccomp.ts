/**
 * The seccomp filter bubblewrap applies to every command (`--seccomp FD`):
 * it refuses the kernel keyring calls (add_key, request_key, keyctl) with
 * EPERM, as container runtimes' default profiles do. Keyrings belong to the
 * kernel, not to a namespace: a key a command adds to its user's keyring
 * outlives the run, every other run of the same host user (any tenant's)
 * can list it, and keys count against that user's kernel quota. Nothing a
 * command needs goes through them.
 *
 * The filter is a classic BPF program (`struct sock_filter` entries, as
 * `seccomp_export_bpf` writes them) for each architecture a kernel of this
 * machine's kind runs programs of: x86-64 with its x32 and i386 ABIs, arm64
 * with 32-bit arm. Programs of another architecture pass unfiltered.
 */

// BPF instruction classes and the fields of `struct seccomp_data` (nr at offset 0, arch at 4).
const LOAD_WORD = 0x20
const JUMP_IF_EQUAL = 0x15
const RETURN = 0x06
const NR_OFFSET = 0
const ARCH_OFFSET = 4

const RET_ALLOW = 0x7fff0000
const RET_ERRNO_EPERM = 0x00050000 | 1
/** Set in the number of an x32 system call (an x86-64 process may make either kind). */
const X32_SYSCALL_BIT = 0x40000000

/** add_key, request_key and keyctl, by AUDIT_ARCH value. */
const KEYRING_CALLS: Array<{ arch: number, calls: number[] }> = [
  { arch: 0xc000003e, calls: [248, 249, 250, X32_SYSCALL_BIT + 248, X32_SYSCALL_BIT + 249, X32_SYSCALL_BIT + 250] },
  { arch: 0x40000003, calls: [286, 287, 288] },
  { arch: 0xc00000b7, calls: [217, 218, 219] },
  { arch: 0x40000028, calls: [309, 310, 311] },
]

interface Instruction {
  code: number
  jt: number
  jf: number
  k: number
}

const load = (offset: number): Instruction => ({ code: LOAD_WORD, jt: 0, jf: 0, k: offset })
/** Tests the loaded word against `value`: on to the instruction `jt` further when equal, `jf` further when not. */
const jumpIfEqual = (value: number, jt: number, jf: number): Instruction => ({ code: JUMP_IF_EQUAL, jt, jf, k: value })
const answer = (action: number): Instruction => ({ code: RETURN, jt: 0, jf: 0, k: action })

/**
 * Per architecture: its number compared, then the call's number against each
 * keyring call, a match going to the one refusal at the end; anything else is allowed.
 */
function program (): Instruction[] {
  const length = 1 + KEYRING_CALLS.reduce((sum, { calls }) => sum + calls.length + 3, 0) + 2
  const refusal = length - 1
  const instructions = [load(ARCH_OFFSET)]
  for (const { arch, calls } of KEYRING_CALLS) {
    // Another architecture skips this one's block: its load, its tests and its allow.
    instructions.push(jumpIfEqual(arch, 0, calls.length + 2), load(NR_OFFSET))
    for (const call of calls) instructions.push(jumpIfEqual(call, refusal - (instructions.length + 1), 0))
    instructions.push(answer(RET_ALLOW))
  }
  instructions.push(answer(RET_ALLOW), answer(RET_ERRNO_EPERM))
  return instructions
}

/** The filter as bubblewrap reads it: `struct sock_filter` entries, little-endian as both architectures are. */
export const KEYRING_FILTER: Buffer = Buffer.concat(program().map(({ code, jt, jf, k }) => {
  const entry = Buffer.alloc(8)
  entry.writeUInt16LE(code, 0)
  entry.writeUInt8(jt, 2)
  entry.writeUInt8(jf, 3)
  entry.writeUInt32LE(k, 4)
  return entry
}))
