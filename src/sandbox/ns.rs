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
//! never between a fork and an exec of a multi-threaded one.

use std::io;

use nix::libc;
use nix::sched::CloneFlags;

/// A failure to set up one protection, named the way the user asked for it.
#[derive(Debug)]
pub struct Refused {
    /// What could not be set up: "user namespace", "network namespace", ...
    pub protection: &'static str,
    pub why: String,
}

impl Refused {
    pub fn new(protection: &'static str, why: impl Into<String>) -> Refused {
        Refused { protection, why: why.into() }
    }

    fn io(protection: &'static str, what: &str, e: io::Error) -> Refused {
        Refused::new(protection, format!("{what}: {e}"))
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot set up the {}: {}", self.protection, self.why)
    }
}

/// Enters a new user namespace mapping `uid`/`gid` to themselves.
pub fn enter_user_namespace(uid: u32, gid: u32) -> Result<(), Refused> {
    const P: &str = "user namespace";
    if let Err(e) = nix::sched::unshare(CloneFlags::CLONE_NEWUSER) {
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
        std::fs::write(file, text).map_err(|e| Refused::io(P, &format!("cannot write {file}"), e))
    };
    write("/proc/self/setgroups", "deny".into())?;
    write("/proc/self/uid_map", format!("{uid} {uid} 1\n"))?;
    write("/proc/self/gid_map", format!("{gid} {gid} 1\n"))?;
    Ok(())
}

/// Enters one namespace; `protection` names it in the refusal.
pub fn unshare(flag: CloneFlags, protection: &'static str) -> Result<(), Refused> {
    nix::sched::unshare(flag).map_err(|e| Refused::new(protection, format!("unshare: {e}")))
}

/// Brings the loopback interface of a new network namespace up, so the
/// command can still talk to itself (and to nothing else).
pub fn loopback_up() -> Result<(), Refused> {
    const P: &str = "network namespace";
    // SAFETY: socket() with constant arguments; the result is checked and owned immediately.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(Refused::io(P, "cannot open a socket", io::Error::last_os_error()));
    }
    // SAFETY: `fd` was just returned by socket() and is owned by nobody else.
    let sock = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let raw = std::os::fd::AsRawFd::as_raw_fd(&sock);
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (i, b) in b"lo".iter().enumerate() {
        req.ifr_name[i] = *b as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS reads into the ifreq we own.
    if unsafe { libc::ioctl(raw, libc::SIOCGIFFLAGS, &mut req) } < 0 {
        return Err(Refused::io(P, "cannot read the flags of `lo`", io::Error::last_os_error()));
    }
    // SAFETY: the kernel filled in ifru_flags above; we only set bits in it.
    unsafe {
        req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    }
    // SAFETY: SIOCSIFFLAGS reads the ifreq we own.
    if unsafe { libc::ioctl(raw, libc::SIOCSIFFLAGS, &req) } < 0 {
        return Err(Refused::io(P, "cannot bring `lo` up", io::Error::last_os_error()));
    }
    Ok(())
}

