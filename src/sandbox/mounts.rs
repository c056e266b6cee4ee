//! The sandbox's file system view, built inside a fresh mount namespace.
//!
//! The layout is a list of [`MountOp`]s computed by runws before the fork
//! (so a bad `--rw` path is refused before anything runs) and applied here
//! by the init in three phases:
//!
//! 1. every bind source is cloned (`open_tree`) while the whole tree is still
//!    visible, so a source under a location that a later step hides (the real
//!    home, `/tmp`, the host's `/dev`) can still be placed;
//! 2. every mount in the namespace is made read-only, `nosuid` and `nodev`
//!    (`mount_setattr` on `/`, recursively): the copies, never the host's
//!    mounts;
//! 3. the ops are applied parents first: tmpfs mounts and the private `/dev`,
//!    then binds on top, mount points created inside tmpfs mounts where
//!    missing. Every bind is `nosuid` and `nodev` whatever its source was (a
//!    device node in a `--rw` directory cannot be opened), and read-only
//!    unless it is writable; a tmpfs that only hides something, and the
//!    private `/dev`, are made read-only last, once everything beneath them
//!    is placed.
//!
//! The private `/dev` holds what bubblewrap's `--dev` holds: the host's
//! `null`, `zero`, `full`, `random`, `urandom` and `tty` nodes (made with
//! `mknod` by root, else bound from the host: the only mounts where device
//! nodes work), a devpts of the sandbox's own with
//! `ptmx`, `shm`, and the `fd`, `stdin`, `stdout` and `stderr` links; never a
//! disk, a loop device or `/dev/mem`. `/proc` is mounted read-only (so no
//! host-wide knob can be written), and [`mask_proc`] hides the files that
//! expose kernel memory or other users' keys, as container runtimes do.
//!
//! Nothing here unmounts or changes a mount outside the new namespace: with
//! propagation made private first, no mount event travels back to the host.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::libc;
use nix::mount::MsFlags;
use rustix::mount::OpenTreeFlags;
use serde::{Deserialize, Serialize};

use super::ns::Refused;
use crate::sys;

const P: &str = "read-only file system";

/// One step of the layout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum MountOp {
    /// A fresh tmpfs at `target`. `writable: false` hides what was there
    /// behind an empty, read-only directory.
    Tmpfs { target: PathBuf, mode: u32, writable: bool },
    /// `source` (a file or directory tree) placed at `target`; read-only
    /// unless `writable`, in which case it keeps its source's flags. With
    /// `mapped`, id-mapped like a writable one (the run directory's own
    /// top level: private to its owner, yet the command's to enter).
    Bind {
        source: PathBuf,
        target: PathBuf,
        writable: bool,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        mapped: bool,
    },
    /// A file hidden behind an empty, read-only `/dev/null`.
    HideFile { target: PathBuf },
    /// `lower` (a shared cache, never written) seen at `target` through a
    /// copy-on-write overlay whose upper layer is the run's own `upper`.
    Overlay { lower: PathBuf, upper: PathBuf, work: PathBuf, target: PathBuf, userxattr: bool },
    /// A private `/dev` at `target` (see the module docs).
    Dev { target: PathBuf },
}

