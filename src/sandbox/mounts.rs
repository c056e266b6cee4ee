//! The sandbox's file system view, built inside a fresh mount namespace.
//!
//! The layout is a list of [`MountOp`]s computed by runws before the fork
//! (so a bad `--rw` path is refused before anything runs) and applied here
//! by the init in three phases:
//!
//! 1. every bind source is cloned (`open_tree`) while the whole tree is still
//!    visible, so a source under a location that a later step hides (the real
//!    home, `/tmp`) can still be placed;
//! 2. every mount in the namespace is made read-only (`mount_setattr` on `/`,
//!    recursively): the copies, never the host's mounts;
//! 3. the ops are applied parents first: tmpfs mounts, then binds on top,
//!    mount points created inside tmpfs mounts where missing. A bind keeps the
//!    flags of its source (so `--rw` and the run's subdirectories stay
//!    writable) unless it is marked read-only; a tmpfs that only hides
//!    something is made read-only last, once everything beneath it is placed.
//!
//! Nothing here unmounts or changes a mount outside the new namespace: with
//! propagation made private first, no mount event travels back to the host.
//! The list shape is meant for reuse: a per-run overlay (for example a cache
//! directory with a run-private upper layer) is one more op.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::libc;
use nix::mount::MsFlags;
use serde::{Deserialize, Serialize};

use super::ns::Refused;

const P: &str = "read-only file system";

/// One step of the layout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum MountOp {
    /// A fresh tmpfs at `target`. `writable: false` hides what was there
    /// behind an empty, read-only directory.
    Tmpfs { target: PathBuf, mode: u32, writable: bool },
    /// `source` (a file or directory tree) placed at `target`; read-only
    /// unless `writable`, in which case it keeps its source's flags.
    Bind { source: PathBuf, target: PathBuf, writable: bool },
    /// A file hidden behind an empty, read-only `/dev/null`.
    HideFile { target: PathBuf },
    /// `lower` (a shared cache, never written) seen at `target` through a
    /// copy-on-write overlay whose upper layer is the run's own `upper`.
    Overlay { lower: PathBuf, upper: PathBuf, work: PathBuf, target: PathBuf, userxattr: bool },
}

impl MountOp {
    pub fn target(&self) -> &Path {
        match self {
            MountOp::Tmpfs { target, .. }
            | MountOp::Bind { target, .. }
            | MountOp::HideFile { target }
            | MountOp::Overlay { target, .. } => target,
        }
    }
}

fn cpath(p: &Path) -> Result<CString, Refused> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| Refused::new(P, format!("`{}` contains a NUL byte", p.display())))
}

fn fail(what: &str, path: &Path, e: io::Error) -> Refused {
    Refused::new(P, format!("{what} `{}`: {e}", path.display()))
}

/// Makes every mount in this namespace private, so nothing done here is
/// propagated to the host (or from it).
pub fn make_private() -> Result<(), Refused> {
    nix::mount::mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None::<&str>)
        .map_err(|e| Refused::new("mount namespace", format!("cannot make `/` private: {e}")))
}

