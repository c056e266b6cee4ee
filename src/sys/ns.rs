//! The sandbox's kernel interfaces that neither `nix` nor `rustix` wraps:
//! namespace helpers created with `clone`, `mount_setattr`, the seccomp
//! filter, interface flags and `close_range`.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};

use nix::libc;
use nix::unistd::Pid;

use super::raw as sys;

/// Starts a helper child that shares runws's memory (`CLONE_VM`, plus
/// `flags`) and runs `entry(arg)` on a small stack of its own, with every
/// signal blocked (only SIGKILL ends it). Creating it copies no page
/// tables. runws may have other threads: `entry` must touch nothing they
/// use (its own stack only, and direct system calls, which leave runws's
/// `errno` alone). The stack is never unmapped, as the helper is never
/// waited for on runws's path: nothing else may ever be placed where it
/// might still run. Used at most three times per runws process.
fn start_helper(
    entry: extern "C" fn(*mut libc::c_void) -> libc::c_int,
    arg: usize,
    flags: libc::c_int,
) -> io::Result<Pid> {
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
    // SAFETY: the top of the mapping (page aligned); the helper runs only `entry`, on that stack, with its own directory and signal handlers (no CLONE_FS or CLONE_SIGHAND) and its own descriptor table unless `flags` has CLONE_FILES (then it opens and writes only what its caller arranged), and the mask set around the clone, which blocks every signal.
    let pid = unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let top = (stack as *mut u8).add(STACK) as *mut libc::c_void;
        let pid = libc::clone(entry, top, libc::CLONE_VM | libc::SIGCHLD | flags, arg as *mut libc::c_void);
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        pid
    };
    if pid < 0 {
        let e = io::Error::last_os_error();
        // SAFETY: our own mapping; no helper runs on it.
        unsafe { libc::munmap(stack, STACK) };
        return Err(e);
    }
    Ok(Pid::from_raw(pid))
}

/// A helper's whole life: wait for the SIGKILL.
extern "C" fn wait_for_the_end(_: *mut libc::c_void) -> libc::c_int {
    loop {
        // aarch64 has no `pause`: `ppoll` of no descriptors with no timeout
        // and no mask waits the same way, for a signal.
        #[cfg(target_arch = "x86_64")]
        let nr = libc::SYS_pause;
        #[cfg(not(target_arch = "x86_64"))]
        let nr = libc::SYS_ppoll;
        // SAFETY: pause, or ppoll with no descriptors, no timeout and no mask: no arguments point at memory.
        unsafe { sys(nr, 0, 0, 0, 0) };
    }
}

/// A helper (see [`start_helper`]) in a new user namespace, waiting to be
/// killed: its parent writes its maps and opens its namespace meanwhile.
pub fn user_namespace_helper() -> io::Result<Pid> {
    start_helper(wait_for_the_end, 0, libc::CLONE_NEWUSER)
}

/// A helper (see [`start_helper`]) that enters a new network namespace,
/// writes one byte on `ready` (1 when it did, 0 when the kernel refused)
/// and waits to be killed. `ready` may be closed once this returned (the
/// helper has its own copy).
pub fn network_namespace_helper(ready: BorrowedFd<'_>) -> io::Result<Pid> {
    extern "C" fn make(arg: *mut libc::c_void) -> libc::c_int {
        let fd = arg as usize;
        // SAFETY: direct system calls on this helper's own copy of the descriptor; the byte written lives on its stack.
        unsafe {
            let made = sys(libc::SYS_unshare, libc::CLONE_NEWNET as usize, 0, 0, 0) == 0;
            let ok = u8::from(made);
            sys(libc::SYS_write, fd, &ok as *const u8 as usize, 1, 0);
            sys(libc::SYS_close, fd, 0, 0, 0);
        }
        wait_for_the_end(std::ptr::null_mut())
    }
    start_helper(make, ready.as_raw_fd() as usize, 0)
}

/// A helper (see [`start_helper`]) in a new user namespace that also enters
/// a new network namespace, owned by that user namespace, while its parent
/// goes on: it opens that namespace into its parent's own descriptor table,
/// which it shares (`CLONE_FILES`), writes the descriptor's number on
/// `ready` (as 4 native-endian bytes; -1 when the kernel refused), and waits
/// to be killed. `ready` must stay open in the parent until it has read
/// the number: the helper writes on that number of the shared table.
pub fn user_and_network_namespace_helper(ready: BorrowedFd<'_>) -> io::Result<Pid> {
    extern "C" fn make(arg: *mut libc::c_void) -> libc::c_int {
        let fd = arg as usize;
        let path = b"/proc/self/ns/net\0";
        // SAFETY: direct system calls; the path and the number written live in this helper's stack and static data.
        unsafe {
            let mut opened: i32 = -1;
            if sys(libc::SYS_unshare, libc::CLONE_NEWNET as usize, 0, 0, 0) == 0 {
                let flags = (libc::O_RDONLY | libc::O_CLOEXEC) as usize;
                let r =
                    sys(libc::SYS_openat, libc::AT_FDCWD as isize as usize, path.as_ptr() as usize, flags, 0);
                if r >= 0 {
                    opened = r as i32;
                }
            }
            sys(libc::SYS_write, fd, &opened as *const i32 as usize, 4, 0);
        }
        wait_for_the_end(std::ptr::null_mut())
    }
    start_helper(make, ready.as_raw_fd() as usize, libc::CLONE_NEWUSER | libc::CLONE_FILES)
}

