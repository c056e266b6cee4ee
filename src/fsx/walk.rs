//! The one recursive directory walk: every tree runws reads, copies, seals,
//! scans or sweeps is walked here (removing a tree, which must empty each
//! directory before it goes, is [`Dir::remove_tree`]'s own).
//!
//! The walk starts at an open [`Dir`] and never resolves a path again: each
//! directory is listed through its own descriptor, each entry is looked at
//! with `fstatat(AT_SYMLINK_NOFOLLOW)` relative to it, and a subdirectory is
//! opened with `openat(O_NOFOLLOW | O_DIRECTORY)` from it. A symlink is
//! reported as a symlink and never entered; a directory swapped for a
//! symlink between the look and the open fails the open (reported as a
//! [`Failure::Open`]) instead of being followed, so what was opened is
//! always inside the tree. The depth is bounded (each level holds one
//! descriptor open), a directory on another mount is entered or not as the
//! caller chose, and the visitor decides, entry by entry, whether to
//! descend. Every failure names the path it happened at.

use std::ffi::OsStr;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat, fstatat, major, minor};

use super::{Dir, Mount, kind, mount_of};
use crate::error::{Error, IoContext, Result};

/// Directory levels below the root a walk opens unless told otherwise:
/// each level holds one descriptor, and this stays well inside the usual
/// limit of 1024.
pub const DEFAULT_MAX_DEPTH: usize = 800;

/// In which order a directory's entries are visited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// By the bytes of their names: the same tree always walks the same way.
    Sorted,
    /// As the file system lists them (cheaper; for walks whose result does
    /// not depend on order).
    AsListed,
}

/// What the walk does at a directory on another mount than its parent's
/// (another device, or a bind mount of the same file system).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mounts {
    /// Enters it like any directory.
    Cross,
    /// Visits the mount point itself but never enters it (`find -xdev`).
    Stay,
}

/// The visitor's answer for one entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Visit {
    /// Enter this entry when it is a directory (ignored for anything else).
    Descend,
    /// Do not enter it: its subtree is skipped.
    Skip,
}

/// What an entry is, as `lstat` saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    /// Never followed.
    Symlink,
    /// A fifo, socket or device.
    Special,
    /// Listed, but gone by the time it was looked at.
    Gone,
}

/// One entry the walk found.
pub struct Entry<'a> {
    /// The open directory that holds it: act on the entry relative to this.
    pub dir: &'a Dir,
    pub name: &'a OsStr,
    /// Its path below the root (`a/b/name`).
    pub rel: &'a Path,
    /// 1 for an entry of the root itself.
    pub depth: usize,
    /// Its `lstat`; `None` when it is [`Kind::Gone`].
    pub stat: Option<FileStat>,
}

impl Entry<'_> {
    pub fn kind(&self) -> Kind {
        match self.stat.as_ref().map(kind) {
            None => Kind::Gone,
            Some(SFlag::S_IFREG) => Kind::File,
            Some(SFlag::S_IFDIR) => Kind::Dir,
            Some(SFlag::S_IFLNK) => Kind::Symlink,
            Some(_) => Kind::Special,
        }
    }

    /// Its path as shown: the root's path joined with [`Entry::rel`].
    pub fn path(&self) -> PathBuf {
        self.dir.join(self.name)
    }
}

/// Something the walk could not do; each names the path.
#[derive(Debug)]
pub enum Failure {
    /// A directory could not be listed.
    List { path: PathBuf, error: Error },
    /// An entry could not be looked at.
    Stat { path: PathBuf, errno: Errno },
    /// A directory the look saw could not be opened. `ELOOP` or `ENOTDIR`:
    /// it was replaced (by a symlink, say) since, and is not followed;
    /// `ENOENT`: it is gone.
    Open { path: PathBuf, errno: Errno },
    /// A directory deeper than the walk's bound, which it does not enter.
    TooDeep { path: PathBuf, limit: usize },
}

impl Failure {
    pub fn path(&self) -> &Path {
        match self {
            Failure::List { path, .. }
            | Failure::Stat { path, .. }
            | Failure::Open { path, .. }
            | Failure::TooDeep { path, .. } => path,
        }
    }

    /// The error a walk that stops here reports.
    pub fn into_error(self) -> Error {
        match self {
            Failure::List { error, .. } => error,
            Failure::Stat { path, errno } => Error::io("cannot stat", path, errno.into()),
            Failure::Open { path, errno: Errno::ELOOP | Errno::ENOTDIR } => Error::Symlink { path },
            Failure::Open { path, errno } => Error::io("cannot open directory", path, errno.into()),
            Failure::TooDeep { path, limit } => Error::Other(format!(
                "`{}` is nested more than {limit} levels deep",
                crate::shown::path(&path)
            )),
        }
    }
}

