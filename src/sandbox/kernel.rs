//! The system calls the sandbox init makes while it sets up namespaces,
//! mounts and the command's process, behind one trait: [`Real`] makes
//! them, and a recording fake lets the tests check the plan call by call,
//! on any machine and without root.
//!
//! Each method is one kernel request (emptying the capability bounding set,
//! one call per capability, is the only series), with the arguments the
//! kernel takes and the error type of the library that makes it, so the
//! messages built from them stay what they were. What to ask, and in what
//! order, stays with the callers ([`super::ns`], [`super::mounts`],
//! [`super::init`]). Process machinery (forks, pipes, waits, signal masks,
//! the final `execve`) is not here: a test cannot fake it, and it decides
//! nothing about the sandbox's shape.
//!
//! The callers are generic over the trait, so the real build calls
//! [`Real`]'s methods directly, with no indirection.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;

use nix::libc;
use nix::mount::MsFlags;
use nix::sched::CloneFlags;
use rustix::mount::OpenTreeFlags;

use super::refused::Refused;
use crate::sys;

#[cfg(test)]
pub mod fake;

pub use crate::sys::ns::MountAttr;

/// One `mount(2)` but its target: what is mounted (`source`), the file
/// system type, the `MS_*` flags and the option string.
#[derive(Debug, Clone, Copy)]
pub struct Mount<'a> {
    pub source: Option<&'a str>,
    pub fstype: Option<&'a str>,
    pub flags: MsFlags,
    pub data: Option<&'a str>,
}

impl<'a> Mount<'a> {
    /// A new file system of type `fstype`, named after its type.
    pub fn fs(fstype: &'a str, flags: MsFlags, data: Option<&'a str>) -> Mount<'a> {
        Mount { source: Some(fstype), fstype: Some(fstype), flags, data }
    }
}

/// The kernel as the sandbox init uses it.
pub trait Kernel {
    /// A descriptor the kernel gave out: a detached mount tree, an `O_PATH`
    /// directory, a socket.
    type Fd;

    // Namespaces and identities.

