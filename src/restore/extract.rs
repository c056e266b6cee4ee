//! The entry loop of a restore: each tar entry checked and created by hand,
//! relative to open directories, never through a symlink.
//!
//! The staging directory is new and private, so everything in it was put
//! there by this loop, which keeps a map of what it made. Parents are
//! checked against that map (a symlink on the way is refused, not followed)
//! and then opened one component at a time with `O_NOFOLLOW`; files are
//! created with `O_EXCL`. Symlink targets are resolved against the map when
//! they are made and once more when the whole archive is in, since a later
//! entry can change where an earlier link leads.
//!
//! Every file's bytes go through the secret scan as they are written, and
//! the loop holds the archive to its budgets: bytes of file content (checked
//! against each file's declared size before the file is created), entries
//! (each tar entry and each directory made only as a parent counts), and the
//! decompressed stream itself, which may run only a little past what the
//! entries need (see [`Capped`]), so neither the disk nor memory fills.

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use nix::fcntl::{AtFlags, OFlag, openat};
use nix::sys::stat::{FchmodatFlags, Mode, UtimensatFlags, fchmod, fchmodat, futimens, mkdirat, utimensat};
use nix::sys::time::TimeSpec;
use nix::unistd::{linkat, symlinkat};

use super::Limits;
use crate::error::{Error, IoContext, Result};
use crate::seal::links;
use crate::seal::scan::{Allowance, DeepScan, Finding, LIMITS, Scanner, Unscanned};

/// Bytes copied from the archive to a file at a time.
const CHUNK: usize = 1 << 20;
/// Decompressed bytes allowed between one entry's data and the next entry:
/// its padding, the next header, and long names, long link targets and
/// extended headers, which tar reads into memory whole. A sealed archive
/// needs a few kilobytes at most.
const HEADER_ALLOWANCE: u64 = 64 << 10;
/// Decompressed bytes allowed after the last entry: the end-of-archive
/// blocks and the padding to a record, which tools make up to 1 MiB.
const TAIL_ALLOWANCE: u64 = 1 << 20;
/// Tar's block: entry data is padded to a multiple of it.
const BLOCK: u64 = 512;

/// What the loop made at one path (components joined with `/`).
enum Node {
    /// `explicit`: the archive had an entry for it; otherwise it was made
    /// as the parent of a later entry, and one directory entry may follow.
    Dir {
        explicit: bool,
    },
    File,
    Symlink(Vec<u8>),
}

/// A staging directory, fully extracted and checked.
pub(super) struct Extracted {
    pub files: u64,
    pub bytes: u64,
    /// What the scan found in the files, in archive order.
    pub findings: Vec<Finding>,
    /// What the scan could not look inside (compressed members past a
    /// budget, formats it does not open).
    pub unscanned: Vec<Unscanned>,
    root: OwnedFd,
    /// Directories with their archived mode and mtime (none for those made
    /// only as parents), parents first.
    dirs: Vec<(Vec<u8>, u32, Option<u64>)>,
}

impl Extracted {
    /// Gives directories their archived modes and times. Runs last, since a
    /// read-only directory would have refused its own entries.
    pub fn apply_dir_modes(&self) -> Result<()> {
        for (rel, mode, mtime) in self.dirs.iter().rev() {
            let path = OsStr::from_bytes(rel);
            if let Some(mtime) = mtime {
                let t = TimeSpec::new(*mtime as i64, 0);
                utimensat(self.root.as_fd(), path, &t, &t, UtimensatFlags::NoFollowSymlink)
                    .ctx("cannot set the time of", Path::new(path))?;
            }
            fchmodat(self.root.as_fd(), path, Mode::from_bits_truncate(*mode), FchmodatFlags::FollowSymlink)
                .ctx("cannot set the mode of", Path::new(path))?;
        }
        Ok(())
    }

    /// Makes every directory writable again so the staging directory can be
    /// removed after a late failure.
    pub fn reopen_dirs(&self) {
        for (rel, _, _) in &self.dirs {
            let path = OsStr::from_bytes(rel);
            let _ = fchmodat(
                self.root.as_fd(),
                path,
                Mode::from_bits_truncate(0o700),
                FchmodatFlags::FollowSymlink,
            );
        }
    }
}

/// How far the decompressed stream may be read, and how far it was.
struct Cap {
    read: Cell<u64>,
    limit: Cell<u64>,
    /// The allowance the limit was last set with, for the refusal.
    allowance: Cell<u64>,
    passed: Cell<bool>,
}

impl Cap {
    /// Lets the stream go `data` bytes (rounded up to a block) and then
    /// `allowance` more past where it is now.
    fn allow(&self, data: u64, allowance: u64) {
        let data = data.div_ceil(BLOCK).saturating_mul(BLOCK);
        self.limit.set(self.read.get().saturating_add(data).saturating_add(allowance));
        self.allowance.set(allowance);
    }
}

