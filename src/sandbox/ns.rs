//! Namespaces, identity maps and process restrictions for the sandbox init.
//!
//! The order is fixed and matters: the user namespace comes first (when
//! runws is not root), because it is what grants the capabilities the other
//! namespaces need; `setgroups` is denied before `gid_map` is written, as the
//! kernel requires of an unprivileged writer. The real uid and gid are mapped
//! to themselves, not to root, so files the command writes keep the user's
//! ownership and the command holds no capability once it has executed.
//!
//! Every function here runs in the init (a plain, single-threaded process),
//! never between a fork and an exec of a multi-threaded one. The init's
//! steps make their calls through a [`Kernel`], so that the tests can check
//! them against a recording fake; [`unprivileged_namespace`] and
//! [`NetworkNamespace`], which runws runs before its fork, call the kernel
//! directly.

use std::io;
use std::os::fd::BorrowedFd;
use std::path::Path;

use nix::libc;
use nix::sched::CloneFlags;

use super::kernel::Kernel;
use crate::sys;

pub use super::refused::Refused;

/// Enters a new user namespace mapping `uid`/`gid` to themselves.
pub fn enter_user_namespace<K: Kernel>(k: &K, uid: u32, gid: u32) -> Result<(), Refused> {
    const P: &str = "user namespace";
    if let Err(e) = k.unshare(CloneFlags::CLONE_NEWUSER) {
        let why = match e {
            nix::errno::Errno::EPERM => "user namespaces are disabled (unshare: EPERM)".to_string(),
            nix::errno::Errno::ENOSPC => {
                "user namespaces are disabled (user.max_user_namespaces is 0 or exhausted)".to_string()
            }
            nix::errno::Errno::EINVAL => "user namespaces are not supported by this kernel".to_string(),
            other => format!("unshare: {other}"),
        };
        return Err(Refused::new(P, why));
    }
    let write = |file: &str, text: String| {
        k.write_file(Path::new(file), &text).map_err(|e| Refused::io(P, &format!("cannot write {file}"), e))
    };
    write("/proc/self/setgroups", "deny".into())?;
    write("/proc/self/uid_map", format!("{uid} {uid} 1\n"))?;
    write("/proc/self/gid_map", format!("{gid} {gid} 1\n"))?;
    Ok(())
}

/// Enters one namespace; `protection` names it in the refusal.
pub fn unshare<K: Kernel>(k: &K, flag: CloneFlags, protection: &'static str) -> Result<(), Refused> {
    k.unshare(flag).map_err(|e| Refused::new(protection, format!("unshare: {e}")))
}