/// Sees each entry of a walk, in walk order (a directory before what it
/// holds).
pub trait Visitor {
    type Error: From<Error>;
    /// Called once per entry; the answer says whether to enter it.
    fn entry(&mut self, entry: &Entry<'_>) -> std::result::Result<Visit, Self::Error>;
    /// Called when the walk cannot go on at one place; `Ok` carries on
    /// with the rest of the tree. By default the walk stops with the
    /// failure's error.
    fn failed(&mut self, failure: Failure) -> std::result::Result<(), Self::Error> {
        Err(failure.into_error().into())
    }
}

/// A closure as a [`Visitor`] that stops at the first failure.
struct FailFast<F>(F);

impl<E: From<Error>, F: FnMut(&Entry<'_>) -> std::result::Result<Visit, E>> Visitor for FailFast<F> {
    type Error = E;
    fn entry(&mut self, entry: &Entry<'_>) -> std::result::Result<Visit, E> {
        (self.0)(entry)
    }
}

/// Two closures as a [`Visitor`]: one for the entries, one for the failures.
struct Handled<F, G>(F, G);

impl<E, F, G> Visitor for Handled<F, G>
where
    E: From<Error>,
    F: FnMut(&Entry<'_>) -> std::result::Result<Visit, E>,
    G: FnMut(Failure) -> std::result::Result<(), E>,
{
    type Error = E;
    fn entry(&mut self, entry: &Entry<'_>) -> std::result::Result<Visit, E> {
        (self.0)(entry)
    }
    fn failed(&mut self, failure: Failure) -> std::result::Result<(), E> {
        (self.1)(failure)
    }
}

/// How to walk: order, depth bound and mounts.
#[derive(Clone, Copy, Debug)]
pub struct Walk {
    order: Order,
    max_depth: usize,
    mounts: Mounts,
}

impl Default for Walk {
    fn default() -> Walk {
        Walk::new()
    }
}

/// One directory being walked: where it is, and (when mounts matter)
/// which mount it is on.
struct Level<'a> {
    dir: &'a Dir,
    depth: usize,
    mount: Option<Mount>,
}

impl Walk {
    /// Sorted, [`DEFAULT_MAX_DEPTH`] levels, crossing mounts.
    pub fn new() -> Walk {
        Walk { order: Order::Sorted, max_depth: DEFAULT_MAX_DEPTH, mounts: Mounts::Cross }
    }

    pub fn order(mut self, order: Order) -> Walk {
        self.order = order;
        self
    }

    /// The deepest directory entered, in levels below the root (its own
    /// entries are level 1): entries are seen down to `levels + 1`.
    pub fn max_depth(mut self, levels: usize) -> Walk {
        self.max_depth = levels;
        self
    }

    pub fn mounts(mut self, mounts: Mounts) -> Walk {
        self.mounts = mounts;
        self
    }

    /// Walks everything below `root` with a closure that stops the walk at
    /// the first failure.
    pub fn run<E: From<Error>>(
        &self,
        root: &Dir,
        visit: impl FnMut(&Entry<'_>) -> std::result::Result<Visit, E>,
    ) -> std::result::Result<(), E> {
        self.run_with(root, &mut FailFast(visit))
    }

    /// Walks everything below `root` with a closure for the entries and
    /// one for the failures (see [`Visitor::failed`]).
    pub fn run_or<E: From<Error>>(
        &self,
        root: &Dir,
        visit: impl FnMut(&Entry<'_>) -> std::result::Result<Visit, E>,
        failed: impl FnMut(Failure) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        self.run_with(root, &mut Handled(visit, failed))
    }

    /// Walks everything below `root`.
    pub fn run_with<V: Visitor>(&self, root: &Dir, v: &mut V) -> std::result::Result<(), V::Error> {
        let mut rel = PathBuf::new();
        let level = self.level(root, 0, v)?;
        match level {
            Some(level) => self.walk_dir(&level, &mut rel, v),
            None => Ok(()),
        }
    }

    /// Walks only the entries `names` of `root`, in this order (a name that
    /// is not there is visited as [`Kind::Gone`]), and below them.
    pub fn run_names<V: Visitor>(
        &self,
        root: &Dir,
        names: &[&OsStr],
        v: &mut V,
    ) -> std::result::Result<(), V::Error> {
        let mut rel = PathBuf::new();
        let Some(level) = self.level(root, 0, v)? else { return Ok(()) };
        for name in names {
            self.visit(&level, name, &mut rel, v)?;
        }
        Ok(())
    }

    /// Sets up the walk of `dir`; `None` when a failure was passed over.
    fn level<'a, V: Visitor>(
        &self,
        dir: &'a Dir,
        depth: usize,
        v: &mut V,
    ) -> std::result::Result<Option<Level<'a>>, V::Error> {
        let mount = match self.mounts {
            Mounts::Cross => None,
            Mounts::Stay => match mount_of(dir.borrow()) {
                Ok(m) => Some(m),
                Err(e) => {
                    let errno = Errno::from_raw(e.raw_os_error().unwrap_or(nix::libc::EIO));
                    v.failed(Failure::Stat { path: dir.path().to_path_buf(), errno })?;
                    return Ok(None);
                }
            },
        };
        Ok(Some(Level { dir, depth, mount }))
    }

