//! The system-call filter a sandboxed command runs under.
//!
//! It refuses two things the mounts and the dropped capabilities cannot:
//!
//! * **Nested user namespaces** (unless `--allow-userns`). A process that
//!   creates a user namespace holds every capability inside it: nothing it
//!   can reach that way leaves the sandbox (the mounts it could change are
//!   its own copies), but "the command holds no capability" would no longer
//!   be what a reader of the manifest believes, and each new namespace is
//!   kernel attack surface. `unshare` and `clone` with `CLONE_NEWUSER` fail
//!   with `EPERM`; `clone3` (whose flags live in memory a filter cannot
//!   read) fails with `ENOSYS`, so C libraries fall back to `clone`.
//! * **Typing into the user's terminal** (`TIOCSTI`, and `TIOCLINUX`, which
//!   can paste a console selection): the command shares the terminal of the
//!   shell that started runws, and input pushed there runs as the user,
//!   outside every protection, once the run ends.
//!
//! Only the low 32 bits of a request or flag word are compared, because
//! the kernel reads only those (`ioctl`'s request is an `unsigned int`): a
//! filter that compared all 64 could be passed with a high bit set.
//! System calls of another ABI (32-bit x86 on x86-64) get the same rules
//! with their own numbers; the x32 ABI, which shares the x86-64 audit arch,
//! is refused outright.
//!
//! The filter is a few classic-BPF instructions built here, installed with
//! `PR_SET_NO_NEW_PRIVS` already set, in the command's process right before
//! `execve`; every process the command starts inherits it.

use std::io;

use nix::libc;

use super::ns::Refused;

const P: &str = "system-call filter";

// seccomp_data: { int nr; u32 arch; u64 instruction_pointer; u64 args[6] }.
const NR: u32 = 0;
const ARCH: u32 = 4;
const ARG0_LOW: u32 = 16;
const ARG1_LOW: u32 = 24;

const RET_ALLOW: u32 = 0x7fff_0000;
const RET_ERRNO: u32 = 0x0005_0000;
const RET_KILL_PROCESS: u32 = 0x8000_0000;

const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
const AUDIT_ARCH_I386: u32 = 0x4000_0003;
const AUDIT_ARCH_AARCH64: u32 = 0xc000_00b7;
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

const TIOCSTI: u32 = 0x5412;
const TIOCLINUX: u32 = 0x541c;
const CLONE_NEWUSER: u32 = 0x1000_0000;

/// The system-call numbers the filter looks at, for one ABI.
struct Abi {
    arch: u32,
    unshare: u32,
    clone: u32,
    clone3: u32,
    ioctl: u32,
}

#[cfg(target_arch = "x86_64")]
const ABIS: &[Abi] = &[
    Abi { arch: AUDIT_ARCH_X86_64, unshare: 272, clone: 56, clone3: 435, ioctl: 16 },
    Abi { arch: AUDIT_ARCH_I386, unshare: 310, clone: 120, clone3: 435, ioctl: 54 },
];
#[cfg(target_arch = "aarch64")]
const ABIS: &[Abi] = &[Abi { arch: AUDIT_ARCH_AARCH64, unshare: 97, clone: 220, clone3: 435, ioctl: 29 }];
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const ABIS: &[Abi] = &[];

// Keep the unused constant of the other architecture from warning.
const _: u32 = AUDIT_ARCH_AARCH64 ^ AUDIT_ARCH_I386 ^ AUDIT_ARCH_X86_64;

/// One classic-BPF instruction, as `struct sock_filter`.
#[derive(Clone, Copy)]
#[repr(C)]
struct Insn {
    code: u16,
    jt: u8,
    jf: u8,
    k: u32,
}

const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const JSET_K: u16 = 0x45; // BPF_JMP | BPF_JSET | BPF_K
const JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
const RET_K: u16 = 0x06; // BPF_RET | BPF_K