/// What [`listener_in`]'s helper reads and writes, all in this struct,
/// which outlives it (its parent waits for it to end).
#[repr(C)]
struct ListenJob {
    userns: i32,
    netns: i32,
    ifr: libc::ifreq,
    addr: libc::sockaddr_in,
    /// The listening socket's number in the shared table, or `-errno`.
    result: isize,
    /// Which step failed: 1 user namespace, 2 network namespace, 3 socket,
    /// 4 `lo` up, 5 bind, 6 listen.
    step: i32,
}

/// A TCP socket listening on `127.0.0.1` (a port the kernel picks) of the
/// network namespace `netns`, with its loopback brought up, for runws to
/// accept on from outside it (see `crate::egress`). Made by a helper (see
/// [`start_helper`]) that shares runws's descriptor table and enters the
/// namespace, after the user namespace `userns` that owns it when runws is
/// not root (runws's uid owns that namespace, so the helper holds every
/// capability in it); runws waits for the helper to end.
pub fn listener_in(netns: BorrowedFd<'_>, userns: Option<BorrowedFd<'_>>) -> io::Result<OwnedFd> {
    extern "C" fn make(arg: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `arg` is the ListenJob its parent keeps alive until this helper has ended, written by nothing else meanwhile; direct system calls only, each on fields of that struct.
        unsafe {
            let job = &mut *(arg as *mut ListenJob);
            let fail = |job: &mut ListenJob, step: i32, r: isize| {
                job.step = step;
                job.result = r;
                1
            };
            if job.userns >= 0 {
                let r = sys(libc::SYS_setns, job.userns as usize, libc::CLONE_NEWUSER as usize, 0, 0);
                if r < 0 {
                    return fail(job, 1, r);
                }
            }
            let r = sys(libc::SYS_setns, job.netns as usize, libc::CLONE_NEWNET as usize, 0, 0);
            if r < 0 {
                return fail(job, 2, r);
            }
            let kind = (libc::SOCK_STREAM | libc::SOCK_CLOEXEC) as usize;
            let s = sys(libc::SYS_socket, libc::AF_INET as usize, kind, 0, 0);
            if s < 0 {
                return fail(job, 3, s);
            }
            let ifr = &mut job.ifr as *mut libc::ifreq as usize;
            let mut r = sys(libc::SYS_ioctl, s as usize, libc::SIOCGIFFLAGS as usize, ifr, 0);
            if r >= 0 {
                job.ifr.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
                r = sys(libc::SYS_ioctl, s as usize, libc::SIOCSIFFLAGS as usize, ifr, 0);
            }
            if r < 0 {
                sys(libc::SYS_close, s as usize, 0, 0, 0);
                return fail(job, 4, r);
            }
            let addr = &job.addr as *const libc::sockaddr_in as usize;
            let len = std::mem::size_of::<libc::sockaddr_in>();
            let r = sys(libc::SYS_bind, s as usize, addr, len, 0);
            if r < 0 {
                sys(libc::SYS_close, s as usize, 0, 0, 0);
                return fail(job, 5, r);
            }
            let r = sys(libc::SYS_listen, s as usize, 4096, 0, 0);
            if r < 0 {
                sys(libc::SYS_close, s as usize, 0, 0, 0);
                return fail(job, 6, r);
            }
            job.result = s;
            0
        }
    }
    let mut ifr = ifreq("lo")?;
    ifr.ifr_ifru.ifru_flags = 0;
    let addr = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr { s_addr: u32::from(std::net::Ipv4Addr::LOCALHOST).to_be() },
        sin_zero: [0; 8],
    };
    let mut job = Box::new(ListenJob {
        userns: userns.map_or(-1, |u| u.as_raw_fd()),
        netns: netns.as_raw_fd(),
        ifr,
        addr,
        result: -(libc::EIO as isize),
        step: 0,
    });
    let arg = &mut *job as *mut ListenJob as usize;
    let pid = start_helper(make, arg, libc::CLONE_FILES)?;
    // Our own child, by pid: nothing else waits for it before this does.
    loop {
        match nix::sys::wait::waitpid(pid, None) {
            Err(nix::errno::Errno::EINTR) => continue,
            // Reaped by another waiter: it has ended all the same.
            Ok(_) | Err(nix::errno::Errno::ECHILD) => break,
            Err(e) => {
                // Not waited for: the job must outlive it.
                std::mem::forget(job);
                return Err(e.into());
            }
        }
    }
    if job.result < 0 {
        let what = ["", "setns (user)", "setns (net)", "socket", "lo up", "bind", "listen"];
        let e = io::Error::from_raw_os_error(-job.result as i32);
        return Err(io::Error::new(e.kind(), format!("{}: {e}", what[job.step.clamp(0, 6) as usize])));
    }
    super::fd::claim_inherited(job.result as i32).ok_or_else(|| io::Error::from_raw_os_error(libc::EBADF))
}

