//! The system-call filter a sandboxed command runs under.
//!
//! It refuses what the mounts and the dropped capabilities cannot:
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
//! * **Set-user-ID and set-group-ID files.** The sandbox's mounts are
//!   `nosuid`, but the run's files stay on the host's disk, where they are
//!   not: a set-uid program the command left in `work/` would run as the
//!   user runws ran as (as root, as root, since the run's directories are
//!   id-mapped to root) for whoever executes it later. `chmod`, `fchmod`,
//!   `fchmodat`, `fchmodat2` and `mknod(at)` with `S_ISUID` or `S_ISGID` in
//!   the mode, and `open(at)`/`creat` creating a file with either, fail with
//!   `EPERM`; `openat2` (whose mode lives in memory) fails with `ENOSYS`, so
//!   callers fall back to `openat`. A set-group-ID directory is refused too.
//!
//! * **Kernel interfaces that are not namespaced or that bypass the
//!   filter**: `add_key`, `request_key` and `keyctl` fail with `EPERM` (the
//!   session keyring runws was started in, and the user keyring linked to
//!   it, hold the caller's keys), and `io_uring_setup`, `io_uring_enter`
//!   and `io_uring_register` with `ENOSYS` (a ring performs opens and mode
//!   changes without a system call the filter sees).
//!
//! Only the low 32 bits of an argument are compared, because the kernel
//! reads only those for every argument checked here (`ioctl`'s request is
//! an `unsigned int`, flags and modes are 32-bit): a filter that compared
//! all 64 could be passed with a high bit set. System calls of another ABI
//! (32-bit x86 on x86-64) get the same rules with their own numbers; the
//! x32 ABI, which shares the x86-64 audit arch, is refused outright, and an
//! unknown ABI kills the process.
//!
//! The filter is classic BPF built here from a table of rules, installed
//! with `PR_SET_NO_NEW_PRIVS` already set, in the command's process right
//! before `execve`; every process the command starts inherits it.

use nix::libc;

use super::refused::Refused;
use crate::sys::ns::Insn;

const P: &str = "system-call filter";

// seccomp_data: { int nr; u32 arch; u64 instruction_pointer; u64 args[6] }.
const NR: u32 = 0;
const ARCH: u32 = 4;
/// The offset of the low 32 bits of argument `i` (little-endian).
const fn arg(i: u32) -> u32 {
    16 + 8 * i
}

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
const SET_ID_BITS: u32 = 0o6000;
/// `O_CREAT | __O_TMPFILE`: an open that may create a file with a mode.
const CREATES: u32 = 0o100 | 0o2000_0000;

/// System-call numbers of one ABI; `None` where the ABI lacks the call.
struct Abi {
    arch: u32,
    unshare: u32,
    clone: u32,
    clone3: u32,
    ioctl: u32,
    open: Option<u32>,
    openat: u32,
    openat2: u32,
    creat: Option<u32>,
    mknod: Option<u32>,
    mknodat: u32,
    chmod: Option<u32>,
    fchmod: u32,
    fchmodat: u32,
    fchmodat2: u32,
    io_uring: [u32; 3],
    keys: [u32; 3],
    socket: u32,
    /// i386's multiplexer of every socket call, whose arguments live in
    /// memory a filter cannot read.
    socketcall: Option<u32>,
}

#[cfg(target_arch = "x86_64")]
const ABIS: &[Abi] = &[
    Abi {
        arch: AUDIT_ARCH_X86_64,
        unshare: 272,
        clone: 56,
        clone3: 435,
        ioctl: 16,
        open: Some(2),
        openat: 257,
        openat2: 437,
        creat: Some(85),
        mknod: Some(133),
        mknodat: 259,
        chmod: Some(90),
        fchmod: 91,
        fchmodat: 268,
        fchmodat2: 452,
        io_uring: [425, 426, 427],
        keys: [248, 249, 250],
        socket: 41,
        socketcall: None,
    },
    Abi {
        arch: AUDIT_ARCH_I386,
        unshare: 310,
        clone: 120,
        clone3: 435,
        ioctl: 54,
        open: Some(5),
        openat: 295,
        openat2: 437,
        creat: Some(8),
        mknod: Some(14),
        mknodat: 297,
        chmod: Some(15),
        fchmod: 94,
        fchmodat: 306,
        fchmodat2: 452,
        io_uring: [425, 426, 427],
        keys: [286, 287, 288],
        socket: 359,
        socketcall: Some(102),
    },
];
#[cfg(target_arch = "aarch64")]
const ABIS: &[Abi] = &[Abi {
    arch: AUDIT_ARCH_AARCH64,
    unshare: 97,
    clone: 220,
    clone3: 435,
    ioctl: 29,
    open: None,
    openat: 56,
    openat2: 437,
    creat: None,
    mknod: None,
    mknodat: 33,
    chmod: None,
    fchmod: 52,
    fchmodat: 53,
    fchmodat2: 452,
    io_uring: [425, 426, 427],
    keys: [217, 218, 219],
    socket: 198,
    socketcall: None,
}];
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const ABIS: &[Abi] = &[];

