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
//!
//! Every call goes through a [`Kernel`], so the tests replay a layout
//! against a recording fake and check each mount and its flags.

use std::ffi::CString;
use std::io;
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::libc;
use nix::mount::MsFlags;
use rustix::mount::OpenTreeFlags;

use super::kernel::{Kernel, Mount, MountAttr};
use super::refused::Refused;

const P: &str = "read-only file system";

pub use crate::manifest::sandbox::MountOp;

fn cpath(p: &Path) -> Result<CString, Refused> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| Refused::new(P, format!("`{}` contains a NUL byte", p.display())))
}

fn fail(what: &str, path: &Path, e: io::Error) -> Refused {
    Refused::new(P, format!("{what} `{}`: {e}", path.display()))
}

/// Makes every mount in this namespace private, so nothing done here is
/// propagated to the host (or from it).
pub fn make_private<K: Kernel>(k: &K) -> Result<(), Refused> {
    let private =
        Mount { source: None, fstype: None, flags: MsFlags::MS_REC | MsFlags::MS_PRIVATE, data: None };
    k.mount(Path::new("/"), &private)
        .map_err(|e| Refused::new("mount namespace", format!("cannot make `/` private: {e}")))
}

/// A detached copy of the tree at `path` (with everything mounted beneath).
pub fn clone_tree<K: Kernel>(k: &K, path: &Path) -> Result<K::Fd, Refused> {
    let c = cpath(path)?;
    let flags =
        OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC | OpenTreeFlags::AT_RECURSIVE;
    k.open_tree(None, c.as_c_str(), flags).map_err(|e| fail("cannot clone", path, e.into()))
}

/// A detached copy of `name` under the directory `dir` (which may be
/// covered by a mount by now).
fn clone_at<K: Kernel>(k: &K, dir: &K::Fd, name: &str) -> Result<K::Fd, Refused> {
    let c = CString::new(name).map_err(|_| Refused::new(P, "a name with a NUL byte"))?;
    let flags = OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC;
    k.open_tree(Some(dir), c.as_c_str(), flags)
        .map_err(|e| fail("cannot clone", &Path::new("/dev").join(name), e.into()))
}

/// Attaches a detached tree at `target`.
pub fn attach<K: Kernel>(k: &K, tree: &K::Fd, target: &Path) -> Result<(), Refused> {
    let c = cpath(target)?;
    k.move_mount(tree, c.as_c_str()).map_err(|e| fail("cannot mount onto", target, e.into()))
}

/// Sets `set` and clears `clear` (`MOUNT_ATTR_*` bits) on the mount at
/// `path`, and on every mount beneath it when `recursive`.
pub fn set_attrs<K: Kernel>(
    k: &K,
    path: &Path,
    set: u64,
    clear: u64,
    recursive: bool,
) -> Result<(), Refused> {
    let c = cpath(path)?;
    let flags = if recursive { libc::AT_RECURSIVE } else { 0 };
    k.mount_setattr(None, &c, &MountAttr { flags, set, clear, userns: None })
        .map_err(|e| fail("cannot set the flags of", path, e))
}

/// Sets (or clears) `MOUNT_ATTR_RDONLY` on the mount at `path`, and on every
/// mount beneath it when `recursive`.
pub fn set_read_only<K: Kernel>(k: &K, path: &Path, read_only: bool, recursive: bool) -> Result<(), Refused> {
    let ro = libc::MOUNT_ATTR_RDONLY;
    if read_only { set_attrs(k, path, ro, 0, recursive) } else { set_attrs(k, path, 0, ro, recursive) }
}

/// `nosuid` and `nodev`: what every mount of the sandbox but its device
/// nodes carries.
const LOCKED_DOWN: u64 = libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV;

/// A tmpfs at `target` with root directory mode `mode`.
pub fn tmpfs<K: Kernel>(k: &K, target: &Path, mode: u32) -> Result<(), Refused> {
    let data = format!("mode={mode:o}");
    k.mount(target, &Mount::fs("tmpfs", MsFlags::MS_NOSUID | MsFlags::MS_NODEV, Some(&data)))
        .map_err(|e| fail("cannot mount a tmpfs on", target, e.into()))
}

