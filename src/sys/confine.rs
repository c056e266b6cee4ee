//! What a Landlock sandbox's command process does to itself around its
//! gate, with direct system calls (see [`Confinement`]); run from
//! [`super::launch`]'s child, which shares runws's memory until its exec.

use std::os::fd::RawFd;

use nix::libc;

use super::{raw as sys, unreachable_end};

/// Restrictions the child puts on itself with direct system calls once its
/// descriptors and directory are in place: what the Landlock backend of the
/// sandbox needs, which thereby takes no fork and no init of runws's own.
/// Before its gate (so while runws records the run), in this order:
/// no-new-privileges; every descriptor from `cloexec_from` up marked
/// close-on-exec; the capability bounding set, the ambient set and the
/// effective, permitted and inheritable sets emptied; the system-call filter
/// installed. Past its gate, right before its exec: the Landlock ruleset
/// enforced, which runws may still be filling until it opens the gate (a
/// ruleset only grants: one enforced early would deny more, never less). A
/// failure ends the child, with the step and errno on the error pipe (see
/// [`Confinement::step_name`]).
pub struct Confinement {
    pub cloexec_from: u32,
    /// Whether an empty bounding set is required: a process that holds no
    /// capability cannot drop it (CAP_SETPCAP), nor gain anything back with
    /// no-new-privileges set.
    pub bounding_required: bool,
    /// A Landlock ruleset, filled by runws until the gate opens (the child
    /// only enforces it, past the gate).
    pub landlock: Option<std::os::fd::OwnedFd>,
    /// A seccomp program (classic BPF), installed before the gate.
    pub filter: Vec<super::ns::Insn>,
}

/// The steps of a [`Confinement`], numbered as the error pipe reports them.
const STEP_NO_NEW_PRIVS: i32 = 1;
const STEP_CLOEXEC: i32 = 2;
const STEP_BOUNDING: i32 = 3;
const STEP_AMBIENT: i32 = 4;
const STEP_CAPSET: i32 = 5;
const STEP_LANDLOCK: i32 = 6;
const STEP_FILTER: i32 = 7;
/// Not a [`Confinement`] step: joining a control group (see
/// `child::Spec::join_groups`).
pub const STEP_JOIN: i32 = 8;

impl Confinement {
    /// What failed, for a step number the child reported.
    pub fn step_name(step: i32) -> &'static str {
        match step {
            STEP_NO_NEW_PRIVS => "no-new-privileges flag: prctl",
            STEP_CLOEXEC => "descriptor isolation: close_range",
            STEP_BOUNDING => "capability drop: cannot drop the bounding set",
            STEP_AMBIENT => "capability drop: cannot clear the ambient set",
            STEP_CAPSET => "capability drop: capset",
            STEP_LANDLOCK => "Landlock: landlock_restrict_self",
            STEP_FILTER => "system-call filter: prctl(PR_SET_SECCOMP)",
            STEP_JOIN => "cannot put the command into its control group",
            _ => "confinement",
        }
    }
}

/// A [`Confinement`] as the child reads it.
#[derive(Clone, Copy)]
pub(super) struct RawConfinement {
    pub(super) cloexec_from: u32,
    pub(super) bounding_required: bool,
    /// -1: none.
    pub(super) landlock: RawFd,
    pub(super) filter: *const super::ns::Insn,
    pub(super) filter_len: u16,
}

/// Reports a [`Confinement`] step's failure (the errno, then the step) and
/// ends the child.
///
/// # Safety
/// Only in the child.
pub(super) unsafe fn fail_at(errors: RawFd, step: i32, errno: isize) -> ! {
    let mut bytes = [0u8; 8];
    bytes[..4].copy_from_slice(&(errno as i32).to_ne_bytes());
    bytes[4..].copy_from_slice(&step.to_ne_bytes());
    // SAFETY: write of an 8-byte buffer on our stack, then exit_group.
    unsafe {
        sys(libc::SYS_write, errors as usize, bytes.as_ptr() as usize, 8, 0);
        sys(libc::SYS_exit_group, 127, 0, 0, 0);
    }
    unreachable_end()
}

/// The steps of a [`Confinement`] before the gate, with direct system calls.
///
/// # Safety
/// Only in the child, from [`super::launch`]'s preparation; `c.filter` points at `c.filter_len`
/// instructions that outlive the child.
pub(super) unsafe fn confine(errors: RawFd, c: &RawConfinement) {
    // SAFETY: system calls on this child's own state, reading only buffers on its stack and the filter the contract keeps valid.
    unsafe {
        let check = |step: i32, r: isize| {
            if r < 0 {
                fail_at(errors, step, -r);
            }
        };
        check(STEP_NO_NEW_PRIVS, sys(libc::SYS_prctl, libc::PR_SET_NO_NEW_PRIVS as usize, 1, 0, 0));
        const CLOSE_RANGE_CLOEXEC: usize = 1 << 2;
        check(
            STEP_CLOEXEC,
            sys(libc::SYS_close_range, c.cloexec_from as usize, u32::MAX as usize, CLOSE_RANGE_CLOEXEC, 0),
        );
        for cap in 0..64usize {
            let r = sys(libc::SYS_prctl, libc::PR_CAPBSET_DROP as usize, cap, 0, 0);
            // EINVAL: past the last capability this kernel knows.
            if r == -(libc::EINVAL as isize) {
                break;
            }
            if r < 0 {
                if c.bounding_required {
                    fail_at(errors, STEP_BOUNDING, -r);
                }
                break;
            }
        }
        check(
            STEP_AMBIENT,
            sys(
                libc::SYS_prctl,
                libc::PR_CAP_AMBIENT as usize,
                libc::PR_CAP_AMBIENT_CLEAR_ALL as usize,
                0,
                0,
            ),
        );
        // struct __user_cap_header_struct (version 3, this process) and two
        // empty struct __user_cap_data_struct.
        let header: [u32; 2] = [0x2008_0522, 0];
        let data = [0u32; 6];
        check(STEP_CAPSET, sys(libc::SYS_capset, header.as_ptr() as usize, data.as_ptr() as usize, 0, 0));
        if c.filter_len > 0 {
            #[repr(C)]
            struct Fprog {
                len: u16,
                filter: *const super::ns::Insn,
            }
            let prog = Fprog { len: c.filter_len, filter: c.filter };
            check(
                STEP_FILTER,
                sys(
                    libc::SYS_prctl,
                    libc::PR_SET_SECCOMP as usize,
                    libc::SECCOMP_MODE_FILTER as usize,
                    &prog as *const Fprog as usize,
                    0,
                ),
            );
        }
    }
}

/// The step of a [`Confinement`] past the gate: the Landlock ruleset, which
/// runws has finished filling once it opened the gate, enforced.
///
/// # Safety
/// Only in the child, from [`super::launch`]'s preparation, after [`confine`].
pub(super) unsafe fn enforce_landlock(errors: RawFd, c: &RawConfinement) {
    if c.landlock >= 0 {
        // SAFETY: landlock_restrict_self reads only its two integer arguments; fail_at as above.
        unsafe {
            let r = sys(libc::SYS_landlock_restrict_self, c.landlock as usize, 0, 0, 0);
            if r < 0 {
                fail_at(errors, STEP_LANDLOCK, -r);
            }
        }
    }
}