// Keep the constants of the other architectures from warning.
const _: u32 = AUDIT_ARCH_AARCH64 ^ AUDIT_ARCH_I386 ^ AUDIT_ARCH_X86_64;

/// What the filter refuses, for one system call.
#[derive(Clone, Copy)]
enum Rule {
    /// Always, with this errno.
    Always(u32, i32),
    /// When argument `arg` has any bit of `mask`.
    AnyBit { nr: u32, arg: u32, mask: u32, errno: i32 },
    /// When argument `arg` equals one of `values`.
    OneOf { nr: u32, arg: u32, values: &'static [u32], errno: i32 },
    /// When argument `arg` is anything but `value`.
    Not { nr: u32, arg: u32, value: u32, errno: i32 },
    /// When argument `flags` has a bit of `flags_mask` and `mode` a bit of
    /// `mode_mask`.
    Both { nr: u32, flags: u32, flags_mask: u32, mode: u32, mode_mask: u32, errno: i32 },
}

/// What the filter refuses besides what it always refuses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Filter {
    /// `--allow-userns`: nested user namespaces are allowed.
    pub allow_userns: bool,
    /// The Landlock backend's `--net none`: no socket but a unix one (no
    /// network namespace stands behind it). `socket` with another family
    /// fails with `EAFNOSUPPORT`; i386's `socketcall` with `ENOSYS`, so
    /// 32-bit programs use `socket` itself.
    pub unix_sockets_only: bool,
}

fn rules(abi: &Abi, filter: Filter) -> Vec<Rule> {
    use Rule::*;
    let allow_userns = filter.allow_userns;
    let (eperm, enosys) = (libc::EPERM, libc::ENOSYS);
    let set_id = |nr: u32, arg: u32| AnyBit { nr, arg, mask: SET_ID_BITS, errno: eperm };
    let mut out = vec![OneOf { nr: abi.ioctl, arg: 1, values: &[TIOCSTI, TIOCLINUX], errno: eperm }];
    if !allow_userns {
        out.push(AnyBit { nr: abi.unshare, arg: 0, mask: CLONE_NEWUSER, errno: eperm });
        out.push(AnyBit { nr: abi.clone, arg: 0, mask: CLONE_NEWUSER, errno: eperm });
        out.push(Always(abi.clone3, enosys));
    }
    out.extend(abi.chmod.map(|nr| set_id(nr, 1)));
    out.push(set_id(abi.fchmod, 1));
    out.push(set_id(abi.fchmodat, 2));
    out.push(set_id(abi.fchmodat2, 2));
    out.extend(abi.mknod.map(|nr| set_id(nr, 1)));
    out.push(set_id(abi.mknodat, 2));
    out.extend(abi.creat.map(|nr| set_id(nr, 1)));
    let creating = |nr: u32, flags: u32| Both {
        nr,
        flags,
        flags_mask: CREATES,
        mode: flags + 1,
        mode_mask: SET_ID_BITS,
        errno: eperm,
    };
    out.extend(abi.open.map(|nr| creating(nr, 1)));
    out.push(creating(abi.openat, 2));
    out.push(Always(abi.openat2, enosys));
    // io_uring performs opens, chmods and more without a system call this
    // filter sees; programs fall back to plain calls on ENOSYS.
    out.extend(abi.io_uring.iter().map(|&nr| Always(nr, enosys)));
    // Keyrings are not namespaced: the session keyring runws was started in
    // (and the user keyring linked to it) would be readable.
    out.extend(abi.keys.iter().map(|&nr| Always(nr, eperm)));
    if filter.unix_sockets_only {
        out.push(Not { nr: abi.socket, arg: 0, value: libc::AF_UNIX as u32, errno: libc::EAFNOSUPPORT });
        out.extend(abi.socketcall.map(|nr| Always(nr, enosys)));
    }
    out
}