    fn walk_dir<V: Visitor>(
        &self,
        level: &Level<'_>,
        rel: &mut PathBuf,
        v: &mut V,
    ) -> std::result::Result<(), V::Error> {
        let mut names = match level.dir.entries_raw() {
            Ok(names) => names,
            Err(error) => return v.failed(Failure::List { path: level.dir.path().to_path_buf(), error }),
        };
        if self.order == Order::Sorted {
            names.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        }
        for (name, _) in &names {
            self.visit(level, name, rel, v)?;
        }
        Ok(())
    }

    /// Looks at `name` in `level`, asks the visitor, and enters it when
    /// asked to and allowed. `rel` names it meanwhile, and is given back as
    /// it came on every way out but an error, which ends the walk.
    fn visit<V: Visitor>(
        &self,
        level: &Level<'_>,
        name: &OsStr,
        rel: &mut PathBuf,
        v: &mut V,
    ) -> std::result::Result<(), V::Error> {
        rel.push(name);
        let result = 'visit: {
            let dir = level.dir;
            let stat = match fstatat(dir.borrow(), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(st) => Some(st),
                Err(Errno::ENOENT) => None,
                Err(errno) => break 'visit v.failed(Failure::Stat { path: dir.join(name), errno }),
            };
            let depth = level.depth + 1;
            let entry = Entry { dir, name, rel, depth, stat };
            if v.entry(&entry)? == Visit::Skip || entry.kind() != Kind::Dir {
                break 'visit Ok(());
            }
            if depth > self.max_depth {
                break 'visit v.failed(Failure::TooDeep { path: dir.join(name), limit: self.max_depth });
            }
            if let (Some(parent), Some(st)) = (&level.mount, &stat)
                && (major(st.st_dev) as u32, minor(st.st_dev) as u32) != parent.dev
            {
                // Another device: a mount point, told without opening it.
                break 'visit Ok(());
            }
            let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
            let sub = match openat(dir.borrow(), name, flags, Mode::empty()) {
                Ok(fd) => Dir { fd, path: dir.join(name) },
                Err(errno) => break 'visit v.failed(Failure::Open { path: dir.join(name), errno }),
            };
            let Some(sub_level) = self.level(&sub, depth, v)? else { break 'visit Ok(()) };
            if let (Some(parent), Some(here)) = (&level.mount, &sub_level.mount)
                && here.differs_from(parent, sub.path())
            {
                break 'visit Ok(());
            }
            self.walk_dir(&sub_level, rel, v)
        };
        rel.pop();
        result
    }
}

/// What a path someone named is, opened once with symlinks followed: a
/// directory to walk, or anything else with its `stat`.
pub enum Named {
    Dir(Dir),
    Other(FileStat),
}

/// Opens `path`, a path the user named (a symlink in it is followed),
/// without blocking on a fifo: a directory comes back ready to walk.
pub fn open_named(path: &Path) -> Result<Named> {
    let fd = nix::fcntl::open(path, OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK, Mode::empty())
        .ctx("cannot open", path)?;
    let st = fstat(fd.as_fd()).ctx("cannot stat", path)?;
    if kind(&st) == SFlag::S_IFDIR {
        return Ok(Named::Dir(Dir { fd, path: path.to_path_buf() }));
    }
    Ok(Named::Other(st))
}

/// The names below `root` a walk visits, for tests: `rel` of each, in order.
#[cfg(test)]
fn names_below(walk: &Walk, root: &Dir) -> Vec<(String, Kind)> {
    let mut seen = Vec::new();
    walk.run(root, |e| {
        seen.push((e.rel.to_string_lossy().into_owned(), e.kind()));
        Ok::<_, Error>(Visit::Descend)
    })
    .unwrap();
    seen
}

#[cfg(test)]
mod tests;
