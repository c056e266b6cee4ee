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
//! process, and architectures without the direct system calls), where they
//! are merely careful: runws may have other threads, so until `execve` the
//! child makes only async-signal-safe calls.

use std::ffi::{CString, c_void};
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};

use nix::libc;
use nix::unistd::Pid;

pub use super::confine::Confinement;
use super::confine::{RawConfinement, STEP_JOIN, confine, enforce_landlock, fail_at};
use super::proc::SingleThreaded;
use super::{raw as sys, unreachable_end};

/// What the child executes: the program, its arguments and environment,
/// and where it starts.
pub struct Image {
    pub program: CString,
    pub argv: Vec<CString>,
    pub env: Vec<CString>,
    pub cwd: CString,
    /// Adds `LISTEN_PID=` with the child's own pid to the environment.
    pub listen_pid: bool,
}

/// The descriptors the child places or keeps. runws's copies may be closed
/// once [`start`] has returned: the child has its own.
pub struct Descriptors<'a> {
    /// The gate's read end: the child waits for a byte on it.
    pub gate: BorrowedFd<'a>,
    /// runws's end of the gate: the child closes its own copy of it, so
    /// that the gate reads end-of-file once runws has closed it or died.
    pub gate_writer: BorrowedFd<'a>,
    /// Close-on-exec; the child writes an `execve` errno on it.
    pub errors: BorrowedFd<'a>,
    pub stdin: Option<BorrowedFd<'a>>,
    pub stdout: Option<BorrowedFd<'a>>,
    pub stderr: Option<BorrowedFd<'a>>,
    /// Placed at 3, 4, ... Each must be above the last of these numbers
    /// (runws keeps its own at 64 and up).
    pub listen: Vec<BorrowedFd<'a>>,
    /// Inherited at their own numbers (close-on-exec cleared in the child).
    pub keep: Vec<BorrowedFd<'a>>,
}

/// runws code the forked child runs instead of executing the program; its
/// result is the child's exit code.
pub struct InProcess<'a> {
    /// Handed the gate, which it passes before anything of the run's own
    /// runs: what comes before (the sandbox's confinement of itself) runs
    /// while runws records the run.
    pub run: Box<dyn FnOnce(Gate) -> u8>,
    /// Descriptors only `run` uses: close-on-exec cleared for it.
    pub keep: Vec<RawFd>,
    /// The child may run any code only when runws has a single thread.
    pub single: &'a SingleThreaded,
    /// Where runws's argument and environment strings lie in its memory
    /// (`((arg_start, arg_end), (env_start, env_end))`, as /proc/self/stat
    /// gives them): the child, a copy of that memory, blanks them.
    pub strings: Option<((usize, usize), (usize, usize))>,
}

/// Everything the child reads, as raw pointers into buffers that outlive it.
struct Launch {
    program: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    cwd: *const libc::c_char,
    gate: RawFd,
    gate_writer: RawFd,
    errors: RawFd,
    stdin: Option<RawFd>,
    stdout: Option<RawFd>,
    stderr: Option<RawFd>,
    listen: *const RawFd,
    listen_len: usize,
    keep: *const RawFd,
    keep_len: usize,
    /// Where the child writes its pid, NUL-terminated (LISTEN_PID's value).
    listen_pid: Option<*mut u8>,
    foreground: bool,
    /// Die with runws. Set before the gate, so that a runws gone before
    /// that shows as the gate's end of file instead (the child holds no
    /// copy of the gate's write end).
    die_with_parent: bool,
    /// The gate is passed later, by the code run in process ([`Gate`]).
    defer_gate: bool,
    /// Files to write `0` to first: control groups the child joins itself
    /// (see `child::Spec::join_groups`).
    join: *const *const libc::c_char,
    join_len: usize,
    confine: Option<RawConfinement>,
}

/// The gate of a child that runs runws's code in process: passed by that
/// code once it has done what may come before the run is recorded.
pub struct Gate {
    fd: RawFd,
}