fn prctl(op: libc::c_int, arg: libc::c_ulong) -> io::Result<()> {
    // SAFETY: prctl with integer arguments only; no memory is passed.
    if unsafe { libc::prctl(op, arg, 0 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// No later `execve` can gain privileges (setuid bits, file capabilities).
pub fn no_new_privs() -> Result<(), Refused> {
    prctl(libc::PR_SET_NO_NEW_PRIVS, 1).map_err(|e| Refused::io("no-new-privileges flag", "prctl", e))
}

/// SIGKILL this process when its parent dies. Returns false when the parent
/// is already gone (it died before the request took effect).
pub fn die_with_parent(expected_parent: i32) -> io::Result<bool> {
    prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong)?;
    Ok(nix::unistd::getppid().as_raw() == expected_parent)
}

/// Drops every capability: the bounding set (so even a root command cannot
/// regain them by executing something), the ambient set, and the effective,
/// permitted and inheritable sets. After this a root command in the sandbox
/// is uid 0 without power over mounts, so the read-only file system holds.
pub fn drop_capabilities() -> Result<(), Refused> {
    const P: &str = "capability drop";
    for cap in 0..64 {
        if let Err(e) = prctl(libc::PR_CAPBSET_DROP, cap) {
            // EINVAL: past the last capability this kernel knows.
            if e.raw_os_error() == Some(libc::EINVAL) {
                break;
            }
            return Err(Refused::io(P, "cannot drop the bounding set", e));
        }
    }
    // SAFETY: prctl with integer arguments only.
    let r = unsafe { libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) };
    if r < 0 {
        return Err(Refused::io(P, "cannot clear the ambient set", io::Error::last_os_error()));
    }
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    // _LINUX_CAPABILITY_VERSION_3: two 32-bit words per set.
    let header = Header { version: 0x2008_0522, pid: 0 };
    let data = [Data { effective: 0, permitted: 0, inheritable: 0 }; 2];
    // SAFETY: capset reads a header and two data words that live on our stack.
    let r = unsafe { libc::syscall(libc::SYS_capset, &header as *const Header, data.as_ptr()) };
    if r < 0 {
        return Err(Refused::io(P, "capset", io::Error::last_os_error()));
    }
    Ok(())
}

/// The host uid and gid a root command runs as: `nobody` and `nogroup`.
pub const UNPRIVILEGED: (u32, u32) = (65534, 65534);

/// Starts a helper child that shares runws's memory (`CLONE_VM`, plus
/// `flags`) and runs `entry(arg)` on a small stack of its own, with every
/// signal blocked (only SIGKILL ends it). Creating it copies no page
/// tables. runws may have other threads: `entry` must touch nothing they
/// use (its own stack only, and direct system calls, which leave runws's
/// `errno` alone). The stack is never unmapped, as the helper is never
/// waited for on runws's path: nothing else may ever be placed where it
/// might still run. Used at most twice per runws process.
fn start_helper(
    entry: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    arg: *mut libc::c_void,
    flags: libc::c_int,
) -> io::Result<libc::pid_t> {
    const STACK: usize = 64 * 1024;
    // SAFETY: a fresh private mapping for the helper's stack.
    let stack = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            STACK,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if stack == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the top of the mapping (page aligned); the helper runs only `entry`, on that stack, with its own descriptor table, directory and signal handlers (no CLONE_FILES, CLONE_FS or CLONE_SIGHAND), and the mask set around the clone, which blocks every signal.
    let pid = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let top = (stack as *mut u8).add(STACK) as *mut libc::c_void;
        let pid = libc::clone(entry, top, libc::CLONE_VM | libc::SIGCHLD | flags, arg);
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        pid
    };
    if pid < 0 {
        let e = io::Error::last_os_error();
        // SAFETY: our own mapping; no helper runs on it.
        unsafe { libc::munmap(stack, STACK) };
        return Err(e);
    }
    Ok(pid)
}

/// A helper's whole life: wait for the SIGKILL.
extern "C" fn wait_for_the_end(_: *mut libc::c_void) -> libc::c_int {
    loop {
        // SAFETY: pause with no arguments, as a direct system call.
        unsafe { crate::child::sys(libc::SYS_pause, 0, 0, 0, 0) };
    }
}

/// A user namespace in which uid and gid 0 are the host's `uid` and `gid`,
/// for a command that must not be the host's root. Only a process
/// privileged outside the namespace may write such a map, so a helper (see
/// [`start_helper`]) is created in the namespace, and this process (root)
/// writes its maps, opens the namespace and ends the helper.
pub fn unprivileged_namespace(uid: u32, gid: u32) -> Result<std::os::fd::OwnedFd, Refused> {
    use std::os::fd::OwnedFd;
    const P: &str = "unprivileged uid";
    let pid = start_helper(wait_for_the_end, std::ptr::null_mut(), libc::CLONE_NEWUSER)
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
    // SAFETY: kill of our own child, by pid, before anything could reap it.
    unsafe { libc::kill(pid, libc::SIGKILL) };
    result
}