fn open_path<K: Kernel>(k: &K, path: &Path) -> Result<K::Fd, Refused> {
    k.open_dir_path(path).map_err(|e| fail("cannot open", path, e.into()))
}

/// An overlay of `lower` (read-only) and the writable `upper` at `target`.
/// Paths go into the option string as descriptor paths, so a comma or colon
/// in a real path cannot change the options.
fn overlay<K: Kernel>(
    k: &K,
    lower: &K::Fd,
    upper: &Path,
    work: &Path,
    target: &Path,
    userxattr: bool,
) -> Result<(), Refused> {
    let (u, w) = (open_path(k, upper)?, open_path(k, work)?);
    let mut opts =
        format!("lowerdir={},upperdir={},workdir={}", k.fd_path(lower), k.fd_path(&u), k.fd_path(&w));
    if userxattr {
        opts.push_str(",userxattr");
    }
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    k.mount(target, &Mount::fs("overlay", flags, Some(&opts)))
        .map_err(|e| fail("cannot layer the cache onto", target, e.into()))
}

/// The overlay of [`overlay`] for a command that runs as an unprivileged
/// id. Overlayfs cannot itself be id-mapped, so its lower layer is:
/// `lower` is a detached, id-mapped clone of the cache (its root-owned
/// files are the command's own through it), and `layer` a detached,
/// writable clone of the directory holding `upper` and `work` (runws gave
/// `upper` to the unprivileged id). Copies up then keep the owner the
/// command sees, and what it creates belongs to it.
fn overlay_mapped<K: Kernel>(k: &K, lower: &K::Fd, layer: &K::Fd, target: &Path) -> Result<(), Refused> {
    let layer = k.fd_path(layer);
    let opts = format!("lowerdir={},upperdir={layer}/upper,workdir={layer}/work", k.fd_path(lower));
    mount_point(k, target, true)?;
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    k.mount(target, &Mount::fs("overlay", flags, Some(&opts)))
        .map_err(|e| fail("cannot layer the cache onto", target, e.into()))
}

