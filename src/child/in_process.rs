//! What the child needs when it runs code of runws's instead of executing a
//! program (`Spec::in_process`): a PID namespace of its own. (Whether that
//! is safe, and what an exec would have done for it, closing the
//! close-on-exec descriptors and dropping runws's command line and
//! environment, is [`crate::sys::launch`]'s.)

use std::os::fd::OwnedFd;

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
