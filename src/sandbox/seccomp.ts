/**
 * The seccomp filter bubblewrap applies to every command (`--seccomp FD`).
 * It refuses, with EPERM, what container runtimes keep from containers:
 * - the kernel keyring calls (add_key, request_key, keyctl): keyrings
 *   belong to the kernel, not to a namespace, so a key a command adds to its
 *   user's keyring would outlive the run, every other run of the same host
 *   user (any tenant's) could list it, and keys count against that user's
 *   kernel quota;
 * - file leases (`fcntl` F_SETLEASE, which runtimes refuse by dropping
 *   CAP_LEASE): a command may lease any file its host user owns, and the
 *   sandbox's user is the service's, so it could make every open of a file
 *   of the host it can only read (`/etc/ld.so.cache`, `/etc/resolv.conf`)
 *   wait up to the kernel's lease-break time, other tenants' runs and the
 *   service's own lookups included.
 * Nothing a command needs goes through either.
 *
 * The filter is a classic BPF program (`struct sock_filter` entries, as
 * `seccomp_export_bpf` writes them) for each architecture a kernel of this
 * machine's kind runs programs of: x86-64 with its x32 and i386 ABIs, arm64
 * with 32-bit arm. Programs of another architecture pass unfiltered.
 */

// BPF instruction classes and the fields of `struct seccomp_data` (nr at 0, arch at 4, the arguments at 16 on, 8 bytes each).
const LOAD_WORD = 0x20
const JUMP_IF_EQUAL = 0x15
const RETURN = 0x06
const NR_OFFSET = 0
const ARCH_OFFSET = 4
/** fcntl's command (its second argument, an int: the low word, little-endian). */
const SECOND_ARGUMENT_OFFSET = 24
const F_SETLEASE = 1024

const RET_ALLOW = 0x7fff0000
const RET_ERRNO_EPERM = 0x00050000 | 1
/** Set in the number of an x32 system call (an x86-64 process may make either kind). */
const X32 = 0x40000000

/** By AUDIT_ARCH value: add_key, request_key and keyctl (refused), and fcntl (refused for F_SETLEASE). */
const ARCHITECTURES: Array<{ arch: number, refused: number[], fcntl: number[] }> = [
  { arch: 0xc000003e, refused: [248, 249, 250, X32 + 248, X32 + 249, X32 + 250], fcntl: [72, X32 + 72] },
  { arch: 0x40000003, refused: [286, 287, 288], fcntl: [55, 221] },
  { arch: 0xc00000b7, refused: [217, 218, 219], fcntl: [25] },
  { arch: 0x40000028, refused: [309, 310, 311], fcntl: [55, 221] },
]

/** The machines (`process.arch`) whose programs are all of the architectures above. */
export const FILTERED_ARCHITECTURES: readonly string[] = ['x64', 'arm64']

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
 * Per architecture: its number compared, then the call's number against
 * each refused call (on to the refusal at the end) and each fcntl (on to the
 * check of its command, shared by all: the arguments lie where they lie on
 * every architecture); anything else is allowed.
 */
function program (): Instruction[] {
  const length = 1 + ARCHITECTURES.reduce((sum, { refused, fcntl }) => sum + refused.length + fcntl.length + 3, 0) + 1 + 4
  const refusal = length - 1
  const leaseCheck = length - 4
  const instructions = [load(ARCH_OFFSET)]
  // Offsets count from the instruction after the jump.
  const to = (target: number): number => target - (instructions.length + 1)
  for (const { arch, refused, fcntl } of ARCHITECTURES) {
    // Another architecture skips this one's block: its load, its tests and its allow.
    instructions.push(jumpIfEqual(arch, 0, refused.length + fcntl.length + 2), load(NR_OFFSET))
    for (const call of refused) instructions.push(jumpIfEqual(call, to(refusal), 0))
    for (const call of fcntl) instructions.push(jumpIfEqual(call, to(leaseCheck), 0))
    instructions.push(answer(RET_ALLOW))
  }
  instructions.push(answer(RET_ALLOW))
  instructions.push(load(SECOND_ARGUMENT_OFFSET))
  instructions.push(jumpIfEqual(F_SETLEASE, to(refusal), 0))
  instructions.push(answer(RET_ALLOW), answer(RET_ERRNO_EPERM))
  return instructions
}

/** The filter as bubblewrap reads it: `struct sock_filter` entries, little-endian as both architectures are. */
export const SECCOMP_FILTER: Buffer = Buffer.concat(program().map(({ code, jt, jf, k }) => {
  const entry = Buffer.alloc(8)
  entry.writeUInt16LE(code, 0)
  entry.writeUInt8(jt, 2)
  entry.writeUInt8(jf, 3)
  entry.writeUInt32LE(k, 4)
  return entry
}))
