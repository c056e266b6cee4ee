//! Reading an overlay's upper layer back as a list of changes.
//!
//! Everything the command changed under a layered mount is in that layer's
//! upper directory: a new or copied-up file or directory, or a whiteout (a
//! character device 0:0) where something was deleted. Each entry is compared
//! with the lower layer (the real mount, reached through a descriptor so the
//! walk never leaves it) to tell created from changed, and what changed. A
//! file copied up only because it was opened for writing or touched is
//! reported as changed with `times`: the tool reached for it.

use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use nix::fcntl::{AtFlags, OFlag};
use nix::libc;
use nix::sys::stat::{FileStat, Mode, fstatat};

use super::Change;
use crate::error::Result;
use crate::fsx::Dir;
use crate::fsx::walk::{Entry, Order, Visit, Walk};

fn kind_of_mode(mode: u32) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFREG => "file",
        libc::S_IFDIR => "dir",
        libc::S_IFLNK => "symlink",
        _ => "other",
    }
}

fn lower_stat(lower: &OwnedFd, rel: &Path) -> Option<FileStat> {
    fstatat(lower.as_fd(), rel, AtFlags::AT_SYMLINK_NOFOLLOW).ok()
}

fn opaque(path: &Path) -> bool {
    ["trusted.overlay.opaque", "user.overlay.opaque"].iter().any(|name| {
        let mut v = [0u8; 2];
        let r = rustix::fs::lgetxattr(path, *name, &mut v[..]);
        r == Ok(1) && v[0] == b'y'
    })
}

/// True when both opened and hold the same bytes.
fn same_files(a: io::Result<std::fs::File>, b: io::Result<std::fs::File>) -> bool {
    match (a, b) {
        (Ok(a), Ok(b)) => same_bytes(a, b).unwrap_or(false),
        _ => false,
    }
}

fn same_bytes(mut a: impl Read, mut b: impl Read) -> io::Result<bool> {
    let mut x = vec![0u8; 64 * 1024];
    let mut y = vec![0u8; 64 * 1024];
    loop {
        let n = a.read(&mut x)?;
        if n == 0 {
            return Ok(b.read(&mut y[..1])? == 0);
        }
        let mut got = 0;
        while got < n {
            let m = b.read(&mut y[got..n])?;
            if m == 0 {
                return Ok(false);
            }
            got += m;
        }
        if x[..n] != y[..n] {
            return Ok(false);
        }
    }
}

fn open_lower(lower: &OwnedFd, rel: &Path) -> io::Result<std::fs::File> {
    let fd = nix::fcntl::openat(
        lower.as_fd(),
        rel,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK,
        Mode::empty(),
    )?;
    Ok(std::fs::File::from(fd))
}

/// What differs between an upper entry and the lower one it replaced.
fn differences(up: &FileStat, upper_path: &Path, low: &FileStat, lower: &OwnedFd, rel: &Path) -> Vec<String> {
    let mut what = Vec::new();
    if up.st_mode & libc::S_IFMT != low.st_mode & libc::S_IFMT {
        what.push("type".to_string());
        return what;
    }
    let up_kind = up.st_mode & libc::S_IFMT;
    let content = if up_kind == libc::S_IFREG {
        up.st_size != low.st_size || !same_files(std::fs::File::open(upper_path), open_lower(lower, rel))
    } else if up_kind == libc::S_IFLNK {
        let target = nix::fcntl::readlinkat(lower.as_fd(), rel).ok();
        std::fs::read_link(upper_path).ok().map(|t| t.into_os_string()) != target
    } else {
        false
    };
    if content {
        what.push("content".into());
    }
    if up.st_mode & 0o7777 != low.st_mode & 0o7777 && up_kind != libc::S_IFLNK {
        what.push("mode".into());
    }
    if up.st_uid != low.st_uid || up.st_gid != low.st_gid {
        what.push("owner".into());
    }
    what
}