/// Makes this process uid and gid 0 of `userns` (a namespace from
/// [`unprivileged_namespace`]): on the host, the unprivileged ids it maps,
/// with no supplementary group. Called by the command's process as root,
/// before it drops its capabilities.
pub fn become_unprivileged(userns: std::os::fd::BorrowedFd<'_>) -> Result<(), Refused> {
    const P: &str = "unprivileged uid";
    nix::unistd::setgroups(&[]).map_err(|e| Refused::new(P, format!("setgroups: {e}")))?;
    nix::sched::setns(userns, CloneFlags::CLONE_NEWUSER)
        .map_err(|e| Refused::new(P, format!("setns: {e}")))?;
    let zero_g = nix::unistd::Gid::from_raw(0);
    let zero_u = nix::unistd::Uid::from_raw(0);
    nix::unistd::setresgid(zero_g, zero_g, zero_g).map_err(|e| Refused::new(P, format!("setresgid: {e}")))?;
    nix::unistd::setresuid(zero_u, zero_u, zero_u).map_err(|e| Refused::new(P, format!("setresuid: {e}")))?;
    Ok(())
}

/// Marks every descriptor from `first` up close-on-exec.
pub fn close_inherited(first: u32) -> Result<(), Refused> {
    // SAFETY: close_range with integer arguments; it only sets a flag on this process's descriptors.
    let r = unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, libc::CLOSE_RANGE_CLOEXEC) };
    if r < 0 {
        return Err(Refused::io("descriptor isolation", "close_range", io::Error::last_os_error()));
    }
    Ok(())
}

/// A network namespace being made by a helper on another core (see
/// [`NetworkNamespace::start`]).
pub struct NetworkNamespace {
    pid: libc::pid_t,
    ready: std::os::fd::OwnedFd,
}

impl NetworkNamespace {
    /// Starts making a network namespace with only loopback, off runws's
    /// path: the kernel takes about half a millisecond to set one up, and
    /// runws has the layout to compute and its child to start meanwhile.
    /// A helper (see [`start_helper`]) enters a new network namespace, says
    /// so on a pipe, and waits for the SIGKILL that
    /// [`NetworkNamespace::finish`] sends once it has opened the namespace.
    pub fn start() -> Result<NetworkNamespace, Refused> {
        use std::os::fd::AsRawFd;
        const P: &str = "network namespace";
        let (ready, ready_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| Refused::new(P, format!("pipe: {e}")))?;
        extern "C" fn make(arg: *mut libc::c_void) -> libc::c_int {
            let fd = arg as usize;
            // SAFETY: direct system calls on this helper's own stack; the byte written lives there too.
            unsafe {
                let made = crate::child::sys(libc::SYS_unshare, libc::CLONE_NEWNET as usize, 0, 0, 0) == 0;
                let ok = u8::from(made);
                crate::child::sys(libc::SYS_write, fd, &ok as *const u8 as usize, 1, 0);
                crate::child::sys(libc::SYS_close, fd, 0, 0, 0);
            }
            wait_for_the_end(std::ptr::null_mut())
        }
        let arg = ready_w.as_raw_fd() as usize as *mut libc::c_void;
        let pid = start_helper(make, arg, 0).map_err(|e| Refused::io(P, "clone", e))?;
        Ok(NetworkNamespace { pid, ready })
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
                let path = format!("/proc/{}/ns/net", self.pid);
                std::fs::File::open(&path)
                    .map(std::os::fd::OwnedFd::from)
                    .map_err(|e| Refused::io(P, &format!("cannot open {path}"), e))
            }
            _ => Err(Refused::new(P, "unshare: refused")),
        };
        // SAFETY: kill of our own child, by pid, before anything could reap it.
        unsafe { libc::kill(self.pid, libc::SIGKILL) };
        opened
    }
}
