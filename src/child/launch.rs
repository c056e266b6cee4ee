//! The child's side of a start, from its first instruction to `execve`, and
//! the cheap way to create it.
//!
//! runws creates the child with `clone(CLONE_VM)`: the child runs on a stack
//! of its own but in runws's memory, so nothing is copied (a `fork` copies
//! runws's page tables and then pays a page fault for every page either
//! side writes). Sharing memory makes the child's rules strict: it reads
//! only the [`Launch`] built before the clone, writes only its own stack and
//! the LISTEN_PID buffer, and makes system calls directly, never through
//! libc, since even `errno` would be runws's. runws keeps everything the
//! child reads alive until the child has ended ([`Shared`]).
//!
//! The same steps serve a forked child (the sandbox init that runs in
//! process), where they are merely careful.

use std::ffi::c_void;
use std::os::fd::RawFd;

use nix::libc;
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::Pid;

/// Everything the child reads, as raw pointers into buffers that outlive it.
pub(super) struct Launch {
    pub program: *const libc::c_char,
    pub argv: *const *const libc::c_char,
    pub envp: *const *const libc::c_char,
    pub cwd: *const libc::c_char,
    pub gate: RawFd,
    /// runws's end of the gate: the child closes its own copy of it, so
    /// that the gate reads end-of-file once runws has closed it or died.
    pub gate_writer: RawFd,
    pub errors: RawFd,
    pub stdout: Option<RawFd>,
    pub stderr: Option<RawFd>,
    /// Placed at 3, 4, ...
    pub listen: *const RawFd,
    pub listen_len: usize,
    /// Inherited at their own numbers.
    pub keep: *const RawFd,
    pub keep_len: usize,
    /// Where the child writes its pid, NUL-terminated (LISTEN_PID's value).
    pub listen_pid: Option<*mut u8>,
    pub foreground: bool,
    /// Die with runws. Set before the gate, so that a runws gone before
    /// that shows as the gate's end of file instead (the child holds no
    /// copy of the gate's write end).
    pub die_with_parent: bool,
}

/// A system call with up to four arguments; a negative result is `-errno`.
///
/// # Safety
/// As for the call made: the arguments must be what the kernel expects.
#[cfg(target_arch = "x86_64")]
pub(crate) unsafe fn sys(n: libc::c_long, a: usize, b: usize, c: usize, d: usize) -> isize {
    let ret: isize;
    // SAFETY: the caller's contract; `syscall` clobbers rcx and r11 only.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") n as isize => ret,
            in("rdi") a, in("rsi") b, in("rdx") c, in("r10") d,
            lateout("rcx") _, lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// A system call with up to four arguments; a negative result is `-errno`.
///
/// # Safety
/// As for the call made: the arguments must be what the kernel expects.
#[cfg(target_arch = "aarch64")]
pub(crate) unsafe fn sys(n: libc::c_long, a: usize, b: usize, c: usize, d: usize) -> isize {
    let ret: isize;
    // SAFETY: the caller's contract; `svc 0` returns in x0 and clobbers nothing else.
    unsafe {
        std::arch::asm!(
            "svc 0",
            in("x8") n,
            inlateout("x0") a as isize => ret,
            in("x1") b, in("x2") c, in("x3") d,
            options(nostack),
        );
    }
    ret
}

/// A system call through libc, on architectures without the direct form
/// above; they start children with `fork` only, where errno is the child's.
///
/// # Safety
/// As for the call made.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub(crate) unsafe fn sys(n: libc::c_long, a: usize, b: usize, c: usize, d: usize) -> isize {
    // SAFETY: the caller's contract.
    unsafe {
        let r = libc::syscall(n, a, b, c, d);
        if r < 0 { -(*libc::__errno_location() as isize) } else { r as isize }
    }
}

/// SIGPIPE back to its default: runws ignores it, and an ignored
/// disposition survives exec.
///
/// # Safety
/// Only in the child.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
unsafe fn default_sigpipe() -> isize {
    // The kernel's sigaction with every field zero is SIG_DFL, no flags, an
    // empty mask (32 bytes with the restorer on both architectures).
    let default = [0usize; 4];
    // SAFETY: rt_sigaction reads the 32 bytes above; 8 is these kernels' sigset size.
    unsafe { sys(libc::SYS_rt_sigaction, libc::SIGPIPE as usize, default.as_ptr() as usize, 0, 8) }
}

/// Unblocks every signal (runws blocks those it reads from its signalfd).
///
/// # Safety
/// Only in the child.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
unsafe fn unblock_signals() {
    let empty = 0u64;
    // SAFETY: reads the 8-byte set above.
    unsafe { sys(libc::SYS_rt_sigprocmask, libc::SIG_SETMASK as usize, &empty as *const u64 as usize, 0, 8) };
}

