//! The walk of a pack: every entry of the run reached relative to an open
//! directory without following a symlink ([`crate::fsx::walk`]), checked
//! against the budgets, the never-packed list and the symlink rule, and
//! appended to the tar stream with each file's bytes read exactly once,
//! into the compressor's input, and shown there to the inspector.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat, readlinkat};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat, fstatat};

use super::compress::{Compressor, Format};
use super::exclude::is_never_packed_name;
use super::links;
use crate::error::{Error, IoContext, Result};
use crate::fsx::walk::{Entry, Failure, Kind, Visit, Visitor, Walk};
use crate::fsx::{self, Dir};
use crate::shown;

/// What to pack and the limits that make a pack fail.
#[derive(Clone, Debug)]
pub struct PackOptions {
    pub format: Format,
    /// Most bytes of file content packed.
    pub max_bytes: u64,
    /// Most entries (files, directories and symlinks) packed.
    pub max_files: u64,
    /// The pack fails once this instant has passed.
    pub deadline: Option<Instant>,
    /// Top-level names to pack, in this order (e.g. `manifest.json`,
    /// `inputs`, `outputs`, `work`, `logs`); absent ones are skipped.
    pub include: Vec<String>,
    /// Sync the archive and its directory before it is reported: off only
    /// for an archive staged on its way to a store that keeps it durable.
    pub durable: bool,
}

/// Sees every packed file's bytes during the one read the pack makes.
/// Calls come in order: `begin_file`, any number of `chunk`, `end_file`.
/// A failed pack may stop between `begin_file` and `end_file`.
pub trait Inspector {
    fn begin_file(&mut self, rel: &str);
    fn chunk(&mut self, data: &[u8]);
    fn end_file(&mut self);
}

/// An inspector that looks at nothing, for quarantine packs.
pub struct NoInspection;

impl Inspector for NoInspection {
    fn begin_file(&mut self, _rel: &str) {}
    fn chunk(&mut self, _data: &[u8]) {}
    fn end_file(&mut self) {}
}

/// Bytes read from a file, and handed to the inspector, at a time.
const CHUNK: usize = 1 << 20;
/// Directory nesting beyond which the seal gives up rather than hold more
/// descriptors open.
const MAX_DEPTH: u64 = 256;

pub(super) struct Packer<'a> {
    pub root: &'a Dir,
    pub opts: &'a PackOptions,
    pub inspector: &'a mut dyn Inspector,
    pub tar: tar::Builder<Compressor>,
    pub tmp_path: &'a Path,
    pub files: u64,
    pub bytes: u64,
    pub entries: u64,
    pub excluded: Vec<String>,
    pub progress: &'a crate::progress::Progress,
}

impl Packer<'_> {
    /// Packs the top-level `names` of the run directory, in this order, and
    /// everything below them.
    pub fn pack(&mut self, names: &[&OsStr]) -> Result<()> {
        let root = self.root;
        Walk::new().max_depth(MAX_DEPTH as usize).run_names(root, names, self)
    }
}

impl Visitor for Packer<'_> {
    type Error = Error;

    fn entry(&mut self, entry: &Entry<'_>) -> Result<Visit> {
        let rel_path = entry.rel;
        let root = self.root;
        let shown = || root.join(rel_path);
        if self.opts.deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(Error::PackDeadline { path: shown() });
        }
        let parent = rel_path.parent().and_then(Path::file_name).map(OsStr::to_string_lossy);
        if is_never_packed_name(parent.as_deref(), &entry.name.to_string_lossy()) {
            self.excluded.push(shown::os(rel_path.as_os_str()));
            return Ok(Visit::Skip);
        }
        let st = match (entry.kind(), entry.stat) {
            // An include that is absent is simply not packed.
            (Kind::Gone, _) if entry.depth == 1 => return Ok(Visit::Skip),
            (Kind::Gone, _) | (_, None) => return Err(Error::PackChanged { path: shown() }),
            (Kind::Special, _) => return Err(Error::SpecialFile { path: shown() }),
            (_, Some(st)) => st,
        };
        let kind = fsx::kind(&st);
        self.entries += 1;
        if self.entries > self.opts.max_files {
            return Err(Error::PackBudget {
                path: shown(),
                what: "entries",
                limit: self.opts.max_files,
                raise: Some("--max-files"),
            });
        }
        let mut header = header_for(&st, kind);
        let dir = entry.dir.borrow();
        if kind == SFlag::S_IFLNK {
            let target = readlinkat(dir, entry.name).ctx("cannot read symlink", shown())?;
            let root_fd = root.borrow();
            let parent_bytes = rel_path.parent().map_or(&[][..], |p| p.as_os_str().as_bytes());
            let parent: Vec<Vec<u8>> = links::components(parent_bytes).map(<[u8]>::to_vec).collect();
            let inside = links::stays_inside(&parent, target.as_bytes(), |p| {
                read_link_below(root_fd, &links::join(p))
            });
            if !inside {
                return Err(Error::LinkEscapes { path: shown(), target: shown::os(&target) });
            }
            self.tar.append_link(&mut header, rel_path, &target).ctx("cannot write", self.tmp_path)?;
            return Ok(Visit::Skip);
        }
        if kind == SFlag::S_IFDIR {
            if entry.depth as u64 > MAX_DEPTH {
                return Err(Error::PackBudget {
                    path: shown(),
                    what: "directory levels",
                    limit: MAX_DEPTH,
                    raise: None,
                });
            }
            // A trailing slash marks a directory entry, as GNU tar writes it.
            let mut dir_entry = rel_path.as_os_str().as_bytes().to_vec();
            dir_entry.push(b'/');
            self.tar
                .append_data(&mut header, OsStr::from_bytes(&dir_entry), io::empty())
                .ctx("cannot write", self.tmp_path)?;
            return Ok(Visit::Descend);
        }
        self.pack_file(dir, entry.name, &mut header, rel_path)?;
        Ok(Visit::Skip)
    }

    /// A directory that is no longer the one seen (replaced, or gone) means
    /// the run changed under the seal.
    fn failed(&mut self, failure: Failure) -> Result<()> {
        Err(match failure {
            Failure::Open { path, errno } => changed_or_io(errno, path),
            other => other.into_error(),
        })
    }
}