impl MountOp {
    pub fn target(&self) -> &Path {
        match self {
            MountOp::Tmpfs { target, .. }
            | MountOp::Bind { target, .. }
            | MountOp::HideFile { target }
            | MountOp::Overlay { target, .. }
            | MountOp::Dev { target } => target,
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
    let flags =
        OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC | OpenTreeFlags::AT_RECURSIVE;
    rustix::mount::open_tree(rustix::fs::CWD, c.as_c_str(), flags)
        .map_err(|e| fail("cannot clone", path, e.into()))
}

/// A detached copy of `name` under the directory `dir` (which may be
/// covered by a mount by now).
fn clone_at(dir: &OwnedFd, name: &str) -> Result<OwnedFd, Refused> {
    let c = CString::new(name).map_err(|_| Refused::new(P, "a name with a NUL byte"))?;
    let flags = OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC;
    rustix::mount::open_tree(dir, c.as_c_str(), flags)
        .map_err(|e| fail("cannot clone", &Path::new("/dev").join(name), e.into()))
}

/// Attaches a detached tree at `target`.
pub fn attach(tree: &OwnedFd, target: &Path) -> Result<(), Refused> {
    let c = cpath(target)?;
    let flags = rustix::mount::MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH;
    rustix::mount::move_mount(tree, c"", rustix::fs::CWD, c.as_c_str(), flags)
        .map_err(|e| fail("cannot mount onto", target, e.into()))
}

/// Sets `set` and clears `clear` (`MOUNT_ATTR_*` bits) on the mount at
/// `path`, and on every mount beneath it when `recursive`.
pub fn set_attrs(path: &Path, set: u64, clear: u64, recursive: bool) -> Result<(), Refused> {
    let c = cpath(path)?;
    let flags = if recursive { libc::AT_RECURSIVE } else { 0 };
    sys::ns::mount_setattr(None, &c, flags, set, clear, None)
        .map_err(|e| fail("cannot set the flags of", path, e))
}

/// Sets (or clears) `MOUNT_ATTR_RDONLY` on the mount at `path`, and on every
/// mount beneath it when `recursive`.
pub fn set_read_only(path: &Path, read_only: bool, recursive: bool) -> Result<(), Refused> {
    let ro = libc::MOUNT_ATTR_RDONLY;
    if read_only { set_attrs(path, ro, 0, recursive) } else { set_attrs(path, 0, ro, recursive) }
}

/// `nosuid` and `nodev`: what every mount of the sandbox but its device
/// nodes carries.
const LOCKED_DOWN: u64 = libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV;

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
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    nix::mount::mount(Some("overlay"), target, Some("overlay"), flags, Some(opts.as_str()))
        .map_err(|e| fail("cannot layer the cache onto", target, e.into()))
}

/// The overlay of [`overlay`] for a command that runs as an unprivileged
/// id. Overlayfs cannot itself be id-mapped, so its lower layer is:
/// `lower` is a detached, id-mapped clone of the cache (its root-owned
/// files are the command's own through it), and `layer` a detached,
/// writable clone of the directory holding `upper` and `work` (runws gave
/// `upper` to the unprivileged id). Copies up then keep the owner the
/// command sees, and what it creates belongs to it.
fn overlay_mapped(lower: &OwnedFd, layer: &OwnedFd, target: &Path) -> Result<(), Refused> {
    let fdp = |fd: &OwnedFd, sub: &str| format!("/proc/self/fd/{}{sub}", fd.as_raw_fd());
    let opts = format!(
        "lowerdir={},upperdir={},workdir={}",
        fdp(lower, ""),
        fdp(layer, "/upper"),
        fdp(layer, "/work")
    );
    mount_point(target, true)?;
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    nix::mount::mount(Some("overlay"), target, Some("overlay"), flags, Some(opts.as_str()))
        .map_err(|e| fail("cannot layer the cache onto", target, e.into()))
}

/// A fresh procfs for the new PID namespace.
/// Read-only, as a whole: no host-wide knob (`/proc/sys`, `sysrq-trigger`,
/// `irq`, `bus`, `fs`) can be written, and one mount does it where binding
/// each knob read-only would take five.
pub fn proc_fs() -> Result<(), Refused> {
    nix::mount::mount(
        Some("proc"),
        "/proc",
        Some("proc"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC | MsFlags::MS_RDONLY,
        None::<&str>,
    )
    .map_err(|e| Refused::new("private /proc", format!("cannot mount proc on `/proc`: {e}")))
}

/// `/proc` entries that show kernel memory, other users' keys or timing
/// detail about the host: hidden (files behind an unopenable node,
/// directories behind an empty, read-only tmpfs).
const PROC_MASKED: &[&str] = &[
    "/proc/kcore",
    "/proc/keys",
    "/proc/key-users",
    "/proc/timer_list",
    "/proc/sched_debug",
    "/proc/latency_stats",
    "/proc/acpi",
    "/proc/scsi",
    "/proc/asound",
];

/// Hides what the sandbox's (read-only) `/proc` must not show (see
/// [`PROC_MASKED`]). Entries this kernel does not have are skipped.
pub fn mask_proc() -> Result<(), Refused> {
    let protect = |e: Refused| Refused::new("masked /proc", e.why);
    for p in PROC_MASKED.iter().map(Path::new) {
        let Ok(meta) = std::fs::symlink_metadata(p) else { continue };
        if meta.is_dir() {
            tmpfs(p, 0o555).map_err(protect)?;
            set_read_only(p, true, false).map_err(protect)?;
        } else {
            hide_file(p).map_err(protect)?;
        }
    }
    Ok(())
}

/// Covers the file at `target` with an unopenable, read-only node (a
/// `nodev` bind of `/dev/null`).
fn hide_file(target: &Path) -> Result<(), Refused> {
    attach(&clone_tree(Path::new("/dev/null"))?, target)?;
    set_attrs(target, libc::MOUNT_ATTR_RDONLY | LOCKED_DOWN | libc::MOUNT_ATTR_NOEXEC, 0, false)
}

/// The host device nodes a private `/dev` shows.
const DEV_NODES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

/// What a private `/dev` is made from, found while the host's `/dev` is
/// still visible: the host's `/dev` (a path descriptor, to clone a node
/// from once it is covered) and each node's device number and mode.
struct DevNodes {
    host: OwnedFd,
    nodes: Vec<(&'static str, libc::dev_t, u32)>,
    /// Whether to make the nodes with `mknod` (root of the host's user
    /// namespace) instead of binding each (a mount apiece).
    make: bool,
    /// Without `make`: clones of the host's nodes, taken before every
    /// mount (those clones included, were they taken later) is `nodev`.
    clones: Vec<OwnedFd>,
}

fn dev_nodes() -> Result<DevNodes, Refused> {
    let host = open_path(Path::new("/dev"))?;
    let mut nodes = Vec::new();
    for name in DEV_NODES {
        let st = nix::sys::stat::fstatat(&host, *name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
            .map_err(|e| fail("cannot read", &Path::new("/dev").join(name), e.into()))?;
        if st.st_mode & libc::S_IFMT != libc::S_IFCHR {
            return Err(Refused::new(P, format!("`/dev/{name}` is not a character device")));
        }
        nodes.push((*name, st.st_rdev, st.st_mode & 0o777));
    }
    let initial = std::fs::read_to_string("/proc/self/uid_map")
        .is_ok_and(|m| m.split_whitespace().collect::<Vec<_>>() == ["0", "0", "4294967295"]);
    let make = initial && nix::unistd::geteuid().is_root();
    let clones = if make {
        Vec::new()
    } else {
        DEV_NODES.iter().map(|n| clone_at(&host, n)).collect::<Result<_, _>>()?
    };
    Ok(DevNodes { host, nodes, make, clones })
}

/// Builds the private `/dev` at `target` (see the module docs).
fn private_dev(target: &Path, dev: &DevNodes) -> Result<(), Refused> {
    mount_point(target, true)?;
    // Device nodes made here work only on a tmpfs that allows them; the
    // command can make none (no capability, and it is read-only by then).
    let nodev = if dev.make { MsFlags::empty() } else { MsFlags::MS_NODEV };
    nix::mount::mount(
        Some("tmpfs"),
        target,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC | nodev,
        Some("mode=755"),
    )
    .map_err(|e| fail("cannot mount a tmpfs on", target, e.into()))?;
    for (i, (name, rdev, mode)) in dev.nodes.iter().enumerate() {
        let node = target.join(name);
        let made = dev.make
            && nix::sys::stat::mknod(
                &node,
                nix::sys::stat::SFlag::S_IFCHR,
                nix::sys::stat::Mode::from_bits_truncate(*mode),
                *rdev,
            )
            .is_ok()
            // The mode without the umask.
            && std::fs::set_permissions(&node, std::os::unix::fs::PermissionsExt::from_mode(*mode)).is_ok();
        if made {
            continue;
        }
        // A bind of the host's node: the only mounts where device nodes
        // work, never set-uid, never run. Root whose mknod was refused (a
        // device controller, say) clones it now and lifts the `nodev` the
        // whole tree has by then.
        let late;
        let (tree, clear) = match dev.clones.get(i) {
            Some(tree) => (tree, 0),
            None => {
                let _ = std::fs::remove_file(&node);
                late = clone_at(&dev.host, name)?;
                (&late, libc::MOUNT_ATTR_NODEV)
            }
        };
        mount_point(&node, false)?;
        attach(tree, &node)?;
        set_attrs(&node, libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NOEXEC, clear, false)?;
    }
    let pts = target.join("pts");
    mount_point(&pts, true)?;
    nix::mount::mount(
        Some("devpts"),
        &pts,
        Some("devpts"),
        MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=620"),
    )
    .map_err(|e| fail("cannot mount a devpts on", &pts, e.into()))?;
    let links = [
        ("ptmx", "pts/ptmx"),
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ];
    for (name, to) in links {
        let link = target.join(name);
        std::os::unix::fs::symlink(to, &link).map_err(|e| fail("cannot create", &link, e))?;
    }
    Ok(())
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

/// What phase 1 prepared for one op.
enum Prepared {
    Nothing,
    Tree(OwnedFd),
    Nodes(DevNodes),
    /// An overlay's lower layer and a clone of its upper and work's parent.
    Layers(OwnedFd, OwnedFd),
}

/// Id-maps a detached tree through `userns`: a file that belongs to uid or
/// gid 0 on disk is seen as that namespace's 0 (the command), and what the
/// command creates is stored as 0.
fn id_map(tree: &OwnedFd, userns: BorrowedFd<'_>, path: &Path) -> Result<(), Refused> {
    let flags = libc::AT_EMPTY_PATH | libc::AT_RECURSIVE;
    let r = sys::ns::mount_setattr(Some(tree.as_fd()), c"", flags, libc::MOUNT_ATTR_IDMAP, 0, Some(userns));
    if let Err(e) = r {
        return Err(Refused::new(
            "unprivileged uid",
            format!(
                "cannot id-map `{}` (its file system may not support id-mapped mounts): {e}",
                path.display()
            ),
        ));
    }
    Ok(())
}

/// Applies `ops` (already ordered parents first) in this mount namespace.
/// With `userns`, writable binds are id-mapped through it (see [`id_map`]).
pub fn build(ops: &[MountOp], userns: Option<BorrowedFd<'_>>) -> Result<(), Refused> {
    make_private()?;
    let mut prepared: Vec<Prepared> = Vec::with_capacity(ops.len());
    for op in ops {
        prepared.push(match op {
            MountOp::Bind { source, writable, mapped, .. } => {
                let tree = clone_tree(source)?;
                if let (true, Some(ns)) = (*writable || *mapped, userns) {
                    id_map(&tree, ns, source)?;
                }
                Prepared::Tree(tree)
            }
            MountOp::HideFile { .. } => Prepared::Tree(clone_tree(Path::new("/dev/null"))?),
            // The lower layer is opened now, while a later step may still
            // hide the path it lives under.
            MountOp::Overlay { lower, upper, .. } => match (userns, upper.parent()) {
                (Some(ns), Some(layer)) => {
                    let mapped = clone_tree(lower)?;
                    id_map(&mapped, ns, lower)?;
                    Prepared::Layers(mapped, clone_tree(layer)?)
                }
                _ => Prepared::Tree(open_path(lower)?),
            },
            MountOp::Dev { .. } => Prepared::Nodes(dev_nodes()?),
            MountOp::Tmpfs { .. } => Prepared::Nothing,
        });
    }
    set_attrs(Path::new("/"), libc::MOUNT_ATTR_RDONLY | LOCKED_DOWN, 0, true)?;
    for (op, prep) in ops.iter().zip(&prepared) {
        match (op, prep) {
            (MountOp::Tmpfs { target, mode, .. }, _) => {
                mount_point(target, true)?;
                tmpfs(target, *mode)?
            }
            (MountOp::Dev { target }, Prepared::Nodes(nodes)) => private_dev(target, nodes)?,
            (MountOp::Bind { target, writable, .. }, Prepared::Tree(tree)) => {
                mount_point(target, is_dir(tree))?;
                attach(tree, target)?;
                let ro = if *writable { 0 } else { libc::MOUNT_ATTR_RDONLY };
                set_attrs(target, ro | LOCKED_DOWN, 0, true)?;
            }
            (MountOp::HideFile { target }, Prepared::Tree(tree)) => match attach(tree, target) {
                Ok(()) => set_attrs(
                    target,
                    libc::MOUNT_ATTR_RDONLY | LOCKED_DOWN | libc::MOUNT_ATTR_NOEXEC,
                    0,
                    false,
                )?,
                // A file gone since the layout was made (a host socket
                // whose server stopped) has nothing left to hide.
                Err(_) if std::fs::symlink_metadata(target).is_err() => {}
                Err(e) => return Err(e),
            },
            // Placed last, below, once the run's writable layers are bound.
            (MountOp::Overlay { .. }, _) => {}
            _ => return Err(Refused::new(P, "internal: a mount without what it was prepared from")),
        }
    }
    for (op, prep) in ops.iter().zip(&prepared) {
        match (op, prep, userns) {
            (MountOp::Overlay { upper, work, target, userxattr, .. }, Prepared::Tree(lower), _) => {
                mount_point(target, true)?;
                overlay(lower, upper, work, target, *userxattr)?;
            }
            (MountOp::Overlay { target, .. }, Prepared::Layers(lower, layer), Some(_)) => {
                overlay_mapped(lower, layer, target)?;
            }
            _ => {}
        }
    }
    for op in ops {
        match op {
            MountOp::Tmpfs { target, writable: false, .. } | MountOp::Dev { target } => {
                set_read_only(target, true, false)?
            }
            _ => {}
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