/// SIGPIPE back to its default, through libc where the kernel's structures
/// differ by architecture (these only fork, so the child may use libc).
///
/// # Safety
/// Only in a forked child.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
unsafe fn default_sigpipe() -> isize {
    // SAFETY: signal(2) is async-signal-safe.
    if unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) } == libc::SIG_ERR {
        -(libc::EINVAL as isize)
    } else {
        0
    }
}

/// Unblocks every signal, through libc.
///
/// # Safety
/// Only in a forked child.
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
unsafe fn unblock_signals() {
    // SAFETY: sigemptyset and sigprocmask on a local set; both async-signal-safe.
    unsafe {
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
    }
}

/// Whether this architecture starts children with `clone(CLONE_VM)`; the
/// others fork.
pub(super) const SHARED_MEMORY_START: bool = cfg!(any(target_arch = "x86_64", target_arch = "aarch64"));

/// Reports `errno` on the error pipe and ends the child.
///
/// # Safety
/// Only in the child.
unsafe fn fail(errors: RawFd, errno: isize) -> ! {
    let bytes = (errno as i32).to_ne_bytes();
    // exit_group ends only this child: it shares no thread group with runws.
    // SAFETY: write of a 4-byte buffer on our stack, then exit_group.
    unsafe {
        sys(libc::SYS_write, errors as usize, bytes.as_ptr() as usize, 4, 0);
        sys(libc::SYS_exit_group, 127, 0, 0, 0);
    }
    unreachable_end()
}

fn unreachable_end() -> ! {
    // exit_group does not return; spin rather than reach code that could
    // unwind or allocate in runws's memory.
    #[allow(clippy::empty_loop)]
    loop {}
}

/// The child's steps up to the gate: its own process group and the
/// terminal's foreground when runws had it, else a session of its own;
/// SIGPIPE back to default, the descriptors in place, LISTEN_PID, the
/// working directory; then it waits until runws has recorded it. Returns
/// once the gate opened; ends the child with 125 when runws closed the gate
/// or died instead, or reports an errno.
///
/// # Safety
/// Only in a child created by [`clone_vm`] or `fork`, with `l`'s pointers
/// valid.
pub(super) unsafe fn prepare(l: &Launch) {
    // Direct system calls on descriptors and buffers prepared before the
    // child was created.
    // SAFETY (whole function): see the contract.
    unsafe {
        let check = |r: isize| {
            if r < 0 {
                fail(l.errors, -r);
            }
        };
        // Only runws's copy of the gate's other end may keep it open: with
        // this one closed (first, before descriptors are placed over low
        // numbers), the gate reads end-of-file once runws closes it or dies.
        sys(libc::SYS_close, l.gate_writer as usize, 0, 0, 0);
        if l.foreground {
            // Stays in the terminal's session, for job control.
            sys(libc::SYS_setpgid, 0, 0, 0, 0);
        } else {
            // A session of its own: no process outside the run can join
            // its process group (setpgid works only within one session).
            sys(libc::SYS_setsid, 0, 0, 0, 0);
        }
        if l.foreground {
            let pid = sys(libc::SYS_getpid, 0, 0, 0, 0) as libc::pid_t;
            sys(libc::SYS_ioctl, 0, libc::TIOCSPGRP as usize, &pid as *const libc::pid_t as usize, 0);
        }
        check(default_sigpipe());
        let place = |from: RawFd, to: RawFd| {
            if from == to {
                check(sys(libc::SYS_fcntl, from as usize, libc::F_SETFD as usize, 0, 0));
            } else {
                check(sys(libc::SYS_dup3, from as usize, to as usize, 0, 0));
            }
        };
        if let Some(fd) = l.stdout {
            place(fd, 1);
        }
        if let Some(fd) = l.stderr {
            place(fd, 2);
        }
        for i in 0..l.listen_len {
            place(*l.listen.add(i), 3_i32.wrapping_add(i as i32));
        }
        for i in 0..l.keep_len {
            check(sys(libc::SYS_fcntl, *l.keep.add(i) as usize, libc::F_SETFD as usize, 0, 0));
        }
        if let Some(buf) = l.listen_pid {
            let mut pid = sys(libc::SYS_getpid, 0, 0, 0, 0) as u32;
            let mut digits = [0u8; 12];
            let mut n = 0usize;
            loop {
                *digits.as_mut_ptr().add(n) = b'0' + (pid % 10) as u8;
                n += 1;
                pid /= 10;
                if pid == 0 {
                    break;
                }
            }
            for i in 0..n {
                *buf.add(i) = *digits.as_ptr().add(n - 1 - i);
            }
            *buf.add(n) = 0;
        }
        check(sys(libc::SYS_chdir, l.cwd as usize, 0, 0, 0));
        if l.die_with_parent {
            sys(libc::SYS_prctl, libc::PR_SET_PDEATHSIG as usize, libc::SIGKILL as usize, 0, 0);
        }
        let mut byte = 0u8;
        loop {
            let n = sys(libc::SYS_read, l.gate as usize, &mut byte as *mut u8 as usize, 1, 0);
            if n == 1 {
                break;
            }
            if n == -(libc::EINTR as isize) {
                continue;
            }
            // runws gave up on this run before it started.
            sys(libc::SYS_exit_group, 125, 0, 0, 0);
            unreachable_end();
        }
        // The signals runws reads from its signalfd are blocked here too.
        unblock_signals();
    }
}