fn stmt(code: u16, k: u32) -> Insn {
    Insn { code, jt: 0, jf: 0, k }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> Insn {
    Insn { code, jt, jf, k }
}

/// The filter program. Per ABI, in order: a block that checks the
/// architecture and skips to the next block when it differs; in it, each
/// rule loads the call number, compares, and either returns its verdict or
/// falls through. Jumps are relative, so each block is built from the end.
fn program(allow_userns: bool) -> Vec<Insn> {
    let errno = |e: i32| RET_ERRNO | (e as u32 & 0xffff);
    let mut out = Vec::new();
    for abi in ABIS {
        let mut block: Vec<Insn> = Vec::new();
        if abi.arch == AUDIT_ARCH_X86_64 {
            // x32 calls carry the x86-64 audit arch and a high bit in nr.
            block.push(stmt(LD_W_ABS, NR));
            block.push(jump(JGE_K, X32_SYSCALL_BIT, 0, 1));
            block.push(stmt(RET_K, errno(libc::ENOSYS)));
        }
        // ioctl(fd, TIOCSTI | TIOCLINUX, ...)
        block.push(stmt(LD_W_ABS, NR));
        block.push(jump(JEQ_K, abi.ioctl, 0, 4));
        block.push(stmt(LD_W_ABS, ARG1_LOW));
        block.push(jump(JEQ_K, TIOCSTI, 1, 0));
        block.push(jump(JEQ_K, TIOCLINUX, 0, 1));
        block.push(stmt(RET_K, errno(libc::EPERM)));
        if !allow_userns {
            for nr in [abi.unshare, abi.clone] {
                block.push(stmt(LD_W_ABS, NR));
                block.push(jump(JEQ_K, nr, 0, 3));
                block.push(stmt(LD_W_ABS, ARG0_LOW));
                block.push(jump(JSET_K, CLONE_NEWUSER, 0, 1));
                block.push(stmt(RET_K, errno(libc::EPERM)));
            }
            block.push(stmt(LD_W_ABS, NR));
            block.push(jump(JEQ_K, abi.clone3, 0, 1));
            block.push(stmt(RET_K, errno(libc::ENOSYS)));
        }
        block.push(stmt(RET_K, RET_ALLOW));
        // Enter the block only for this ABI; else skip past it.
        out.push(stmt(LD_W_ABS, ARCH));
        out.push(jump(JEQ_K, abi.arch, 0, block.len() as u8));
        out.extend(block);
    }
    // An ABI the filter does not know: nothing it runs can be trusted to
    // obey the rules above.
    out.push(stmt(RET_K, RET_KILL_PROCESS));
    out
}

/// Installs the filter on this process (and, through inheritance, on
/// everything it executes). `PR_SET_NO_NEW_PRIVS` must already be set.
pub fn install(allow_userns: bool) -> Result<(), Refused> {
    if ABIS.is_empty() {
        return Err(Refused::new(P, "no filter is defined for this architecture"));
    }
    let prog = program(allow_userns);
    debug_assert!(prog.len() < 256, "relative jumps are one byte");
    #[repr(C)]
    struct Fprog {
        len: u16,
        filter: *const Insn,
    }
    let fprog = Fprog { len: prog.len() as u16, filter: prog.as_ptr() };
    // SAFETY: prctl reads `fprog` and the instructions it points to, both alive for the call; the kernel copies them.
    let r = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER as libc::c_ulong,
            &fprog as *const Fprog,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    if r < 0 {
        return Err(Refused::new(P, format!("prctl(PR_SET_SECCOMP): {}", io::Error::last_os_error())));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every jump lands inside the program, and each ABI's block ends in a
    /// return (so no rule falls into the next ABI's block).
    #[test]
    fn jumps_stay_inside_the_program() {
        for allow in [false, true] {
            let p = program(allow);
            for (i, insn) in p.iter().enumerate() {
                if insn.code & 0x07 == 0x05 {
                    let (t, f) = (i + 1 + insn.jt as usize, i + 1 + insn.jf as usize);
                    assert!(t < p.len() && f < p.len(), "jump at {i} leaves the program");
                }
            }
            assert_eq!(p.last().unwrap().code, RET_K);
        }
    }

    /// A small interpreter of the filter: the verdict for one call.
    fn verdict(p: &[Insn], arch: u32, nr: u32, a0: u32, a1: u32) -> u32 {
        let mut acc = 0u32;
        let mut pc = 0usize;
        loop {
            let insn = p[pc];
            pc += 1;
            match insn.code {
                LD_W_ABS => {
                    acc = match insn.k {
                        NR => nr,
                        ARCH => arch,
                        ARG0_LOW => a0,
                        ARG1_LOW => a1,
                        other => panic!("load of offset {other}"),
                    }
                }
                JEQ_K => pc += if acc == insn.k { insn.jt } else { insn.jf } as usize,
                JGE_K => pc += if acc >= insn.k { insn.jt } else { insn.jf } as usize,
                JSET_K => pc += if acc & insn.k != 0 { insn.jt } else { insn.jf } as usize,
                RET_K => return insn.k,
                other => panic!("unknown instruction {other:#x}"),
            }
        }
    }

    #[test]
    fn the_rules_refuse_what_they_name_and_nothing_else() {
        let eperm = RET_ERRNO | libc::EPERM as u32;
        let enosys = RET_ERRNO | libc::ENOSYS as u32;
        for abi in ABIS {
            let strict = program(false);
            let v = |nr, a0, a1| verdict(&strict, abi.arch, nr, a0, a1);
            assert_eq!(v(abi.unshare, CLONE_NEWUSER, 0), eperm);
            assert_eq!(v(abi.unshare, CLONE_NEWUSER | 0x20000, 0), eperm);
            assert_eq!(v(abi.unshare, 0x20000, 0), RET_ALLOW, "unshare of a mount namespace");
            assert_eq!(v(abi.clone, CLONE_NEWUSER, 0), eperm);
            assert_eq!(v(abi.clone, 0x11, 0), RET_ALLOW, "a plain fork");
            assert_eq!(v(abi.clone3, 0, 0), enosys);
            assert_eq!(v(abi.ioctl, 0, TIOCSTI), eperm);
            assert_eq!(v(abi.ioctl, 0, TIOCLINUX), eperm);
            assert_eq!(v(abi.ioctl, 0, 0x5401), RET_ALLOW, "TCGETS");
            assert_eq!(v(0, 0, 0), RET_ALLOW);
            let relaxed = program(true);
            assert_eq!(verdict(&relaxed, abi.arch, abi.unshare, CLONE_NEWUSER, 0), RET_ALLOW);
            assert_eq!(verdict(&relaxed, abi.arch, abi.ioctl, 0, TIOCSTI), eperm);
        }
        let strict = program(false);
        assert_eq!(verdict(&strict, 0x1234, 0, 0, 0), RET_KILL_PROCESS);
        #[cfg(target_arch = "x86_64")]
        assert_eq!(verdict(&strict, AUDIT_ARCH_X86_64, X32_SYSCALL_BIT | 272, 0, 0), enosys);
    }
}
