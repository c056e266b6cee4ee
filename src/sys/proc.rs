//! Process-wide state: signal dispositions, `fork`, clocks, and how a wait
//! status becomes runws's exit code.

use std::marker::PhantomData;
use std::time::Duration;

use nix::libc;
use nix::sys::signal::{SigHandler, Signal};
use nix::unistd::{ForkResult, Pid};

use crate::exit;

/// Sets `sig`'s disposition back to its default (SIG_DFL).
pub fn default_disposition(sig: Signal) {
    // SAFETY: SIG_DFL installs no handler, so no code runs in signal context.
    let _ = unsafe { nix::sys::signal::signal(sig, SigHandler::SigDfl) };
}

/// Raises signal `sig` (any number, real-time ones included) with its
/// default disposition and unblocked: a signal whose default is to end the
/// process ends it here; one whose default is to be ignored returns.
pub fn raise_with_default(sig: i32) {
    // SAFETY: SIG_DFL installs no handler; sigemptyset, sigaddset and sigprocmask work on a set on this stack; raise takes an integer. An invalid number makes each call fail harmlessly.
    unsafe {
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(sig);
    }
}

/// Ends this process at once with `code` (`_exit`): no destructors, no
/// flush of stdio buffers, no atexit handlers, which in a forked child
/// belong to the parent.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit takes an integer and does not return.
    unsafe { libc::_exit(code) }
}

/// Proof that this process had one thread when it was made, which is what
/// [`fork`] needs for its child to run any code (no lock can be held by a
/// thread the child lacks). Neither `Send` nor `Sync`: it stays with the
/// thread that checked. Whoever holds it must not start a thread.
pub struct SingleThreaded(PhantomData<*const ()>);

impl SingleThreaded {
    /// `Some` when this process has one thread (procfs counts each thread as
    /// a link of /proc/self/task, plus two).
    pub fn now() -> Option<SingleThreaded> {
        use std::os::unix::fs::MetadataExt;
        let one = std::fs::metadata("/proc/self/task").is_ok_and(|m| m.nlink() == 3);
        one.then_some(SingleThreaded(PhantomData))
    }

    /// The same proof, in a child forked with it: a child has one thread.
    fn in_child(&self) -> SingleThreaded {
        SingleThreaded(PhantomData)
    }
}

/// `fork` of a single-threaded process: the child may allocate, lock and
/// run any code, as the parent's only thread could. The child gets its own
/// proof of being single-threaded.
pub fn fork(one: &SingleThreaded) -> nix::Result<Forked> {
    // SAFETY: `one` shows this process has a single thread, so the child lacks no thread that could hold a lock or be mid-update of shared state.
    match unsafe { nix::unistd::fork() }? {
        ForkResult::Child => Ok(Forked::Child(one.in_child())),
        ForkResult::Parent { child } => Ok(Forked::Parent(child)),
    }
}

/// Which side of a [`fork`] this is.
pub enum Forked {
    Child(SingleThreaded),
    Parent(Pid),
}

/// The boot-time clock (the one the kernel stamps a process's start with).
pub fn boot_clock() -> Option<Duration> {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes only the timespec it is given, which lives on this stack.
    if unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut t) } != 0 {
        return None;
    }
    Some(Duration::new(u64::try_from(t.tv_sec).ok()?, u32::try_from(t.tv_nsec).ok()?))
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`, which glibc reads from
/// the auxiliary vector it already holds: no system call).
pub fn clock_ticks_per_second() -> Option<u64> {
    // SAFETY: sysconf takes an integer and reads only libc's own state.
    u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).ok()
}

/// Waits for child `pid` (any child with `None`) to end: its pid and raw
/// wait status; without `block`, `Ok(None)` while none has ended. Unlike
/// nix's `waitpid`, which fails (after reaping the child) on a signal its
/// `Signal` does not name, any status is returned, real-time signals
/// included. EINTR is retried.
pub fn wait_raw(pid: Option<i32>, block: bool) -> std::io::Result<Option<(i32, i32)>> {
    use rustix::process::WaitOptions;
    let pid = match pid {
        Some(p) => Some(
            rustix::process::Pid::from_raw(p)
                .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ECHILD))?,
        ),
        None => None,
    };
    let options = if block { WaitOptions::empty() } else { WaitOptions::NOHANG };
    loop {
        // rustix's `waitpid(None, ..)` is waitpid(0, ..), this process
        // group's children only; `wait` is waitpid(-1, ..), any child.
        let waited = match pid {
            Some(_) => rustix::process::waitpid(pid, options),
            None => rustix::process::wait(options),
        };
        match waited {
            Ok(got) => return Ok(got.map(|(p, st)| (p.as_raw_nonzero().get(), st.as_raw()))),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// A raw wait status (as `waitpid` gives it, and as a sandbox's PID 1
/// reports it): how the process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Termination {
    Exited(i32),
    Signaled(i32),
}

impl Termination {
    /// From a raw status of a process that has ended (a stopped or
    /// continued status, which waits without `WUNTRACED` never give, reads
    /// as its exit byte).
    pub fn from_raw(raw: i32) -> Termination {
        if libc::WIFSIGNALED(raw) {
            Termination::Signaled(libc::WTERMSIG(raw))
        } else {
            Termination::Exited(libc::WEXITSTATUS(raw))
        }
    }

    /// The status a shell shows for it: the exit code itself, 128+N for
    /// signal N.
    pub fn exit_code(self) -> u8 {
        match self {
            Termination::Exited(code) => code.clamp(0, 255) as u8,
            Termination::Signaled(sig) => exit::from_signal(sig),
        }
    }
}

/// Why an `execve` failed, as runws's exit code: 127 when the program does
/// not exist, 126 for anything else (as `env` and shells answer).
pub fn exec_errno_exit_code(errno: i32) -> u8 {
    if errno == libc::ENOENT { exit::NOT_FOUND } else { exit::CANNOT_EXECUTE }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_statuses_become_shell_exit_codes() {
        assert_eq!(Termination::from_raw(0).exit_code(), 0);
        assert_eq!(Termination::from_raw(3 << 8).exit_code(), 3);
        assert_eq!(Termination::from_raw(255 << 8).exit_code(), 255);
        assert_eq!(Termination::from_raw(libc::SIGKILL), Termination::Signaled(9));
        assert_eq!(Termination::from_raw(libc::SIGKILL).exit_code(), 137);
        // A core dump does not change the signal.
        assert_eq!(Termination::from_raw(libc::SIGSEGV | 0x80).exit_code(), 139);
    }

    #[test]
    // `wait_raw` reaps the child, which clippy cannot see.
    #[allow(clippy::zombie_processes)]
    fn a_real_time_signal_is_a_status_like_any_other() {
        let child = std::process::Command::new("sh").args(["-c", "kill -40 $$"]).spawn().unwrap();
        let pid = child.id() as i32;
        let (got, raw) = wait_raw(Some(pid), true).unwrap().unwrap();
        assert_eq!(got, pid);
        assert_eq!(Termination::from_raw(raw), Termination::Signaled(40));
        assert_eq!(Termination::from_raw(raw).exit_code(), 168);
    }

    #[test]
    fn exec_errnos_become_126_or_127() {
        assert_eq!(exec_errno_exit_code(libc::ENOENT), 127);
        assert_eq!(exec_errno_exit_code(libc::EACCES), 126);
        assert_eq!(exec_errno_exit_code(libc::ENOEXEC), 126);
    }
}