/// Adds the changes recorded in `upper` (a layer over `mount_point`, whose
/// real contents are reachable through `lower`) to `out`, in name order.
pub fn walk(upper: &Path, lower: &OwnedFd, mount_point: &Path, out: &mut Vec<Change>) -> Result<()> {
    let top = Dir::open(upper)?;
    Walk::new().run(&top, |e| {
        let Some(up) = e.stat else { return Ok(Visit::Skip) };
        let r = e.rel;
        let upper_path = e.path();
        let low = lower_stat(lower, r);
        let path = mp_join(mount_point, r);
        let change = |change: &str, kind: &str, what: Vec<String>| Change {
            path: path.clone(),
            change: change.into(),
            kind: kind.into(),
            what,
        };
        let up_kind = up.st_mode & libc::S_IFMT;
        if up_kind == libc::S_IFCHR && up.st_rdev == 0 {
            let kind = low.map(|l| kind_of_mode(l.st_mode)).unwrap_or("file");
            out.push(change("deleted", kind, Vec::new()));
            return Ok(Visit::Skip);
        }
        let kind = kind_of_mode(up.st_mode);
        match low {
            None => out.push(change("created", kind, Vec::new())),
            Some(l) if up_kind == libc::S_IFDIR && l.st_mode & libc::S_IFMT == libc::S_IFDIR => {
                let mut what = Vec::new();
                if opaque(&upper_path) {
                    what.push("replaced".to_string());
                }
                if up.st_mode & 0o7777 != l.st_mode & 0o7777 {
                    what.push("mode".into());
                }
                if up.st_uid != l.st_uid || up.st_gid != l.st_gid {
                    what.push("owner".into());
                }
                // A directory copied up only because something inside it
                // changed is not itself a change.
                if !what.is_empty() {
                    out.push(change("changed", kind, what));
                }
            }
            Some(l) => {
                let mut what = differences(&up, &upper_path, &l, lower, r);
                if what.is_empty() {
                    what.push("times".into());
                }
                out.push(change("changed", kind, what));
            }
        }
        Ok(Visit::Descend)
    })
}

fn mp_join(mount_point: &Path, rel: &Path) -> String {
    mount_point.join(rel).display().to_string()
}

/// A single-file mount's private copy against the original.
pub fn compare_file(copy: &Path, original: &Path) -> Option<Change> {
    let same = same_files(std::fs::File::open(copy), std::fs::File::open(original));
    (!same).then(|| Change {
        path: original.display().to_string(),
        change: "changed".into(),
        kind: "file".into(),
        what: vec!["content".into()],
    })
}

/// Entries made or removed directly in a skeleton directory (see
/// `Staged::layer_dir`): everything in `target` and not in `real` was
/// created (with all it holds); the reverse was deleted.
pub fn compare_skeleton(target: &Path, real: &Path, out: &mut Vec<Change>) {
    let names = |d: &Path| -> Vec<std::ffi::OsString> {
        let listed = Dir::open(d).and_then(|d| d.entries_raw()).unwrap_or_default();
        listed.into_iter().map(|(name, _)| name).collect()
    };
    let (made, had) = (names(target), names(real));
    for n in &made {
        if !had.contains(n) {
            created_tree(&target.join(n), &real.join(n), out);
        }
    }
    for n in had.iter().filter(|n| !made.contains(n)) {
        let kind = std::fs::symlink_metadata(real.join(n)).map(|m| kind_of_mode(m.mode())).unwrap_or("file");
        out.push(Change {
            path: real.join(n).display().to_string(),
            change: "deleted".into(),
            kind: kind.into(),
            what: Vec::new(),
        });
    }
}

/// Reports `staged` (an entry the command made in a skeleton, shown as
/// `shown`) and everything below it as created.
fn created_tree(staged: &Path, shown: &Path, out: &mut Vec<Change>) {
    let created = |path: &Path, mode: u32| Change {
        path: path.display().to_string(),
        change: "created".into(),
        kind: kind_of_mode(mode).into(),
        what: Vec::new(),
    };
    let Ok(meta) = std::fs::symlink_metadata(staged) else { return };
    out.push(created(shown, meta.mode()));
    if !meta.is_dir() {
        return;
    }
    let Ok(dir) = Dir::open(staged) else { return };
    // What cannot be read is left out, as it always was.
    let visit = |e: &Entry<'_>| {
        let Some(st) = &e.stat else { return Ok(Visit::Skip) };
        out.push(created(&shown.join(e.rel), st.st_mode));
        Ok(Visit::Descend)
    };
    let _: Result<()> = Walk::new().order(Order::AsListed).run_or(&dir, visit, |_| Ok(()));
}