/// The decompressed stream, cut off past the limit its [`Cap`] sets: a
/// small compressed archive can expand to any size, and before it yields an
/// entry tar reads that entry's long names and extended headers into memory
/// whole, however large their headers say they are.
pub(crate) struct Capped<R> {
    inner: R,
    cap: Rc<Cap>,
}

impl<R> Capped<R> {
    /// `inner` cut off past `limit` bytes, whatever it holds: for a reader
    /// of one entry, which sets no allowance per entry.
    pub(crate) fn at_most(inner: R, limit: u64) -> Capped<R> {
        let cap = Cap {
            read: Cell::new(0),
            limit: Cell::new(limit),
            allowance: Cell::new(0),
            passed: Cell::new(false),
        };
        Capped { inner, cap: Rc::new(cap) }
    }
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let room = self.cap.limit.get().saturating_sub(self.cap.read.get());
        if room == 0 {
            // At the limit: the end of the stream is fine, one byte more is not.
            let mut probe = [0u8; 1];
            if self.inner.read(&mut probe)? == 0 {
                return Ok(0);
            }
            self.cap.passed.set(true);
            return Err(io::Error::other("the decompressed archive runs past its budget"));
        }
        let take = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..take])?;
        self.cap.read.set(self.cap.read.get() + n as u64);
        Ok(n)
    }
}

/// Extracts the decompressed tar stream `stream` into the empty directory
/// `dest`, within `limits`, scanning every file's bytes.
pub(super) fn extract(stream: impl Read, dest: &Path, archive: &Path, limits: Limits) -> Result<Extracted> {
    let root = openat(
        nix::fcntl::AT_FDCWD,
        dest,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .ctx("cannot open", dest)?;
    let read_err = |e: io::Error| Error::io("cannot read archive", archive, e);
    let cap = Rc::new(Cap {
        read: Cell::new(0),
        limit: Cell::new(0),
        allowance: Cell::new(0),
        passed: Cell::new(false),
    });
    cap.allow(0, HEADER_ALLOWANCE);
    let mut tar = tar::Archive::new(Capped { inner: stream, cap: cap.clone() });
    let mut loop_ = Loop {
        archive,
        limits,
        root,
        nodes: HashMap::new(),
        dirs: Vec::new(),
        entries: 0,
        files: 0,
        bytes: 0,
        buf: vec![0; CHUNK],
        scanner: Scanner::new(),
        allowance: Allowance::new(&LIMITS),
        findings: Vec::new(),
        unscanned: Vec::new(),
        last: Vec::new(),
        progress: crate::progress::Progress::start(
            format!("restoring `{}`", crate::shown::path(archive)),
            "files",
            None,
        ),
    };
    let done = (|| -> Result<()> {
        for entry in tar.entries().map_err(read_err)? {
            let mut entry = entry.map_err(read_err)?;
            loop_.last = entry.path_bytes().into_owned();
            // This entry's data (only a file's is read, and only within the
            // byte budget), then the next entry's headers.
            let data = match entry.header().entry_type() {
                tar::EntryType::Regular => entry.size().min(limits.max_bytes.saturating_add(1)),
                _ => 0,
            };
            cap.allow(data, HEADER_ALLOWANCE);
            loop_.entry(&mut entry)?;
        }
        // Read the decompressed stream to its end so a corrupt tail is noticed.
        cap.allow(0, TAIL_ALLOWANCE);
        io::copy(&mut tar.into_inner(), &mut io::sink()).map_err(read_err)?;
        Ok(())
    })();
    match done {
        Err(_) if cap.passed.get() => {
            let why = format!(
                "is followed by more than {} bytes that are neither its data nor an entry",
                cap.allowance.get()
            );
            return Err(loop_.refuse(&loop_.last, why));
        }
        done => done?,
    }
    loop_.recheck_symlinks()?;
    let Loop { root, dirs, files, bytes, findings, unscanned, .. } = loop_;
    Ok(Extracted { files, bytes, findings, unscanned, root, dirs })
}

struct Loop<'a> {
    archive: &'a Path,
    limits: Limits,
    root: OwnedFd,
    nodes: HashMap<Vec<u8>, Node>,
    dirs: Vec<(Vec<u8>, u32, Option<u64>)>,
    /// Tar entries seen and directories made only as parents.
    entries: u64,
    files: u64,
    bytes: u64,
    buf: Vec<u8>,
    scanner: Scanner,
    allowance: Allowance,
    findings: Vec<Finding>,
    unscanned: Vec<Unscanned>,
    /// The name of the entry being extracted, for a refusal.
    last: Vec<u8>,
    progress: crate::progress::Progress,
}