/// Executes the program; reports why it could not.
///
/// # Safety
/// As for [`prepare`], after it.
pub(super) unsafe fn exec(l: &Launch) -> ! {
    // SAFETY: see the contract; execve reads the NUL-terminated arrays built before the child was created.
    unsafe {
        let r = sys(libc::SYS_execve, l.program as usize, l.argv as usize, l.envp as usize, 0);
        fail(l.errors, -r)
    }
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
extern "C" fn child_main(arg: *mut c_void) -> libc::c_int {
    // SAFETY: `arg` is the Launch that clone_vm's caller keeps alive until this child has ended.
    unsafe {
        let l = &*(arg as *const Launch);
        prepare(l);
        exec(l)
    }
}

/// What a child created by [`clone_vm`] may still be reading: its stack, its
/// [`Launch`] and the buffers behind it. Freed once the child has ended;
/// left to the end of runws when dropped while it may still run.
pub(super) struct Shared {
    pid: Pid,
    stack: *mut c_void,
    stack_len: usize,
    /// From `Box::into_raw`: the child reads through it, so no `Box` (which
    /// would claim it alone) exists until the child has ended.
    launch: *mut Launch,
    held: Option<Box<dyn std::any::Any>>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
        let ended = match waitid(Id::Pid(self.pid), flags) {
            Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) => true,
            Err(nix::errno::Errno::ECHILD) => true, // reaped already
            _ => false,
        };
        if ended {
            // SAFETY: the mapping and the Launch made by clone_vm, used by no one now that the child ended.
            unsafe {
                libc::munmap(self.stack, self.stack_len);
                drop(Box::from_raw(self.launch));
            }
        } else if let Some(held) = self.held.take() {
            std::mem::forget(held);
        }
    }
}

const STACK_LEN: usize = 256 * 1024;
const GUARD_LEN: usize = 4096;

/// Creates the child in runws's memory; it runs [`prepare`] and [`exec`] on
/// `launch`. `held` owns every buffer `launch` points into.
///
/// # Safety
/// `launch`'s pointers must point into `held` (or into memory that lives as
/// long as runws), and nothing may change those buffers afterwards.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub(super) unsafe fn clone_vm(
    launch: Box<Launch>,
    held: Box<dyn std::any::Any>,
) -> std::io::Result<(Pid, Shared)> {
    // Its lowest page stays inaccessible as a guard, so an overflow faults
    // instead of writing into runws's memory.
    // SAFETY: a fresh private mapping.
    let stack = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            STACK_LEN,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if stack == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: within the mapping just made.
    let usable = unsafe { (stack as *mut u8).add(GUARD_LEN) };
    // SAFETY: as above.
    if unsafe {
        libc::mprotect(usable as *mut c_void, STACK_LEN - GUARD_LEN, libc::PROT_READ | libc::PROT_WRITE)
    } != 0
    {
        let e = std::io::Error::last_os_error();
        // SAFETY: our own mapping, unused.
        unsafe { libc::munmap(stack, STACK_LEN) };
        return Err(e);
    }
    let launch = Box::into_raw(launch);
    // SAFETY: the top of the mapping, 16-byte aligned (mappings are page aligned).
    let top = unsafe { (stack as *mut u8).add(STACK_LEN) } as *mut c_void;
    // SAFETY: child_main follows the rules above on `launch`, which lives in `Shared` until the child ended. No CLONE_FILES or CLONE_FS: the child's descriptors and directory are its own.
    let pid = unsafe { libc::clone(child_main, top, libc::CLONE_VM | libc::SIGCHLD, launch as *mut c_void) };
    if pid < 0 {
        let e = std::io::Error::last_os_error();
        // SAFETY: no child uses the mapping or the Launch.
        unsafe {
            libc::munmap(stack, STACK_LEN);
            drop(Box::from_raw(launch));
        }
        return Err(e);
    }
    let pid = Pid::from_raw(pid);
    Ok((pid, Shared { pid, stack, stack_len: STACK_LEN, launch, held: Some(held) }))
}