/// A fresh procfs for the new PID namespace.
/// Read-only, as a whole: no host-wide knob (`/proc/sys`, `sysrq-trigger`,
/// `irq`, `bus`, `fs`) can be written, and one mount does it where binding
/// each knob read-only would take five.
pub fn proc_fs<K: Kernel>(k: &K) -> Result<(), Refused> {
    let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC | MsFlags::MS_RDONLY;
    k.mount(Path::new("/proc"), &Mount::fs("proc", flags, None))
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
pub fn mask_proc<K: Kernel>(k: &K) -> Result<(), Refused> {
    let protect = |e: Refused| Refused::new("masked /proc", e.why);
    for p in PROC_MASKED.iter().map(Path::new) {
        let Ok(is_dir) = k.lstat_is_dir(p) else { continue };
        if is_dir {
            tmpfs(k, p, 0o555).map_err(protect)?;
            set_read_only(k, p, true, false).map_err(protect)?;
        } else {
            hide_file(k, p).map_err(protect)?;
        }
    }
    Ok(())
}

/// Covers the file at `target` with an unopenable, read-only node (a
/// `nodev` bind of `/dev/null`).
fn hide_file<K: Kernel>(k: &K, target: &Path) -> Result<(), Refused> {
    attach(k, &clone_tree(k, Path::new("/dev/null"))?, target)?;
    set_attrs(k, target, libc::MOUNT_ATTR_RDONLY | LOCKED_DOWN | libc::MOUNT_ATTR_NOEXEC, 0, false)
}

/// The host device nodes a private `/dev` shows.
const DEV_NODES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

/// What a private `/dev` is made from, found while the host's `/dev` is
/// still visible: the host's `/dev` (a path descriptor, to clone a node
/// from once it is covered) and each node's device number and mode.
struct DevNodes<F> {
    host: F,
    nodes: Vec<(&'static str, u64, u32)>,
    /// Whether to make the nodes with `mknod` (root of the host's user
    /// namespace) instead of binding each (a mount apiece).
    make: bool,
    /// Without `make`: clones of the host's nodes, taken before every
    /// mount (those clones included, were they taken later) is `nodev`.
    clones: Vec<F>,
}

fn dev_nodes<K: Kernel>(k: &K) -> Result<DevNodes<K::Fd>, Refused> {
    let host = open_path(k, Path::new("/dev"))?;
    let mut nodes = Vec::new();
    for name in DEV_NODES {
        let (mode, rdev) = k
            .fstatat_nofollow(&host, name)
            .map_err(|e| fail("cannot read", &Path::new("/dev").join(name), e.into()))?;
        if mode & libc::S_IFMT != libc::S_IFCHR {
            return Err(Refused::new(P, format!("`/dev/{name}` is not a character device")));
        }
        nodes.push((*name, rdev, mode & 0o777));
    }
    let initial = k
        .read_file(Path::new("/proc/self/uid_map"))
        .is_ok_and(|m| m.split_whitespace().collect::<Vec<_>>() == ["0", "0", "4294967295"]);
    let make = initial && k.geteuid() == 0;
    let clones = if make {
        Vec::new()
    } else {
        DEV_NODES.iter().map(|n| clone_at(k, &host, n)).collect::<Result<_, _>>()?
    };
    Ok(DevNodes { host, nodes, make, clones })
}

/// Builds the private `/dev` at `target` (see the module docs).
fn private_dev<K: Kernel>(k: &K, target: &Path, dev: &DevNodes<K::Fd>) -> Result<(), Refused> {
    mount_point(k, target, true)?;
    // Device nodes made here work only on a tmpfs that allows them; the
    // command can make none (no capability, and it is read-only by then).
    let nodev = if dev.make { MsFlags::empty() } else { MsFlags::MS_NODEV };
    k.mount(target, &Mount::fs("tmpfs", MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC | nodev, Some("mode=755")))
        .map_err(|e| fail("cannot mount a tmpfs on", target, e.into()))?;
    for (i, (name, rdev, mode)) in dev.nodes.iter().enumerate() {
        let node = target.join(name);
        let made = dev.make
            && k.mknod_char(&node, *mode, *rdev).is_ok()
            // The mode without the umask.
            && k.chmod(&node, *mode).is_ok();
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
                let _ = k.remove_file(&node);
                late = clone_at(k, &dev.host, name)?;
                (&late, libc::MOUNT_ATTR_NODEV)
            }
        };
        mount_point(k, &node, false)?;
        attach(k, tree, &node)?;
        set_attrs(k, &node, libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NOEXEC, clear, false)?;
    }
    let pts = target.join("pts");
    mount_point(k, &pts, true)?;
    let data = Some("newinstance,ptmxmode=0666,mode=620");
    k.mount(&pts, &Mount::fs("devpts", MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC, data))
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
        k.symlink(to, &link).map_err(|e| fail("cannot create", &link, e))?;
    }
    Ok(())
}

/// Makes sure `target` exists as a directory (or, for a file tree, a file)
/// to mount onto. Missing components can only be created inside a tmpfs the
/// layout placed earlier; anywhere else the file system is read-only and
/// the error says so.
fn mount_point<K: Kernel>(k: &K, target: &Path, dir: bool) -> Result<(), Refused> {
    if k.lstat_is_dir(target).is_ok() {
        return Ok(());
    }
    let parent = target.parent().unwrap_or(Path::new("/"));
    k.create_dir_all(parent).map_err(|e| fail("cannot create the mount point", parent, e))?;
    let made = if dir { k.create_dir(target) } else { k.create_file(target) };
    made.map_err(|e| fail("cannot create the mount point", target, e))
}

fn is_dir<K: Kernel>(k: &K, tree: &K::Fd) -> bool {
    k.fstat_mode(tree).map(|m| m & libc::S_IFMT == libc::S_IFDIR).unwrap_or(true)
}