/// What one `mount_setattr(2)` asks: `flags` (`AT_RECURSIVE`,
/// `AT_EMPTY_PATH`) say which mounts, `set` and `clear` are the
/// `MOUNT_ATTR_*` bits to set and clear; with `userns`, the id map
/// `MOUNT_ATTR_IDMAP` applies.
#[derive(Debug, Clone, Copy)]
pub struct MountAttr<'a> {
    pub flags: libc::c_int,
    pub set: u64,
    pub clear: u64,
    pub userns: Option<BorrowedFd<'a>>,
}

/// `mount_setattr(2)` of the mount at `path` relative to `dir` (the
/// current directory when `None`).
pub fn mount_setattr(dir: Option<BorrowedFd<'_>>, path: &CStr, attr: &MountAttr<'_>) -> io::Result<()> {
    let kernel_attr = libc::mount_attr {
        attr_set: attr.set,
        attr_clr: attr.clear,
        propagation: 0,
        userns_fd: attr.userns.map_or(0, |fd| fd.as_raw_fd() as u64),
    };
    let dir = dir.map_or(libc::AT_FDCWD, |fd| fd.as_raw_fd());
    // SAFETY: mount_setattr reads the NUL-terminated path and the attribute struct, both borrowed for the call, with the struct's exact size.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            dir,
            path.as_ptr(),
            attr.flags as libc::c_uint,
            &kernel_attr as *const libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// One classic-BPF instruction, as `struct sock_filter`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct Insn {
    pub code: u16,
    pub jt: u8,
    pub jf: u8,
    pub k: u32,
}

/// Installs `prog` as this process's seccomp filter (inherited by
/// everything it executes). `PR_SET_NO_NEW_PRIVS` must already be set, or
/// the kernel refuses (EACCES) unless the process has `CAP_SYS_ADMIN`.
pub fn install_seccomp_filter(prog: &[Insn]) -> io::Result<()> {
    let len = u16::try_from(prog.len()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    #[repr(C)]
    struct Fprog {
        len: u16,
        filter: *const Insn,
    }
    let fprog = Fprog { len, filter: prog.as_ptr() };
    // SAFETY: prctl reads `fprog` and the `len` instructions it points to, both borrowed for the call; the kernel copies them.
    let r = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER as libc::c_ulong,
            &fprog as *const Fprog,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// Marks every descriptor from `first` up close-on-exec (`close_range`
/// with `CLOSE_RANGE_CLOEXEC`: nothing is closed, so no owner is wronged).
pub fn cloexec_from(first: u32) -> io::Result<()> {
    // SAFETY: close_range with integer arguments and CLOSE_RANGE_CLOEXEC only sets a flag on this process's descriptors.
    let r = unsafe { libc::syscall(libc::SYS_close_range, first, u32::MAX, libc::CLOSE_RANGE_CLOEXEC) };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// An interface's request block, named `name` (at most 15 bytes).
fn ifreq(name: &str) -> io::Result<libc::ifreq> {
    // SAFETY: ifreq is plain old data (a name and a union of integers and addresses); all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    if name.len() >= req.ifr_name.len() {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    for (slot, b) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *slot = b as libc::c_char;
    }
    Ok(req)
}

/// The flags (`IFF_*`) of interface `name`, asked through socket `sock`.
pub fn interface_flags(sock: &OwnedFd, name: &str) -> io::Result<libc::c_short> {
    let mut req = ifreq(name)?;
    // SAFETY: SIOCGIFFLAGS writes into the ifreq we own.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: SIOCGIFFLAGS filled the union's flags member.
    Ok(unsafe { req.ifr_ifru.ifru_flags })
}

/// Sets the flags (`IFF_*`) of interface `name` through socket `sock`.
pub fn set_interface_flags(sock: &OwnedFd, name: &str, flags: libc::c_short) -> io::Result<()> {
    let mut req = ifreq(name)?;
    req.ifr_ifru.ifru_flags = flags;
    // SAFETY: SIOCSIFFLAGS reads the ifreq we own.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Enforces the Landlock ruleset `fd` on this process and everything it
/// executes (`PR_SET_NO_NEW_PRIVS` set, or CAP_SYS_ADMIN held).
pub fn landlock_restrict_self(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: landlock_restrict_self reads only its two integer arguments.
    let r = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, fd.as_raw_fd(), 0) };
    if r < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// The Landlock ABI version the running kernel offers, or `None` where it
/// has none (not built in, or not enabled at boot).
pub fn landlock_abi() -> Option<u32> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with the VERSION flag, landlock_create_ruleset reads no memory (a null attribute pointer and size 0 are what the kernel requires) and creates no descriptor; it returns the ABI version or -1.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(v).ok().filter(|v| *v > 0)
}