impl Gate {
    /// Waits for runws's word; ends the child with 125, as the gate of
    /// [`prepare`] does, when runws closed the gate or died instead. The
    /// signals runws blocks stay blocked until the caller unblocks them.
    pub fn pass(self) {
        let mut byte = [0u8; 1];
        // SAFETY: the gate's read end, which this child keeps open (close-on-exec) until it executes.
        let fd = unsafe { BorrowedFd::borrow_raw(self.fd) };
        loop {
            match nix::unistd::read(fd, &mut byte) {
                Ok(1) => return,
                Err(nix::errno::Errno::EINTR) => continue,
                // runws gave up on this run before it started.
                _ => super::proc::exit_now(125),
            }
        }
    }
}

/// The buffers a [`Launch`] points into. Moving a `Vec` or `CString` does
/// not move its heap bytes, which the pointers name.
struct Buffers {
    _image: Image,
    _argv: Vec<*const libc::c_char>,
    _envp: Vec<*const libc::c_char>,
    _listen_pid: Vec<u8>,
    _listen: Vec<RawFd>,
    _keep: Vec<RawFd>,
    _filter: Vec<super::ns::Insn>,
    _join: Vec<CString>,
    _join_ptrs: Vec<*const libc::c_char>,
}

/// Whether this architecture starts children with `clone(CLONE_VM)`; the
/// others fork.
const SHARED_MEMORY_START: bool = cfg!(any(target_arch = "x86_64", target_arch = "aarch64"));

/// Creates the child, which stops at the gate: it makes its group (or
/// session), places its descriptors, enters its directory, and waits for a
/// byte on `fds.gate`; then it executes `image` or, forked, runs
/// `in_process`. Returns its pid and, when it shares runws's memory, what
/// must outlive it.
pub fn start(
    image: Image,
    fds: &Descriptors<'_>,
    foreground: bool,
    in_process: Option<InProcess<'_>>,
    confine: Option<&Confinement>,
    join: &[std::path::PathBuf],
    share_memory: bool,
) -> std::io::Result<(Pid, Option<Shared>)> {
    use std::os::unix::ffi::OsStrExt;
    let join: Vec<CString> = join
        .iter()
        .map(|p| CString::new(p.as_os_str().as_bytes()))
        .collect::<Result<_, _>>()
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    let join_ptrs: Vec<*const libc::c_char> = join.iter().map(|c| c.as_ptr()).collect();
    let filter: Vec<super::ns::Insn> = confine.map(|c| c.filter.clone()).unwrap_or_default();
    let filter_len =
        u16::try_from(filter.len()).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    let mut argv: Vec<*const libc::c_char> = image.argv.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    // LISTEN_PID must name the child, known only once it exists: the child
    // writes its pid into this preallocated buffer.
    let mut listen_pid: Vec<u8> = b"LISTEN_PID=".to_vec();
    let pid_offset = listen_pid.len();
    listen_pid.resize(pid_offset + 24, 0);
    let mut envp: Vec<*const libc::c_char> = image.env.iter().map(|e| e.as_ptr()).collect();
    if image.listen_pid {
        envp.push(listen_pid.as_ptr() as *const libc::c_char);
    }
    envp.push(std::ptr::null());
    let listen: Vec<RawFd> = fds.listen.iter().map(|f| f.as_raw_fd()).collect();
    let keep: Vec<RawFd> = fds.keep.iter().map(|f| f.as_raw_fd()).collect();
    let launch = Box::new(Launch {
        program: image.program.as_ptr(),
        argv: argv.as_ptr(),
        envp: envp.as_ptr(),
        cwd: image.cwd.as_ptr(),
        gate: fds.gate.as_raw_fd(),
        gate_writer: fds.gate_writer.as_raw_fd(),
        errors: fds.errors.as_raw_fd(),
        stdin: fds.stdin.map(|f| f.as_raw_fd()),
        stdout: fds.stdout.map(|f| f.as_raw_fd()),
        stderr: fds.stderr.map(|f| f.as_raw_fd()),
        listen: listen.as_ptr(),
        listen_len: listen.len(),
        keep: keep.as_ptr(),
        keep_len: keep.len(),
        // Within the buffer, which has 24 bytes after the offset.
        listen_pid: image.listen_pid.then(|| listen_pid[pid_offset..].as_mut_ptr()),
        foreground,
        // A sandbox's command dies with runws, as its PID 1 does under
        // namespaces.
        die_with_parent: in_process.is_some() || confine.is_some(),
        defer_gate: in_process.is_some(),
        join: join_ptrs.as_ptr(),
        join_len: join_ptrs.len(),
        confine: confine.map(|c| RawConfinement {
            cloexec_from: c.cloexec_from,
            bounding_required: c.bounding_required,
            landlock: c.landlock.as_ref().map_or(-1, |f| f.as_raw_fd()),
            filter: filter.as_ptr(),
            filter_len,
        }),
    });
    let held = Buffers {
        _image: image,
        _argv: argv,
        _envp: envp,
        _listen_pid: listen_pid,
        _listen: listen,
        _keep: keep,
        _filter: filter,
        _join: join,
        _join_ptrs: join_ptrs,
    };
    match in_process {
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        None if SHARED_MEMORY_START && share_memory => {
            let (pid, shared) = clone_vm(launch, held)?;
            Ok((pid, Some(shared)))
        }
        in_process => {
            // SAFETY: the child makes only direct system calls on the Launch (prepare, exec), its own copy of runws's memory, until it executes; or, with `in_process`, runs any code, which `single` allows: runws has one thread, so no lock can be held by a thread the child lacks.
            match unsafe { nix::unistd::fork() }? {
                nix::unistd::ForkResult::Child => child_after_fork(&launch, in_process),
                nix::unistd::ForkResult::Parent { child } => {
                    drop(held);
                    Ok((child, None))
                }
            }
        }
    }
}

