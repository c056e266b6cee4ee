//! What the child needs when it runs code of runws's instead of executing a
//! program (`Spec::in_process`): whether that is safe, a PID namespace of
//! its own, and what an exec would have done for it: close the close-on-exec
//! descriptors and drop runws's command line and environment.

use std::os::fd::{OwnedFd, RawFd};

use nix::libc;

/// runws's own PID namespace, left for one fork by [`PidNamespaceForChildren::enter`]
/// and entered again when dropped, so that runws's later threads and
/// children are its own again.
pub(super) struct PidNamespaceForChildren {
    own: OwnedFd,
}

impl PidNamespaceForChildren {
    /// Makes the next child PID 1 of a new PID namespace; `None` when the
    /// kernel refuses (the next child is then forked as usual).
    pub(super) fn enter() -> Option<PidNamespaceForChildren> {
        let own = std::fs::File::open("/proc/self/ns/pid").ok()?;
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWPID).ok()?;
        Some(PidNamespaceForChildren { own: own.into() })
    }
}

impl Drop for PidNamespaceForChildren {
    fn drop(&mut self) {
        // Our own namespace: root may always enter it again. If it could
        // not, every later fork and thread would fail, loudly.
        let _ = nix::sched::setns(&self.own, nix::sched::CloneFlags::CLONE_NEWPID);
    }
}

/// True when this process has one thread (procfs counts each thread as a
/// link of /proc/self/task, plus two).
pub(super) fn single_threaded() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/task").is_ok_and(|m| m.nlink() == 3)
}

/// Closes every descriptor marked close-on-exec, as an exec would.
///
/// # Safety
/// Descriptors owned elsewhere in this process become invalid: call it only
/// in a forked child that will not use them.
pub(super) unsafe fn close_on_exec_now() {
    // The open descriptors, listed (collected first: the listing's own
    // descriptor closes with it); else every number below the limit.
    let fds: Vec<RawFd> = match std::fs::read_dir("/proc/self/fd") {
        Ok(entries) => entries.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok()).collect(),
        Err(_) => {
            let mut limit = libc::rlimit { rlim_cur: 1 << 20, rlim_max: 1 << 20 };
            // SAFETY: getrlimit fills the struct it is given.
            unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
            (0..limit.rlim_cur.min(1 << 20) as RawFd).collect()
        }
    };
    for fd in fds {
        // SAFETY: see the function's contract; F_GETFD on a closed descriptor just fails.
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
pub(super) fn hide_command_line_and_environment() {
    let Some((args, env)) = crate::procinfo::own_arg_and_env_ranges() else { return };
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