    /// `unshare(2)`.
    fn unshare(&self, flags: CloneFlags) -> nix::Result<()>;
    /// `setns(2)` into the namespace `fd` refers to.
    fn setns(&self, fd: BorrowedFd<'_>, nstype: CloneFlags) -> nix::Result<()>;
    /// Writes `text` to the file at `path` (`/proc/self/uid_map`, ...).
    fn write_file(&self, path: &Path, text: &str) -> io::Result<()>;
    /// The text of the file at `path` (`/proc/self/uid_map`).
    fn read_file(&self, path: &Path) -> io::Result<String>;
    /// `setgroups(2)` with no group.
    fn clear_groups(&self) -> nix::Result<()>;
    /// `setresgid(2)`: real, effective and saved gid `gid`.
    fn setresgid(&self, gid: u32) -> nix::Result<()>;
    /// `setresuid(2)`: real, effective and saved uid `uid`.
    fn setresuid(&self, uid: u32) -> nix::Result<()>;
    /// `geteuid(2)`.
    fn geteuid(&self) -> u32;

    // Process restrictions.

    /// `PR_SET_NO_NEW_PRIVS`.
    fn set_no_new_privs(&self) -> rustix::io::Result<()>;
    /// `PR_SET_PDEATHSIG` with SIGKILL.
    fn kill_with_parent(&self) -> rustix::io::Result<()>;
    /// `getppid(2)`.
    fn getppid(&self) -> i32;
    /// `PR_CAPBSET_DROP` of every capability this kernel knows.
    fn clear_bounding_set(&self) -> rustix::io::Result<()>;
    /// `PR_CAP_AMBIENT_CLEAR_ALL`.
    fn clear_ambient_set(&self) -> rustix::io::Result<()>;
    /// `capset(2)`: no effective, permitted or inheritable capability.
    fn clear_capabilities(&self) -> rustix::io::Result<()>;
    /// `capget(2)`: whether this process holds any permitted capability
    /// (true when that cannot be read).
    fn holds_capabilities(&self) -> bool;
    /// `close_range(2)` from `first` up, with `CLOSE_RANGE_CLOEXEC`.
    fn cloexec_from(&self, first: u32) -> io::Result<()>;
    /// Installs the sandbox's system-call filter (see `seccomp`).
    fn seccomp(&self, filter: super::seccomp::Filter) -> Result<(), Refused>;
    /// Enforces the Landlock backend's rules on this process (see
    /// `landlock`).
    fn landlock(&self, rules: &super::landlock::Rules) -> Result<(), Refused>;
    /// `chroot(2)`.
    fn chroot(&self, path: &Path) -> nix::Result<()>;
    /// `chdir(2)`.
    fn chdir(&self, path: &Path) -> nix::Result<()>;

    // The network.

    /// An `AF_INET` datagram socket (close-on-exec), to ask interfaces with.
    fn socket(&self) -> nix::Result<Self::Fd>;
    /// `SIOCGIFFLAGS` of interface `name`.
    fn interface_flags(&self, sock: &Self::Fd, name: &str) -> io::Result<libc::c_short>;
    /// `SIOCSIFFLAGS` of interface `name`.
    fn set_interface_flags(&self, sock: &Self::Fd, name: &str, flags: libc::c_short) -> io::Result<()>;

    // Mounts.

    /// `mount(2)` of `m` on `target`.
    fn mount(&self, target: &Path, m: &Mount<'_>) -> nix::Result<()>;
    /// `open_tree(2)` of `path`, relative to `dir` (the current directory
    /// when `None`).
    fn open_tree(
        &self,
        dir: Option<&Self::Fd>,
        path: &CStr,
        flags: OpenTreeFlags,
    ) -> rustix::io::Result<Self::Fd>;
    /// `move_mount(2)` of the detached `tree` onto `target`.
    fn move_mount(&self, tree: &Self::Fd, target: &CStr) -> rustix::io::Result<()>;
    /// `mount_setattr(2)` of the mount at `path` relative to `tree` (the
    /// current directory when `None`); see [`sys::ns::mount_setattr`].
    fn mount_setattr(&self, tree: Option<&Self::Fd>, path: &CStr, attr: &MountAttr<'_>) -> io::Result<()>;
    /// An `O_PATH` descriptor of the directory at `path` (close-on-exec).
    fn open_dir_path(&self, path: &Path) -> nix::Result<Self::Fd>;
    /// The path that names `fd` in an option string (`/proc/self/fd/N`).
    fn fd_path(&self, fd: &Self::Fd) -> String;
    /// The `st_mode` of `fd`.
    fn fstat_mode(&self, fd: &Self::Fd) -> nix::Result<u32>;
    /// The `st_mode` and `st_rdev` of `name` in directory `dir`, not
    /// following a symlink.
    fn fstatat_nofollow(&self, dir: &Self::Fd, name: &str) -> nix::Result<(u32, u64)>;

    // Files, for mount points and the private `/dev`.

    /// Whether `path` is a directory (not following a symlink); an error
    /// when nothing is there.
    fn lstat_is_dir(&self, path: &Path) -> io::Result<bool>;
    /// `mkdir -p`.
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    /// `mkdir(2)`.
    fn create_dir(&self, path: &Path) -> io::Result<()>;
    /// A new, empty regular file (never an existing one).
    fn create_file(&self, path: &Path) -> io::Result<()>;
    /// `mknod(2)` of a character device.
    fn mknod_char(&self, path: &Path, mode: u32, rdev: u64) -> nix::Result<()>;
    /// `chmod(2)`.
    fn chmod(&self, path: &Path, mode: u32) -> io::Result<()>;
    /// `unlink(2)`.
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    /// `symlink(2)`: a link at `link` pointing to `to`.
    fn symlink(&self, to: &str, link: &Path) -> io::Result<()>;
}

/// The kernel itself.
pub struct Real;

impl Kernel for Real {
    type Fd = OwnedFd;

    fn unshare(&self, flags: CloneFlags) -> nix::Result<()> {
        nix::sched::unshare(flags)
    }

    fn setns(&self, fd: BorrowedFd<'_>, nstype: CloneFlags) -> nix::Result<()> {
        nix::sched::setns(fd, nstype)
    }

    fn write_file(&self, path: &Path, text: &str) -> io::Result<()> {
        std::fs::write(path, text)
    }

    fn read_file(&self, path: &Path) -> io::Result<String> {
        std::fs::read_to_string(path)
    }

    fn clear_groups(&self) -> nix::Result<()> {
        nix::unistd::setgroups(&[])
    }

    fn setresgid(&self, gid: u32) -> nix::Result<()> {
        let g = nix::unistd::Gid::from_raw(gid);
        nix::unistd::setresgid(g, g, g)
    }

    fn setresuid(&self, uid: u32) -> nix::Result<()> {
        let u = nix::unistd::Uid::from_raw(uid);
        nix::unistd::setresuid(u, u, u)
    }

    fn geteuid(&self) -> u32 {
        nix::unistd::geteuid().as_raw()
    }

    fn set_no_new_privs(&self) -> rustix::io::Result<()> {
        rustix::thread::set_no_new_privs(true)
    }

    fn kill_with_parent(&self) -> rustix::io::Result<()> {
        rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
    }

    fn getppid(&self) -> i32 {
        nix::unistd::getppid().as_raw()
    }

    fn clear_bounding_set(&self) -> rustix::io::Result<()> {
        use rustix::thread::CapabilitySet;
        for cap in 0..64 {
            if let Err(e) =
                rustix::thread::remove_capability_from_bounding_set(CapabilitySet::from_bits_retain(1 << cap))
            {
                // EINVAL: past the last capability this kernel knows.
                if e == rustix::io::Errno::INVAL {
                    break;
                }
                return Err(e);
            }
        }
        Ok(())
    }

    fn clear_ambient_set(&self) -> rustix::io::Result<()> {
        rustix::thread::clear_ambient_capability_set()
    }

    fn holds_capabilities(&self) -> bool {
        rustix::thread::capabilities(None).map_or(true, |c| !c.permitted.is_empty())
    }

    fn clear_capabilities(&self) -> rustix::io::Result<()> {
        use rustix::thread::{CapabilitySet, CapabilitySets};
        let none = CapabilitySets {
            effective: CapabilitySet::empty(),
            permitted: CapabilitySet::empty(),
            inheritable: CapabilitySet::empty(),
        };
        rustix::thread::set_capabilities(None, none)
    }

    fn cloexec_from(&self, first: u32) -> io::Result<()> {
        sys::ns::cloexec_from(first)
    }

    fn seccomp(&self, filter: super::seccomp::Filter) -> Result<(), Refused> {
        super::seccomp::install(filter)
    }

    fn landlock(&self, rules: &super::landlock::Rules) -> Result<(), Refused> {
        super::landlock::enforce(rules)
    }

    fn chroot(&self, path: &Path) -> nix::Result<()> {
        nix::unistd::chroot(path)
    }

    fn chdir(&self, path: &Path) -> nix::Result<()> {
        nix::unistd::chdir(path)
    }

    fn socket(&self) -> nix::Result<OwnedFd> {
        use nix::sys::socket::{AddressFamily, SockFlag, SockType, socket};
        socket(AddressFamily::Inet, SockType::Datagram, SockFlag::SOCK_CLOEXEC, None)
    }

    fn interface_flags(&self, sock: &OwnedFd, name: &str) -> io::Result<libc::c_short> {
        sys::ns::interface_flags(sock, name)
    }

    fn set_interface_flags(&self, sock: &OwnedFd, name: &str, flags: libc::c_short) -> io::Result<()> {
        sys::ns::set_interface_flags(sock, name, flags)
    }

    fn mount(&self, target: &Path, m: &Mount<'_>) -> nix::Result<()> {
        nix::mount::mount(m.source, target, m.fstype, m.flags, m.data)
    }

    fn open_tree(
        &self,
        dir: Option<&OwnedFd>,
        path: &CStr,
        flags: OpenTreeFlags,
    ) -> rustix::io::Result<OwnedFd> {
        match dir {
            Some(dir) => rustix::mount::open_tree(dir, path, flags),
            None => rustix::mount::open_tree(rustix::fs::CWD, path, flags),
        }
    }

    fn move_mount(&self, tree: &OwnedFd, target: &CStr) -> rustix::io::Result<()> {
        let flags = rustix::mount::MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH;
        rustix::mount::move_mount(tree, c"", rustix::fs::CWD, target, flags)
    }

    fn mount_setattr(&self, tree: Option<&OwnedFd>, path: &CStr, attr: &MountAttr<'_>) -> io::Result<()> {
        sys::ns::mount_setattr(tree.map(|t| t.as_fd()), path, attr)
    }

    fn open_dir_path(&self, path: &Path) -> nix::Result<OwnedFd> {
        use nix::fcntl::OFlag;
        nix::fcntl::open(
            path,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
    }

    fn fd_path(&self, fd: &OwnedFd) -> String {
        format!("/proc/self/fd/{}", fd.as_raw_fd())
    }

    fn fstat_mode(&self, fd: &OwnedFd) -> nix::Result<u32> {
        nix::sys::stat::fstat(fd).map(|s| s.st_mode)
    }

    fn fstatat_nofollow(&self, dir: &OwnedFd, name: &str) -> nix::Result<(u32, u64)> {
        nix::sys::stat::fstatat(dir, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
            .map(|s| (s.st_mode, s.st_rdev))
    }

    fn lstat_is_dir(&self, path: &Path) -> io::Result<bool> {
        std::fs::symlink_metadata(path).map(|m| m.is_dir())
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        std::fs::create_dir_all(path)
    }

    fn create_dir(&self, path: &Path) -> io::Result<()> {
        std::fs::create_dir(path)
    }

    fn create_file(&self, path: &Path) -> io::Result<()> {
        std::fs::OpenOptions::new().write(true).create_new(true).open(path).map(drop)
    }

    fn mknod_char(&self, path: &Path, mode: u32, rdev: u64) -> nix::Result<()> {
        nix::sys::stat::mknod(
            path,
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::from_bits_truncate(mode),
            rdev,
        )
    }

    fn chmod(&self, path: &Path, mode: u32) -> io::Result<()> {
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(mode))
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn symlink(&self, to: &str, link: &Path) -> io::Result<()> {
        std::os::unix::fs::symlink(to, link)
    }
}