/// Brings the loopback interface of a new network namespace up, so the
/// command can still talk to itself (and to nothing else).
pub fn loopback_up<K: Kernel>(k: &K) -> Result<(), Refused> {
    const P: &str = "network namespace";
    let sock = k.socket().map_err(|e| Refused::io(P, "cannot open a socket", e.into()))?;
    let flags =
        k.interface_flags(&sock, "lo").map_err(|e| Refused::io(P, "cannot read the flags of `lo`", e))?;
    let up = flags | (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    k.set_interface_flags(&sock, "lo", up).map_err(|e| Refused::io(P, "cannot bring `lo` up", e))
}

/// No later `execve` can gain privileges (setuid bits, file capabilities).
pub fn no_new_privs<K: Kernel>(k: &K) -> Result<(), Refused> {
    k.set_no_new_privs().map_err(|e| Refused::io("no-new-privileges flag", "prctl", e.into()))
}

/// SIGKILL this process when its parent dies. Returns false when the parent
/// is already gone (it died before the request took effect).
pub fn die_with_parent<K: Kernel>(k: &K, expected_parent: i32) -> io::Result<bool> {
    k.kill_with_parent()?;
    Ok(k.getppid() == expected_parent)
}

/// Drops every capability: the bounding set (so even a root command cannot
/// regain them by executing something), the ambient set, and the effective,
/// permitted and inheritable sets. After this a root command in the sandbox
/// is uid 0 without power over mounts, so the read-only file system holds.
pub fn drop_capabilities<K: Kernel>(k: &K) -> Result<(), Refused> {
    const P: &str = "capability drop";
    // Emptying the bounding set takes CAP_SETPCAP. A process that holds no
    // capability (an ordinary user under the Landlock backend) can never
    // gain one back, no-new-privileges being set: nothing to drop there.
    if let Err(e) = k.clear_bounding_set()
        && k.holds_capabilities()
    {
        return Err(Refused::io(P, "cannot drop the bounding set", e.into()));
    }
    k.clear_ambient_set().map_err(|e| Refused::io(P, "cannot clear the ambient set", e.into()))?;
    k.clear_capabilities().map_err(|e| Refused::io(P, "capset", e.into()))
}

/// The host uid and gid a root command runs as: `nobody` and `nogroup`.
pub const UNPRIVILEGED: (u32, u32) = (65534, 65534);

/// A user namespace in which uid and gid 0 are the host's `uid` and `gid`,
/// for a command that must not be the host's root. Only a process
/// privileged outside the namespace may write such a map, so a helper (see
/// [`sys::ns::user_namespace_helper`]) is created in the namespace, and this process (root)
/// writes its maps, opens the namespace and ends the helper.
pub fn unprivileged_namespace(uid: u32, gid: u32) -> Result<std::os::fd::OwnedFd, Refused> {
    use std::os::fd::OwnedFd;
    const P: &str = "unprivileged uid";
    let pid = sys::ns::user_namespace_helper()
        .map_err(|e| Refused::new(P, format!("cannot create a user namespace: {e}")))?;
    let result = (|| {
        let write = |file: &str, text: String| {
            std::fs::write(format!("/proc/{pid}/{file}"), text)
                .map_err(|e| Refused::io(P, &format!("cannot write {file}"), e))
        };
        write("uid_map", format!("0 {uid} 1\n"))?;
        write("gid_map", format!("0 {gid} 1\n"))?;
        let path = format!("/proc/{pid}/ns/user");
        std::fs::File::open(&path)
            .map(OwnedFd::from)
            .map_err(|e| Refused::io(P, &format!("cannot open {path}"), e))
    })();
    // Not waited for: it dies on its own time, off runws's path, and the
    // watch loop reaps it with the command's orphans (or the kernel, once
    // runws has exited).
    // Our own child, by pid, before anything could reap it.
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
    result
}

/// For a runws that is not root: a user namespace mapping only `uid` and
/// `gid` to themselves, with `setgroups` denied (what
/// [`enter_user_namespace`] makes inside the init), made before runws
/// becomes non-dumpable so that the init need not be a fresh executable to
/// write its own maps (see `sandbox::Isolated::early`); with `net`, a
/// network namespace it owns is made too, on another core, while runws
/// goes on (see [`OwnNetwork::finish`]). A helper sharing runws's memory
/// is created in the namespace; runws, dumpable still, may open the
/// helper's files: it writes the maps and opens the namespace. An error
/// leaves the init to make its namespaces itself.
pub fn own_user_namespace(uid: u32, gid: u32, net: bool) -> Result<Own, Refused> {
    use std::os::fd::{AsFd, OwnedFd};
    const P: &str = "user namespace";
    let ready = if net {
        Some(
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
                .map_err(|e| Refused::new(P, format!("pipe: {e}")))?,
        )
    } else {
        None
    };
    let pid = match &ready {
        Some((_, w)) => sys::ns::user_and_network_namespace_helper(w.as_fd()),
        None => sys::ns::user_namespace_helper(),
    }
    .map_err(|e| Refused::new(P, format!("cannot create a user namespace: {e}")))?;
    // Ends the helper whichever way this goes on.
    let helper = Helper(pid);
    let write = |file: &str, text: String| {
        std::fs::write(format!("/proc/{pid}/{file}"), text)
            .map_err(|e| Refused::io(P, &format!("cannot write {file}"), e))
    };
    write("setgroups", "deny".into())?;
    write("uid_map", format!("{uid} {uid} 1\n"))?;
    write("gid_map", format!("{gid} {gid} 1\n"))?;
    let path = format!("/proc/{pid}/ns/user");
    let userns = std::fs::File::open(&path)
        .map(OwnedFd::from)
        .map_err(|e| Refused::io(P, &format!("cannot open {path}"), e))?;
    let net = ready.map(|(ready, ready_w)| {
        // To see the helper end without saying (killed first): our own
        // child, not reaped before it is killed, so the pid is its.
        let exited = rustix::process::Pid::from_raw(pid.as_raw())
            .and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok());
        OwnNetwork { _helper: helper, ready, _ready_w: ready_w, exited }
    });
    Ok(Own { userns, net })
}