impl Packer<'_> {
    fn pack_file(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &OsStr,
        header: &mut tar::Header,
        rel_path: &Path,
    ) -> Result<()> {
        let path = self.root.join(rel_path);
        // O_NONBLOCK keeps a fifo swapped in after the stat from blocking the
        // open; it changes nothing for the regular file checked just below.
        let fd = open_below(dir, name, OFlag::O_NONBLOCK).map_err(|e| changed_or_io(e, path.clone()))?;
        let st = fstat(fd.as_fd()).ctx("cannot stat", &path)?;
        if fsx::kind(&st) != SFlag::S_IFREG {
            return Err(Error::PackChanged { path });
        }
        let size = st.st_size.max(0) as u64;
        if self.bytes.saturating_add(size) > self.opts.max_bytes {
            return Err(Error::PackBudget {
                path,
                what: "bytes of file content",
                limit: self.opts.max_bytes,
                raise: Some("--max-bytes"),
            });
        }
        header.set_size(size);
        // Findings name the file escaped: one line, and every byte told apart.
        let rel = shown::os(rel_path.as_os_str());
        self.inspector.begin_file(&rel);
        // The builder writes the header (and a GNU long-name entry before it
        // when the path needs one); the content is read, a megabyte at most at
        // a time, straight into the compressor's input (see `Compressor::room`)
        // and shown to the inspector there, so no byte is copied between
        // reading and compressing.
        self.tar.append_data(header, rel_path, io::empty()).ctx("cannot write", self.tmp_path)?;
        let mut file = File::from(fd);
        let mut left = size;
        while left > 0 {
            if self.opts.deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(Error::PackDeadline { path });
            }
            let want = CHUNK.min(usize::try_from(left).unwrap_or(usize::MAX));
            let room = self.tar.get_mut().room(want).ctx("cannot write", self.tmp_path)?;
            let n = loop {
                match file.read(room) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(Error::io("cannot read", &path, e)),
                }
            };
            if n == 0 {
                return Err(Error::PackChanged { path });
            }
            self.inspector.chunk(&room[..n]);
            self.tar.get_mut().commit(n).ctx("cannot write", self.tmp_path)?;
            left -= n as u64;
        }
        // Entries are padded to whole 512-byte blocks, as `tar::Builder` does.
        let pad = (512 - size % 512) % 512;
        self.tar.get_mut().write_all(&[0u8; 512][..pad as usize]).ctx("cannot write", self.tmp_path)?;
        // A file still growing would be packed cut short; say so instead.
        let mut probe = [0u8; 1];
        if file.read(&mut probe).ctx("cannot read", &path)? != 0 {
            return Err(Error::PackChanged { path });
        }
        self.inspector.end_file();
        self.files += 1;
        self.bytes += size;
        self.progress.add(1, size);
        Ok(())
    }
}

fn header_for(st: &FileStat, kind: SFlag) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(match kind {
        SFlag::S_IFDIR => tar::EntryType::Directory,
        SFlag::S_IFLNK => tar::EntryType::Symlink,
        _ => tar::EntryType::Regular,
    });
    header.set_size(0);
    header.set_mode(if kind == SFlag::S_IFLNK { 0o777 } else { st.st_mode & 0o777 });
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(st.st_mtime.max(0) as u64);
    header
}

fn open_below(dir: BorrowedFd<'_>, name: &OsStr, extra: OFlag) -> nix::Result<OwnedFd> {
    openat(dir, name, OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | extra, Mode::empty())
}

/// What used to be a file or directory is now a symlink, a different type,
/// or gone: the run changed under the seal.
fn changed_or_io(e: Errno, path: PathBuf) -> Error {
    match e {
        Errno::ELOOP | Errno::ENOTDIR | Errno::ENOENT | Errno::ENXIO => Error::PackChanged { path },
        e => Error::io("cannot open", path, e.into()),
    }
}

/// The target of the symlink at `rel` below `root`, if one is there.
/// `links::stays_inside` expands symlinks before descending, so the
/// directories on the way are real ones.
fn read_link_below(root: BorrowedFd<'_>, rel: &[u8]) -> Option<Vec<u8>> {
    let rel = OsStr::from_bytes(rel);
    let st = fstatat(root, rel, AtFlags::AT_SYMLINK_NOFOLLOW).ok()?;
    if fsx::kind(&st) != SFlag::S_IFLNK {
        return None;
    }
    // A link that cannot be read is treated as leading nowhere safe.
    Some(readlinkat(root, rel).map_or_else(|_| b"/".to_vec(), |t| t.as_bytes().to_vec()))
}