/// Runs in the forked child. Never returns.
fn child_after_fork(l: &Launch, in_process: Option<InProcess<'_>>) -> ! {
    // SAFETY: a forked child with `l` built by `start` in the memory it copied.
    unsafe { prepare(l) };
    let Some(InProcess { run, keep, single, strings }) = in_process else {
        // SAFETY: as above, after `prepare`.
        unsafe { exec(l) }
    };
    // What lets `run` do anything here: runws had one thread at the fork.
    let _: &SingleThreaded = single;
    // No exec closes runws's close-on-exec descriptors: close them here, so
    // the child holds exactly what an exec would have kept (and what the
    // init alone needs).
    for fd in keep {
        // SAFETY: F_SETFD with 0 only clears a flag; on a closed number it fails with EBADF.
        unsafe { libc::fcntl(fd, libc::F_SETFD, 0) };
    }
    close_on_exec_now(l.gate);
    hide_command_line_and_environment(strings);
    let gate = Gate { fd: l.gate };
    // A panic must end this child here: unwinding would run runws's own
    // destructors (its lease, its files) in a copy of runws.
    let code = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || run(gate)))
        .unwrap_or(crate::exit::FAILURE);
    super::proc::exit_now(i32::from(code))
}

/// Closes every descriptor marked close-on-exec but the gate's, as an exec
/// would. Only in a child forked for `InProcess`, which uses none of
/// runws's descriptors beyond those it keeps (and the gate, passed later).
fn close_on_exec_now(gate: RawFd) {
    // The open descriptors, listed (collected first: the listing's own
    // descriptor closes with it); else every number below the limit.
    let fds: Vec<RawFd> = match std::fs::read_dir("/proc/self/fd") {
        Ok(entries) => entries.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect(),
        Err(_) => {
            let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile);
            (0..limit.current.unwrap_or(1 << 20).min(1 << 20) as RawFd).collect()
        }
    };
    for fd in fds.into_iter().filter(|&fd| fd != gate) {
        // SAFETY: F_GETFD on a closed number just fails; a descriptor closed here is owned by runws's memory, which this child abandons (it never returns to it).
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags >= 0 && flags & libc::FD_CLOEXEC != 0 {
                libc::close(fd);
            }
        }
    }
}