/// A detached copy of the tree at `path` (with everything mounted beneath).
pub fn clone_tree(path: &Path) -> Result<OwnedFd, Refused> {
    let c = cpath(path)?;
    let flags = libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC | libc::AT_RECURSIVE as libc::c_uint;
    // SAFETY: open_tree reads a NUL-terminated path we own; it returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, c.as_ptr(), flags) };
    if fd < 0 {
        return Err(fail("cannot clone", path, io::Error::last_os_error()));
    }
    // SAFETY: the descriptor was just returned by the kernel and is ours.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Attaches a detached tree at `target`.
pub fn attach(tree: &OwnedFd, target: &Path) -> Result<(), Refused> {
    let c = cpath(target)?;
    let empty = c"";
    // SAFETY: move_mount reads two NUL-terminated strings we own.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_FDCWD,
            c.as_ptr(),
            libc::MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    if r < 0 {
        return Err(fail("cannot mount onto", target, io::Error::last_os_error()));
    }
    Ok(())
}

/// Sets (or clears) `MOUNT_ATTR_RDONLY` on the mount at `path`, and on every
/// mount beneath it when `recursive`.
pub fn set_read_only(path: &Path, read_only: bool, recursive: bool) -> Result<(), Refused> {
    let c = cpath(path)?;
    let mut attr: libc::mount_attr =
        libc::mount_attr { attr_set: 0, attr_clr: 0, propagation: 0, userns_fd: 0 };
    if read_only {
        attr.attr_set = libc::MOUNT_ATTR_RDONLY;
    } else {
        attr.attr_clr = libc::MOUNT_ATTR_RDONLY;
    }
    let flags = if recursive { libc::AT_RECURSIVE } else { 0 };
    // SAFETY: mount_setattr reads the path and the attribute struct we own, with its exact size.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            c.as_ptr(),
            flags as libc::c_uint,
            &attr as *const libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    if r < 0 {
        return Err(fail("cannot make read-only", path, io::Error::last_os_error()));
    }
    Ok(())
}

/// A tmpfs at `target` with root directory mode `mode`.
pub fn tmpfs(target: &Path, mode: u32) -> Result<(), Refused> {
    nix::mount::mount(
        Some("tmpfs"),
        target,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(format!("mode={mode:o}").as_str()),
    )
    .map_err(|e| fail("cannot mount a tmpfs on", target, e.into()))
}

fn open_path(path: &Path) -> Result<OwnedFd, Refused> {
    use nix::fcntl::OFlag;
    nix::fcntl::open(
        path,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(|e| fail("cannot open", path, e.into()))
}

/// An overlay of `lower` (read-only) and the writable `upper` at `target`.
/// Paths go into the option string as descriptor paths, so a comma or colon
/// in a real path cannot change the options.
fn overlay(
    lower: &OwnedFd,
    upper: &Path,
    work: &Path,
    target: &Path,
    userxattr: bool,
) -> Result<(), Refused> {
    let (u, w) = (open_path(upper)?, open_path(work)?);
    let fdp = |fd: &OwnedFd| format!("/proc/self/fd/{}", fd.as_raw_fd());
    let mut opts = format!("lowerdir={},upperdir={},workdir={}", fdp(lower), fdp(&u), fdp(&w));
    if userxattr {
        opts.push_str(",userxattr");
    }
    nix::mount::mount(Some("overlay"), target, Some("overlay"), MsFlags::empty(), Some(opts.as_str()))
        .map_err(|e| fail("cannot layer the cache onto", target, e.into()))
}

/// A fresh procfs for the new PID namespace.
pub fn proc_fs() -> Result<(), Refused> {
    nix::mount::mount(
        Some("proc"),
        "/proc",
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .map_err(|e| Refused::new("private /proc", format!("cannot mount proc on `/proc`: {e}")))
}

/// Makes sure `target` exists as a directory (or, for a file tree, a file)
/// to mount onto. Missing components can only be created inside a tmpfs the
/// layout placed earlier; anywhere else the file system is read-only and
/// the error says so.
fn mount_point(target: &Path, dir: bool) -> Result<(), Refused> {
    if std::fs::symlink_metadata(target).is_ok() {
        return Ok(());
    }
    let parent = target.parent().unwrap_or(Path::new("/"));
    std::fs::create_dir_all(parent).map_err(|e| fail("cannot create the mount point", parent, e))?;
    let made = if dir {
        std::fs::create_dir(target)
    } else {
        std::fs::OpenOptions::new().write(true).create_new(true).open(target).map(drop)
    };
    made.map_err(|e| fail("cannot create the mount point", target, e))
}

fn is_dir(tree: &OwnedFd) -> bool {
    nix::sys::stat::fstat(tree).map(|s| s.st_mode & libc::S_IFMT == libc::S_IFDIR).unwrap_or(true)
}

/// Applies `ops` (already ordered parents first) in this mount namespace.
pub fn build(ops: &[MountOp]) -> Result<(), Refused> {
    make_private()?;
    let mut trees: Vec<Option<OwnedFd>> = Vec::with_capacity(ops.len());
    for op in ops {
        trees.push(match op {
            MountOp::Bind { source, .. } => Some(clone_tree(source)?),
            MountOp::HideFile { .. } => Some(clone_tree(Path::new("/dev/null"))?),
            // The lower layer is opened now, while a later step may still
            // hide the path it lives under.
            MountOp::Overlay { lower, .. } => Some(open_path(lower)?),
            MountOp::Tmpfs { .. } => None,
        });
    }
    set_read_only(Path::new("/"), true, true)?;
    for (op, tree) in ops.iter().zip(&trees) {
        match (op, tree) {
            (MountOp::Tmpfs { target, mode, .. }, _) => {
                mount_point(target, true)?;
                tmpfs(target, *mode)?
            }
            (MountOp::Bind { target, writable, .. }, Some(tree)) => {
                mount_point(target, is_dir(tree))?;
                attach(tree, target)?;
                if !writable {
                    set_read_only(target, true, true)?;
                }
            }
            (MountOp::HideFile { target }, Some(tree)) => {
                attach(tree, target)?;
                set_read_only(target, true, false)?;
            }
            // Placed last, below, once the run's writable layers are bound.
            (MountOp::Overlay { .. }, _) => {}
            _ => return Err(Refused::new(P, "internal: a bind without its source")),
        }
    }
    for (op, tree) in ops.iter().zip(&trees) {
        if let (MountOp::Overlay { upper, work, target, userxattr, .. }, Some(lower)) = (op, tree) {
            mount_point(target, true)?;
            overlay(lower, upper, work, target, *userxattr)?;
        }
    }
    for op in ops {
        if let MountOp::Tmpfs { target, writable: false, .. } = op {
            set_read_only(target, true, false)?;
        }
    }
    Ok(())
}

/// Sorts ops parents first (by number of path components), keeping the
/// given order among equal depths.
pub fn order(ops: &mut [MountOp]) {
    ops.sort_by_key(|op| op.target().components().count());
}

/// True when `path` is `base` or lies beneath it.
pub fn is_within(path: &Path, base: &Path) -> bool {
    path.starts_with(base)
}

/// The targets of `ops` that hide what is beneath them.
pub fn hiding_targets(ops: &[MountOp]) -> Vec<PathBuf> {
    ops.iter()
        .filter_map(|op| match op {
            MountOp::Tmpfs { target, .. } | MountOp::HideFile { target } => Some(target.clone()),
            MountOp::Bind { .. } | MountOp::Overlay { .. } => None,
        })
        .collect()
}