/// What phase 1 prepared for one op.
enum Prepared<F> {
    Nothing,
    Tree(F),
    Nodes(DevNodes<F>),
    /// An overlay's lower layer and a clone of its upper and work's parent.
    Layers(F, F),
}

/// Id-maps a detached tree through `userns`: a file that belongs to uid or
/// gid 0 on disk is seen as that namespace's 0 (the command), and what the
/// command creates is stored as 0.
fn id_map<K: Kernel>(k: &K, tree: &K::Fd, userns: BorrowedFd<'_>, path: &Path) -> Result<(), Refused> {
    let flags = libc::AT_EMPTY_PATH | libc::AT_RECURSIVE;
    let attr = MountAttr { flags, set: libc::MOUNT_ATTR_IDMAP, clear: 0, userns: Some(userns) };
    let r = k.mount_setattr(Some(tree), c"", &attr);
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
pub fn build<K: Kernel>(k: &K, ops: &[MountOp], userns: Option<BorrowedFd<'_>>) -> Result<(), Refused> {
    make_private(k)?;
    let mut prepared: Vec<Prepared<K::Fd>> = Vec::with_capacity(ops.len());
    for op in ops {
        prepared.push(match op {
            MountOp::Bind { source, writable, mapped, .. } => {
                let tree = clone_tree(k, source)?;
                if let (true, Some(ns)) = (*writable || *mapped, userns) {
                    id_map(k, &tree, ns, source)?;
                }
                Prepared::Tree(tree)
            }
            MountOp::HideFile { .. } => Prepared::Tree(clone_tree(k, Path::new("/dev/null"))?),
            // The lower layer is opened now, while a later step may still
            // hide the path it lives under.
            MountOp::Overlay { lower, upper, .. } => match (userns, upper.parent()) {
                (Some(ns), Some(layer)) => {
                    let mapped = clone_tree(k, lower)?;
                    id_map(k, &mapped, ns, lower)?;
                    Prepared::Layers(mapped, clone_tree(k, layer)?)
                }
                _ => Prepared::Tree(open_path(k, lower)?),
            },
            MountOp::Dev { .. } => Prepared::Nodes(dev_nodes(k)?),
            MountOp::Tmpfs { .. } => Prepared::Nothing,
        });
    }
    set_attrs(k, Path::new("/"), libc::MOUNT_ATTR_RDONLY | LOCKED_DOWN, 0, true)?;
    for (op, prep) in ops.iter().zip(&prepared) {
        match (op, prep) {
            (MountOp::Tmpfs { target, mode, .. }, _) => {
                mount_point(k, target, true)?;
                tmpfs(k, target, *mode)?
            }
            (MountOp::Dev { target }, Prepared::Nodes(nodes)) => private_dev(k, target, nodes)?,
            (MountOp::Bind { target, writable, .. }, Prepared::Tree(tree)) => {
                mount_point(k, target, is_dir(k, tree))?;
                attach(k, tree, target)?;
                let ro = if *writable { 0 } else { libc::MOUNT_ATTR_RDONLY };
                set_attrs(k, target, ro | LOCKED_DOWN, 0, true)?;
            }
            (MountOp::HideFile { target }, Prepared::Tree(tree)) => match attach(k, tree, target) {
                Ok(()) => set_attrs(
                    k,
                    target,
                    libc::MOUNT_ATTR_RDONLY | LOCKED_DOWN | libc::MOUNT_ATTR_NOEXEC,
                    0,
                    false,
                )?,
                // A file gone since the layout was made (a host socket
                // whose server stopped) has nothing left to hide.
                Err(_) if k.lstat_is_dir(target).is_err() => {}
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
                mount_point(k, target, true)?;
                overlay(k, lower, upper, work, target, *userxattr)?;
            }
            (MountOp::Overlay { target, .. }, Prepared::Layers(lower, layer), Some(_)) => {
                overlay_mapped(k, lower, layer, target)?;
            }
            _ => {}
        }
    }
    for op in ops {
        match op {
            MountOp::Tmpfs { target, writable: false, .. } | MountOp::Dev { target } => {
                set_read_only(k, target, true, false)?
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

#[cfg(test)]
mod tests;