const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const JSET_K: u16 = 0x45; // BPF_JMP | BPF_JSET | BPF_K
const JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
const RET_K: u16 = 0x06; // BPF_RET | BPF_K
const JA: u16 = 0x05; // BPF_JMP | BPF_JA

fn stmt(code: u16, k: u32) -> Insn {
    Insn { code, jt: 0, jf: 0, k }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> Insn {
    Insn { code, jt, jf, k }
}

fn errno(e: i32) -> u32 {
    RET_ERRNO | (e as u32 & 0xffff)
}

/// An instruction whose jumps name labels, resolved by [`assemble`].
#[derive(Clone, Copy)]
enum Op {
    Load(u32),
    Ret(u32),
    /// `code` is JEQ, JGE or JSET with `k`; jump to `t` when true, `f` when
    /// false.
    Jump {
        code: u16,
        k: u32,
        t: usize,
        f: usize,
    },
    /// An unconditional jump.
    Goto(usize),
    /// Where a label points (no instruction).
    Label(usize),
}

/// Labels and instructions for one ABI's block.
struct Block {
    ops: Vec<Op>,
    labels: usize,
}

impl Block {
    fn label(&mut self) -> usize {
        self.labels += 1;
        self.labels - 1
    }

    fn at(&mut self, label: usize) {
        self.ops.push(Op::Label(label));
    }

    /// The rule's test, entered with the call number loaded: it returns
    /// the rule's verdict when it applies and "allow" otherwise.
    fn rule(&mut self, rule: Rule) {
        let allow = self.label();
        let refuse = self.label();
        let verdict = match rule {
            Rule::Always(_, e) => {
                self.ops.push(Op::Ret(errno(e)));
                return;
            }
            Rule::AnyBit { arg: a, mask, errno: e, .. } => {
                self.ops.push(Op::Load(arg(a)));
                self.ops.push(Op::Jump { code: JSET_K, k: mask, t: refuse, f: allow });
                e
            }
            Rule::OneOf { arg: a, values, errno: e, .. } => {
                self.ops.push(Op::Load(arg(a)));
                for v in values {
                    let next = self.label();
                    self.ops.push(Op::Jump { code: JEQ_K, k: *v, t: refuse, f: next });
                    self.at(next);
                }
                self.ops.push(Op::Goto(allow));
                e
            }
            Rule::Not { arg: a, value, errno: e, .. } => {
                self.ops.push(Op::Load(arg(a)));
                self.ops.push(Op::Jump { code: JEQ_K, k: value, t: allow, f: refuse });
                e
            }
            Rule::Both { flags, flags_mask, mode, mode_mask, errno: e, .. } => {
                let check_mode = self.label();
                self.ops.push(Op::Load(arg(flags)));
                self.ops.push(Op::Jump { code: JSET_K, k: flags_mask, t: check_mode, f: allow });
                self.at(check_mode);
                self.ops.push(Op::Load(arg(mode)));
                self.ops.push(Op::Jump { code: JSET_K, k: mode_mask, t: refuse, f: allow });
                e
            }
        };
        self.at(refuse);
        self.ops.push(Op::Ret(errno(verdict)));
        self.at(allow);
        self.ops.push(Op::Ret(RET_ALLOW));
    }

    /// A binary search over the sorted call numbers of `rules` (the call
    /// number loaded), jumping to each rule's test, or to `allow` for every
    /// other call: a handful of comparisons whatever the call, which keeps
    /// both the filter and the kernel's per-call verdict cache (built by
    /// running the filter once per call number when it is installed) cheap.
    fn search(&mut self, rules: &[(u32, usize)], allow: usize) {
        if rules.len() <= 2 {
            for &(nr, target) in rules {
                let next = self.label();
                self.ops.push(Op::Jump { code: JEQ_K, k: nr, t: target, f: next });
                self.at(next);
            }
            self.ops.push(Op::Goto(allow));
            return;
        }
        let mid = rules.len() / 2;
        let upper = self.label();
        let lower = self.label();
        self.ops.push(Op::Jump { code: JGE_K, k: rules[mid].0, t: upper, f: lower });
        self.at(lower);
        self.search(&rules[..mid], allow);
        self.at(upper);
        self.search(&rules[mid..], allow);
    }
}

fn nr_of(rule: &Rule) -> u32 {
    match *rule {
        Rule::Always(nr, _)
        | Rule::AnyBit { nr, .. }
        | Rule::OneOf { nr, .. }
        | Rule::Not { nr, .. }
        | Rule::Both { nr, .. } => nr,
    }
}

/// Resolves labels into relative jumps (a conditional jump's offsets are
/// one byte; a longer one goes through a `Goto`, whose offset is 32 bits).
fn assemble(ops: &[Op]) -> Vec<Insn> {
    // Lay out: every op but a label is one instruction.
    let mut at = Vec::new();
    let mut n = 0usize;
    let mut labels = std::collections::HashMap::new();
    for op in ops {
        match op {
            Op::Label(l) => {
                labels.insert(*l, n);
            }
            _ => {
                at.push(n);
                n += 1;
            }
        }
    }
    let rel = |from: usize, label: &usize| -> u32 {
        let to = labels[label];
        assert!(to > from, "a filter jump must go forward");
        (to - from - 1) as u32
    };
    let mut out = Vec::with_capacity(n);
    for op in ops {
        let here = out.len();
        out.push(match op {
            Op::Label(_) => continue,
            Op::Load(k) => stmt(LD_W_ABS, *k),
            Op::Ret(k) => stmt(RET_K, *k),
            Op::Goto(l) => stmt(JA, rel(here, l)),
            Op::Jump { code, k, t, f } => {
                let (t, f) = (rel(here, t), rel(here, f));
                let byte = |o: u32| u8::try_from(o).expect("the search keeps conditional jumps short");
                jump(*code, *k, byte(t), byte(f))
            }
        });
    }
    debug_assert_eq!(at.len(), out.len());
    out
}

/// The filter program: per ABI, a block entered only for that ABI's
/// audit arch: load the call number, search it among the calls the rules
/// name, run that call's test; every other call is allowed.
fn program(filter: Filter) -> Vec<Insn> {
    let mut out = Vec::new();
    for abi in ABIS {
        let mut b = Block { ops: Vec::new(), labels: 0 };
        b.ops.push(Op::Load(NR));
        if abi.arch == AUDIT_ARCH_X86_64 {
            // x32 calls carry the x86-64 audit arch and a high bit in nr.
            let native = b.label();
            let x32 = b.label();
            b.ops.push(Op::Jump { code: JGE_K, k: X32_SYSCALL_BIT, t: x32, f: native });
            b.at(x32);
            b.ops.push(Op::Ret(errno(libc::ENOSYS)));
            b.at(native);
        }
        let mut rules = rules(abi, filter);
        rules.sort_by_key(nr_of);
        let targets: Vec<(u32, usize)> = rules.iter().map(|r| (nr_of(r), b.label())).collect();
        let allow = b.label();
        b.search(&targets, allow);
        for (rule, (_, label)) in rules.iter().zip(&targets) {
            b.at(*label);
            b.rule(*rule);
        }
        b.at(allow);
        b.ops.push(Op::Ret(RET_ALLOW));
        let block = assemble(&b.ops);
        out.push(stmt(LD_W_ABS, ARCH));
        out.push(jump(JEQ_K, abi.arch, 0, u8::try_from(block.len()).expect("a block fits a jump")));
        out.extend(block);
    }
    // An ABI the filter does not know: nothing it runs can be trusted to
    // obey the rules above.
    out.push(stmt(RET_K, RET_KILL_PROCESS));
    out
}

/// Installs the filter on this process (and, through inheritance, on
/// everything it executes). `PR_SET_NO_NEW_PRIVS` must already be set.
pub fn install(filter: Filter) -> Result<(), Refused> {
    let prog = compiled(filter)?;
    crate::sys::ns::install_seccomp_filter(&prog)
        .map_err(|e| Refused::new(P, format!("prctl(PR_SET_SECCOMP): {e}")))
}

/// The program of `filter`, for a process that installs it itself (see
/// [`crate::child::Confinement`]); refused where no filter is defined.
pub fn compiled(filter: Filter) -> Result<Vec<crate::sys::ns::Insn>, Refused> {
    if ABIS.is_empty() {
        return Err(Refused::new(P, "no filter is defined for this architecture"));
    }
    Ok(program(filter))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every jump lands inside the program and it ends in a return.
    #[test]
    fn jumps_stay_inside_the_program() {
        for f in filters() {
            let p = program(f);
            assert!(p.len() < u16::MAX as usize);
            for (i, insn) in p.iter().enumerate() {
                if insn.code == JA {
                    assert!(i + 1 + (insn.k as usize) < p.len(), "goto at {i} leaves the program");
                } else if insn.code & 0x07 == 0x05 {
                    let (t, f) = (i + 1 + insn.jt as usize, i + 1 + insn.jf as usize);
                    assert!(t < p.len() && f < p.len(), "jump at {i} leaves the program");
                }
            }
            assert_eq!(p.last().unwrap().code, RET_K);
        }
    }

    fn filters() -> [Filter; 3] {
        [
            Filter::default(),
            Filter { allow_userns: true, ..Filter::default() },
            Filter { allow_userns: false, unix_sockets_only: true },
        ]
    }

    /// Without a network namespace behind `--net none`, only unix sockets.
    #[test]
    fn unix_sockets_only_refuses_every_other_family() {
        let only = program(Filter { allow_userns: false, unix_sockets_only: true });
        let open = program(Filter::default());
        let refused = errno(libc::EAFNOSUPPORT);
        for abi in ABIS {
            assert_eq!(verdict(&only, abi.arch, abi.socket, [1, 1, 0, 0]), RET_ALLOW, "AF_UNIX");
            for family in [2u32, 10, 16, 17, 0x1_0001] {
                assert_eq!(
                    verdict(&only, abi.arch, abi.socket, [family, 1, 0, 0]),
                    refused,
                    "family {family}"
                );
                assert_eq!(verdict(&open, abi.arch, abi.socket, [family, 1, 0, 0]), RET_ALLOW);
            }
            if let Some(nr) = abi.socketcall {
                assert_eq!(verdict(&only, abi.arch, nr, [1, 0, 0, 0]), errno(libc::ENOSYS));
            }
        }
    }

    /// A small interpreter of the filter: the verdict for one call.
    fn verdict(p: &[Insn], arch: u32, nr: u32, args: [u32; 4]) -> u32 {
        run(p, arch, nr, args).0
    }

    /// The verdict and how many instructions it took.
    fn run(p: &[Insn], arch: u32, nr: u32, args: [u32; 4]) -> (u32, usize) {
        let mut acc = 0u32;
        let mut pc = 0usize;
        let mut steps = 0;
        loop {
            let insn = p[pc];
            pc += 1;
            steps += 1;
            match insn.code {
                LD_W_ABS => {
                    acc = match insn.k {
                        NR => nr,
                        ARCH => arch,
                        k if (16..16 + 8 * 4).contains(&k) && (k - 16) % 8 == 0 => {
                            args[((k - 16) / 8) as usize]
                        }
                        other => panic!("load of offset {other}"),
                    }
                }
                JA => pc += insn.k as usize,
                JEQ_K => pc += if acc == insn.k { insn.jt } else { insn.jf } as usize,
                JGE_K => pc += if acc >= insn.k { insn.jt } else { insn.jf } as usize,
                JSET_K => pc += if acc & insn.k != 0 { insn.jt } else { insn.jf } as usize,
                RET_K => return (insn.k, steps),
                other => panic!("unknown instruction {other:#x}"),
            }
        }
    }

    /// Every call the rules do not name is allowed whatever its arguments,
    /// and every call takes a handful of instructions (the kernel runs the
    /// filter once per call number when it is installed).
    #[test]
    fn other_calls_are_allowed_quickly() {
        for f in filters() {
            let p = program(f);
            for abi in ABIS {
                let named: Vec<u32> = rules(abi, f).iter().map(nr_of).collect();
                for nr in 0..600 {
                    let (v, steps) = run(&p, abi.arch, nr, [u32::MAX; 4]);
                    assert!(steps <= 16, "call {nr} takes {steps} instructions");
                    if !named.contains(&nr) {
                        assert_eq!(v, RET_ALLOW, "call {nr} of arch {:#x}", abi.arch);
                    }
                }
            }
        }
    }

    #[test]
    fn the_rules_refuse_what_they_name_and_nothing_else() {
        let (eperm, enosys) = (errno(libc::EPERM), errno(libc::ENOSYS));
        for abi in ABIS {
            let strict = program(Filter::default());
            let v = |nr, args| verdict(&strict, abi.arch, nr, args);
            assert_eq!(v(abi.unshare, [CLONE_NEWUSER, 0, 0, 0]), eperm);
            assert_eq!(v(abi.unshare, [CLONE_NEWUSER | 0x20000, 0, 0, 0]), eperm);
            assert_eq!(v(abi.unshare, [0x20000, 0, 0, 0]), RET_ALLOW, "unshare of a mount namespace");
            assert_eq!(v(abi.clone, [CLONE_NEWUSER, 0, 0, 0]), eperm);
            assert_eq!(v(abi.clone, [0x11, 0, 0, 0]), RET_ALLOW, "a plain fork");
            assert_eq!(v(abi.clone3, [0; 4]), enosys);
            assert_eq!(v(abi.ioctl, [0, TIOCSTI, 0, 0]), eperm);
            assert_eq!(v(abi.ioctl, [0, TIOCLINUX, 0, 0]), eperm);
            assert_eq!(v(abi.ioctl, [0, 0x5401, 0, 0]), RET_ALLOW, "TCGETS");
            assert_eq!(v(abi.fchmod, [3, 0o4755, 0, 0]), eperm);
            assert_eq!(v(abi.fchmod, [3, 0o2755, 0, 0]), eperm);
            assert_eq!(v(abi.fchmod, [3, 0o1777, 0, 0]), RET_ALLOW, "the sticky bit");
            assert_eq!(v(abi.fchmodat, [0, 0, 0o4700, 0]), eperm);
            assert_eq!(v(abi.fchmodat, [0, 0, 0o755, 0]), RET_ALLOW);
            assert_eq!(v(abi.fchmodat2, [0, 0, 0o6755, 0]), eperm);
            assert_eq!(v(abi.mknodat, [0, 0, 0o104755, 0]), eperm);
            assert_eq!(v(abi.openat, [0, 0, 0o101, 0o4755]), eperm, "O_CREAT with set-uid");
            assert_eq!(v(abi.openat, [0, 0, 0o1, 0o4755]), RET_ALLOW, "no O_CREAT: the mode is unused");
            assert_eq!(v(abi.openat, [0, 0, 0o101, 0o644]), RET_ALLOW);
            assert_eq!(v(abi.openat, [0, 0, 0o2000_0002, 0o2600]), eperm, "O_TMPFILE");
            assert_eq!(v(abi.openat2, [0; 4]), enosys);
            for nr in abi.io_uring {
                assert_eq!(v(nr, [0; 4]), enosys);
            }
            for nr in abi.keys {
                assert_eq!(v(nr, [0; 4]), eperm);
            }
            if let (Some(chmod), Some(open), Some(creat)) = (abi.chmod, abi.open, abi.creat) {
                assert_eq!(v(chmod, [0, 0o4755, 0, 0]), eperm);
                assert_eq!(v(open, [0, 0o101, 0o4755, 0]), eperm);
                assert_eq!(v(creat, [0, 0o4755, 0, 0]), eperm);
                assert_eq!(v(creat, [0, 0o755, 0, 0]), RET_ALLOW);
            }
            assert_eq!(v(0, [0; 4]), RET_ALLOW);
            let relaxed = program(Filter { allow_userns: true, ..Filter::default() });
            assert_eq!(verdict(&relaxed, abi.arch, abi.unshare, [CLONE_NEWUSER, 0, 0, 0]), RET_ALLOW);
            assert_eq!(verdict(&relaxed, abi.arch, abi.ioctl, [0, TIOCSTI, 0, 0]), eperm);
            assert_eq!(verdict(&relaxed, abi.arch, abi.fchmod, [3, 0o4755, 0, 0]), eperm);
        }
        let strict = program(Filter::default());
        assert_eq!(verdict(&strict, 0x1234, 0, [0; 4]), RET_KILL_PROCESS);
        #[cfg(target_arch = "x86_64")]
        assert_eq!(verdict(&strict, AUDIT_ARCH_X86_64, X32_SYSCALL_BIT | 272, [0; 4]), enosys);
    }
}