/// What [`own_user_namespace`] made: the user namespace, and the network
/// namespace being made in it.
pub struct Own {
    pub userns: std::os::fd::OwnedFd,
    pub net: Option<OwnNetwork>,
}

/// A network namespace being made by the helper of [`own_user_namespace`].
pub struct OwnNetwork {
    _helper: Helper,
    ready: std::os::fd::OwnedFd,
    /// The number the helper writes on, held open until it has.
    _ready_w: std::os::fd::OwnedFd,
    /// Readable once the helper has ended (a pidfd).
    exited: Option<std::os::fd::OwnedFd>,
}

impl OwnNetwork {
    /// Waits until the namespace exists; its descriptor, opened by the
    /// helper into runws's table. Ends the helper.
    pub fn finish(self) -> Result<std::os::fd::OwnedFd, Refused> {
        const P: &str = "network namespace";
        // runws holds the pipe's write end (the helper writes on its number
        // in the table they share), so an ended helper shows only on its
        // pidfd: wait for either; the 4 bytes come in one write.
        if let Some(exited) = &self.exited {
            use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
            use std::os::fd::AsFd;
            loop {
                let mut fds = [
                    PollFd::new(self.ready.as_fd(), PollFlags::POLLIN),
                    PollFd::new(exited.as_fd(), PollFlags::POLLIN),
                ];
                match poll(&mut fds, PollTimeout::NONE) {
                    Err(nix::errno::Errno::EINTR) => continue,
                    Err(e) => return Err(Refused::new(P, format!("poll: {e}"))),
                    Ok(_) => {}
                }
                let said = fds[0].revents().is_some_and(|r| r.contains(PollFlags::POLLIN));
                let ended = fds[1].revents().is_some_and(|r| !r.is_empty());
                if said {
                    break;
                }
                if ended {
                    return Err(Refused::new(P, "the helper ended before it said"));
                }
            }
        }
        let mut buf = [0u8; 4];
        let mut got = 0;
        while got < buf.len() {
            match nix::unistd::read(&self.ready, &mut buf[got..]) {
                Err(nix::errno::Errno::EINTR) => continue,
                Ok(n) if n > 0 => got += n,
                _ => return Err(Refused::new(P, "the helper ended before it said")),
            }
        }
        let fd = i32::from_ne_bytes(buf);
        if fd < 0 {
            return Err(Refused::new(P, "unshare: refused"));
        }
        sys::fd::claim_inherited(fd).ok_or_else(|| Refused::new(P, format!("descriptor {fd} is not open")))
    }
}

/// A helper of runws's, killed when dropped: by pid, our own child, before
/// anything could reap it; left for the watch loop to reap with the
/// command's orphans (or the kernel, once runws has exited).
struct Helper(nix::unistd::Pid);

impl Drop for Helper {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(self.0, nix::sys::signal::Signal::SIGKILL);
    }
}

/// Enters `userns` (from [`own_user_namespace`]) in place of making one:
/// the init then holds every capability inside it, as after
/// [`enter_user_namespace`].
pub fn join_user_namespace<K: Kernel>(k: &K, userns: BorrowedFd<'_>) -> Result<(), Refused> {
    k.setns(userns, CloneFlags::CLONE_NEWUSER)
        .map_err(|e| Refused::new("user namespace", format!("setns: {e}")))
}

/// Makes this process uid and gid 0 of `userns` (a namespace from
/// [`unprivileged_namespace`]): on the host, the unprivileged ids it maps,
/// with no supplementary group. Called by the command's process as root,
/// before it drops its capabilities.
pub fn become_unprivileged<K: Kernel>(k: &K, userns: BorrowedFd<'_>) -> Result<(), Refused> {
    const P: &str = "unprivileged uid";
    k.clear_groups().map_err(|e| Refused::new(P, format!("setgroups: {e}")))?;
    k.setns(userns, CloneFlags::CLONE_NEWUSER).map_err(|e| Refused::new(P, format!("setns: {e}")))?;
    k.setresgid(0).map_err(|e| Refused::new(P, format!("setresgid: {e}")))?;
    k.setresuid(0).map_err(|e| Refused::new(P, format!("setresuid: {e}")))?;
    Ok(())
}