/// Blanks the command line and environment strings this child inherited
/// from runws (what /proc/PID/cmdline and /proc/PID/environ show of it), so
/// the init shows neither runws's arguments (a store URL with a password)
/// nor its environment to the sandbox. Nothing in the child reads them: the
/// init is handed what it needs.
fn hide_command_line_and_environment(strings: Option<((usize, usize), (usize, usize))>) {
    let Some((args, env)) = strings else { return };
    for (range, name) in [(args, &b"runws-sandbox-init"[..]), (env, &b""[..])] {
        let (start, end) = range;
        if start != 0 && end > start && end - start < (1 << 24) {
            // SAFETY: the kernel's own record of this process's argument and environment strings, in its stack, writable, and read by nothing in this child.
            unsafe { std::ptr::write_bytes(start as *mut u8, 0, end - start) };
            let n = name.len().min(end - start - 1);
            // SAFETY: within the range just cleared.
            unsafe { std::ptr::copy_nonoverlapping(name.as_ptr(), start as *mut u8, n) };
        }
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

/// The child's steps up to the gate: its own process group and the
/// terminal's foreground when runws had it, else a session of its own;
/// SIGPIPE back to default, the descriptors in place, LISTEN_PID, the
/// working directory; then it waits until runws has recorded it (but for
/// a child that runs runws's code, which passes its [`Gate`] itself). Returns
/// once the gate opened; ends the child with 125 when runws closed the gate
/// or died instead, or reports an errno.
///
/// # Safety
/// Only in a child created by [`clone_vm`] or `fork`, with `l`'s pointers
/// valid in it.
unsafe fn prepare(l: &Launch) {
    // SAFETY: the whole body makes direct system calls on descriptors and buffers prepared before the child was created, which the contract keeps valid; it writes only its own stack and the LISTEN_PID buffer.
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
        // In the run's control groups before anything else: all it does and
        // starts is counted and limited.
        for i in 0..l.join_len {
            let fd = sys(
                libc::SYS_openat,
                libc::AT_FDCWD as usize,
                *l.join.add(i) as usize,
                (libc::O_WRONLY | libc::O_CLOEXEC) as usize,
                0,
            );
            if fd < 0 {
                fail_at(l.errors, STEP_JOIN, -fd);
            }
            let zero = b'0';
            let n = sys(libc::SYS_write, fd as usize, &zero as *const u8 as usize, 1, 0);
            sys(libc::SYS_close, fd as usize, 0, 0, 0);
            if n < 0 {
                fail_at(l.errors, STEP_JOIN, -n);
            }
        }
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
        if let Some(fd) = l.stdin {
            place(fd, 0);
        }
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
        if let Some(c) = l.confine {
            confine(l.errors, &c);
        }
        let mut byte = 0u8;
        if !l.defer_gate {
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
            if let Some(c) = l.confine {
                enforce_landlock(l.errors, &c);
            }
        }
        // The signals runws reads from its signalfd are blocked here too;
        // a child that passes its gate later keeps them blocked until then
        // (a ^C before would end it at its gate, not the command).
        if !l.defer_gate {
            unblock_signals();
        }
    }
}

/// Executes the program; reports why it could not.
///
/// # Safety
/// As for [`prepare`], after it.
unsafe fn exec(l: &Launch) -> ! {
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
pub struct Shared {
    pid: Pid,
    stack: *mut c_void,
    stack_len: usize,
    /// From `Box::into_raw`: the child reads through it, so no `Box` (which
    /// would claim it alone) exists until the child has ended.
    launch: *mut Launch,
    held: Option<Buffers>,
}

impl Drop for Shared {
    fn drop(&mut self) {
        use rustix::process::{WaitId, WaitIdOptions};
        let flags = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
        let ended = match rustix::process::Pid::from_raw(self.pid.as_raw()) {
            Some(pid) => match rustix::process::waitid(WaitId::Pid(pid), flags) {
                Ok(status) => status.is_some(),
                Err(rustix::io::Errno::CHILD) => true, // reaped already
                Err(_) => false,
            },
            None => false,
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
/// `launch`, whose pointers point into `held` (kept until the child ended).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn clone_vm(launch: Box<Launch>, held: Buffers) -> std::io::Result<(Pid, Shared)> {
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