impl Loop<'_> {
    fn refuse(&self, entry: &[u8], why: impl Into<String>) -> Error {
        Error::ArchiveRefused {
            archive: self.archive.to_path_buf(),
            entry: crate::shown::bytes(entry),
            why: why.into(),
        }
    }

    fn over_budget(&self, entry: &[u8], what: &'static str, limit: u64, option: &'static str) -> Error {
        Error::RestoreBudget {
            archive: self.archive.to_path_buf(),
            entry: crate::shown::bytes(entry),
            what,
            limit,
            option,
        }
    }

    /// Counts one more entry against `--max-files`.
    fn count(&mut self, entry: &[u8]) -> Result<()> {
        self.entries += 1;
        if self.entries > self.limits.max_files {
            return Err(self.over_budget(entry, "entries", self.limits.max_files, "--max-files"));
        }
        Ok(())
    }

    fn entry<R: Read>(&mut self, entry: &mut tar::Entry<'_, R>) -> Result<()> {
        let raw = entry.path_bytes().into_owned();
        self.count(&raw)?;
        let parts = self.parts(&raw, &raw, "name")?;
        let header = entry.header();
        let kind = header.entry_type();
        let mode = header.mode().map_err(|_| self.refuse(&raw, "has an unreadable mode"))?;
        if mode & 0o6000 != 0 {
            return Err(self.refuse(&raw, "has a setuid or setgid bit"));
        }
        let mtime = header.mtime().unwrap_or(0);
        let key = links::join(&parts);
        if parts.is_empty() {
            // `./` in archives made with `tar -C dir .`: the target itself.
            return match kind {
                tar::EntryType::Directory => Ok(()),
                _ => Err(self.refuse(&raw, "has an empty name")),
            };
        }
        match (self.nodes.get(&key), kind) {
            (None, _) => {}
            (Some(Node::Dir { explicit: false }), tar::EntryType::Directory) => {
                self.nodes.insert(key.clone(), Node::Dir { explicit: true });
                if let Some(record) = self.dirs.iter_mut().find(|r| r.0 == key) {
                    *record = (key, mode & 0o777, Some(mtime));
                }
                return Ok(());
            }
            (Some(_), _) => return Err(self.refuse(&raw, "appears twice")),
        }
        let (parent_parts, name) = parts.split_at(parts.len() - 1);
        let name = OsStr::from_bytes(&name[0]);
        let parent = self.parent_dir(&raw, parent_parts)?;
        let shown = || PathBuf::from(OsStr::from_bytes(&raw));
        match kind {
            tar::EntryType::Regular => {
                let size = entry.size();
                if self.bytes.saturating_add(size) > self.limits.max_bytes {
                    return Err(self.over_budget(
                        &raw,
                        "bytes of file content",
                        self.limits.max_bytes,
                        "--max-bytes",
                    ));
                }
                let fd = openat(
                    parent.as_fd(),
                    name,
                    OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                    Mode::from_bits_truncate(0o600),
                )
                .ctx("cannot create", shown())?;
                let mut file = File::from(fd);
                let mut scan =
                    DeepScan::new(&self.scanner, &LIMITS, &self.allowance, &crate::shown::bytes(&key));
                let written =
                    copy(entry, &mut file, &mut self.buf, &mut scan).ctx("cannot extract", shown())?;
                let (findings, unscanned) = scan.finish();
                self.findings.extend(findings);
                self.unscanned.extend(unscanned);
                fchmod(file.as_fd(), Mode::from_bits_truncate(mode & 0o777))
                    .ctx("cannot set the mode of", shown())?;
                let t = TimeSpec::new(mtime as i64, 0);
                futimens(file.as_fd(), &t, &t).ctx("cannot set the time of", shown())?;
                self.files += 1;
                self.bytes += written;
                self.progress.add(1, written);
                self.nodes.insert(key, Node::File);
            }
            tar::EntryType::Directory => {
                mkdirat(parent.as_fd(), name, Mode::from_bits_truncate(0o700))
                    .ctx("cannot create", shown())?;
                self.nodes.insert(key.clone(), Node::Dir { explicit: true });
                self.dirs.push((key, mode & 0o777, Some(mtime)));
            }
            tar::EntryType::Symlink => {
                let target = entry.link_name_bytes().map(|t| t.into_owned()).unwrap_or_default();
                if !self.stays_inside(parent_parts, &target) {
                    let shown_target = String::from_utf8_lossy(&target).into_owned();
                    return Err(
                        self.refuse(&raw, format!("is a symlink to `{shown_target}`, outside the target"))
                    );
                }
                symlinkat(OsStr::from_bytes(&target), parent.as_fd(), name).ctx("cannot create", shown())?;
                self.nodes.insert(key, Node::Symlink(target));
            }
            tar::EntryType::Link => {
                let target = entry.link_name_bytes().map(|t| t.into_owned()).unwrap_or_default();
                let target_parts = self.parts(&raw, &target, "hard link target")?;
                if target_parts.is_empty()
                    || !matches!(self.nodes.get(&links::join(&target_parts)), Some(Node::File))
                {
                    let shown_target = String::from_utf8_lossy(&target).into_owned();
                    return Err(self.refuse(
                        &raw,
                        format!("is a hard link to `{shown_target}`, not to a file extracted before it"),
                    ));
                }
                let (target_parent, target_name) = target_parts.split_at(target_parts.len() - 1);
                let from = self.parent_dir(&raw, target_parent)?;
                linkat(
                    from.as_fd(),
                    OsStr::from_bytes(&target_name[0]),
                    parent.as_fd(),
                    name,
                    AtFlags::empty(),
                )
                .ctx("cannot create", shown())?;
                self.files += 1;
                self.nodes.insert(key, Node::File);
            }
            tar::EntryType::Char | tar::EntryType::Block => {
                return Err(self.refuse(&raw, "is a device node"));
            }
            tar::EntryType::Fifo => return Err(self.refuse(&raw, "is a fifo")),
            other => {
                return Err(
                    self.refuse(&raw, format!("has the entry type {other:?}, not a file, directory or link"))
                );
            }
        }
        Ok(())
    }

    /// The components of `path` (a name or a hard link target); absolute
    /// paths and `..` are refused outright rather than normalised.
    fn parts(&self, entry: &[u8], path: &[u8], what: &str) -> Result<Vec<Vec<u8>>> {
        if path.starts_with(b"/") {
            return Err(self.refuse(entry, format!("has an absolute {what}")));
        }
        let parts: Vec<Vec<u8>> = links::components(path).map(<[u8]>::to_vec).collect();
        if parts.iter().any(|p| p == b"..") {
            return Err(self.refuse(entry, format!("has a `..` component in its {what}")));
        }
        Ok(parts)
    }

    /// Opens (making when missing) the directory `parts` below the root, one
    /// component at a time, refusing to pass through anything but a
    /// directory this loop made.
    fn parent_dir(&mut self, entry: &[u8], parts: &[Vec<u8>]) -> Result<OwnedFd> {
        let mut dir = self.root.try_clone().ctx("cannot open", self.archive)?;
        for depth in 1..=parts.len() {
            let key = links::join(&parts[..depth]);
            let here = PathBuf::from(OsStr::from_bytes(&key));
            match self.nodes.get(&key) {
                Some(Node::Dir { .. }) => {}
                Some(Node::Symlink(_)) => {
                    let shown = here.display().to_string();
                    return Err(self.refuse(entry, format!("passes through the symlink `{shown}`")));
                }
                Some(Node::File) => {
                    let shown = here.display().to_string();
                    return Err(self.refuse(entry, format!("lies below the file `{shown}`")));
                }
                None => {
                    self.count(entry)?;
                    let name = OsStr::from_bytes(&parts[depth - 1]);
                    mkdirat(dir.as_fd(), name, Mode::from_bits_truncate(0o700))
                        .ctx("cannot create", &here)?;
                    self.nodes.insert(key.clone(), Node::Dir { explicit: false });
                    self.dirs.push((key, 0o755, None));
                }
            }
            dir = openat(
                dir.as_fd(),
                OsStr::from_bytes(&parts[depth - 1]),
                OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .ctx("cannot open", &here)?;
        }
        Ok(dir)
    }

    fn stays_inside(&self, parent: &[Vec<u8>], target: &[u8]) -> bool {
        links::stays_inside(parent, target, |p| match self.nodes.get(&links::join(p)) {
            Some(Node::Symlink(t)) => Some(t.clone()),
            _ => None,
        })
    }

    fn recheck_symlinks(&self) -> Result<()> {
        for (key, node) in &self.nodes {
            if let Node::Symlink(target) = node {
                let parts: Vec<Vec<u8>> = links::components(key).map(<[u8]>::to_vec).collect();
                if !self.stays_inside(&parts[..parts.len() - 1], target) {
                    let shown_target = String::from_utf8_lossy(target).into_owned();
                    return Err(self.refuse(key, format!("is a symlink to `{shown_target}`, outside the target once every entry is in place")));
                }
            }
        }
        Ok(())
    }
}

/// Copies an entry's content through one large buffer, showing each chunk
/// to the scan.
fn copy(from: &mut impl Read, to: &mut File, buf: &mut [u8], scan: &mut DeepScan<'_>) -> io::Result<u64> {
    let mut total = 0;
    loop {
        let n = match from.read(buf) {
            Ok(0) => return Ok(total),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        scan.feed(&buf[..n]);
        to.write_all(&buf[..n])?;
        total += n as u64;
    }
}