/// Marks every descriptor from `first` up close-on-exec.
pub fn close_inherited<K: Kernel>(k: &K, first: u32) -> Result<(), Refused> {
    k.cloexec_from(first).map_err(|e| Refused::io("descriptor isolation", "close_range", e))
}

/// A network namespace being made by a helper on another core (see
/// [`NetworkNamespace::start`]).
pub struct NetworkNamespace {
    /// Killed when dropped: a run refused before [`NetworkNamespace::finish`]
    /// must not leave it waiting (it holds copies of runws's descriptors,
    /// its stdout and stderr among them, so a caller reading those to
    /// their end would wait for ever).
    helper: Helper,
    ready: std::os::fd::OwnedFd,
}

impl NetworkNamespace {
    /// Starts making a network namespace with only loopback, off runws's
    /// path: the kernel takes about half a millisecond to set one up, and
    /// runws has the layout to compute and its child to start meanwhile.
    /// A helper (see [`sys::ns::network_namespace_helper`]) enters a new network namespace, says
    /// so on a pipe, and waits for the SIGKILL that
    /// [`NetworkNamespace::finish`] sends once it has opened the namespace.
    pub fn start() -> Result<NetworkNamespace, Refused> {
        use std::os::fd::AsFd;
        const P: &str = "network namespace";
        let (ready, ready_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| Refused::new(P, format!("pipe: {e}")))?;
        let pid =
            sys::ns::network_namespace_helper(ready_w.as_fd()).map_err(|e| Refused::io(P, "clone", e))?;
        Ok(NetworkNamespace { helper: Helper(pid), ready })
    }

    /// Waits until the namespace exists, opens it and ends the helper (left
    /// for the watch loop to reap).
    pub fn finish(self) -> Result<std::os::fd::OwnedFd, Refused> {
        const P: &str = "network namespace";
        let mut ok = [0u8; 1];
        let read = loop {
            match nix::unistd::read(&self.ready, &mut ok) {
                Err(nix::errno::Errno::EINTR) => continue,
                other => break other,
            }
        };
        let opened = match read {
            Ok(1) if ok[0] == 1 => {
                let path = format!("/proc/{}/ns/net", self.helper.0);
                std::fs::File::open(&path)
                    .map(std::os::fd::OwnedFd::from)
                    .map_err(|e| Refused::io(P, &format!("cannot open {path}"), e))
            }
            _ => Err(Refused::new(P, "unshare: refused")),
        };
        // Ended as it is dropped (our own child, by pid, before anything
        // could reap it).
        drop(self.helper);
        opened
    }
}

#[cfg(test)]
mod tests;

/// Why namespaces cannot make a sandbox here, when that is known without
/// trying: a limit of zero user namespaces, a root without
/// `CAP_SYS_ADMIN` (a container's default), or, not as root, a kernel or
/// AppArmor policy against unprivileged user namespaces. `None` when
/// nothing says so (making them may still fail).
pub fn blocked(uid: u32) -> Option<String> {
    let read = |p: &str| std::fs::read_to_string(p).ok().map(|s| s.trim().to_string());
    if read("/proc/sys/user/max_user_namespaces").as_deref() == Some("0") {
        return Some("user namespaces are switched off (user.max_user_namespaces is 0)".into());
    }
    if uid == 0 {
        const CAP_SYS_ADMIN: u32 = 21;
        let eff = read("/proc/self/status").and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:").and_then(|v| u64::from_str_radix(v.trim(), 16).ok()))
        });
        if eff.is_some_and(|caps| caps & (1 << CAP_SYS_ADMIN) == 0) {
            return Some(
                "runws is root without CAP_SYS_ADMIN (a container's default), which namespaces need".into(),
            );
        }
        return None;
    }
    if read("/proc/sys/kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        return Some(
            "unprivileged user namespaces are switched off (kernel.unprivileged_userns_clone is 0)".into(),
        );
    }
    let confined = read("/proc/self/attr/apparmor/current").or_else(|| read("/proc/self/attr/current"));
    if read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1")
        && confined.as_deref().is_none_or(|c| c == "unconfined")
    {
        return Some(
            "AppArmor gives unprivileged user namespaces no capabilities \
             (kernel.apparmor_restrict_unprivileged_userns is 1)"
                .into(),
        );
    }
    None
}
