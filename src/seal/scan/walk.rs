//! Scanning files and trees on disk.
//!
//! A run's directory is written by the command it ran, so the walk trusts
//! nothing inside it: below the paths it is given it never follows a
//! symlink (a link to `~/.ssh` is not the run's to scan, and the archive
//! records links as links anyway), opens every entry relative to its parent
//! directory's descriptor with `O_NOFOLLOW`, and reads only regular files.
//! Files are scanned on as many threads as there are cores; the result is
//! sorted, so it does not depend on scheduling.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, sync_channel};
use std::sync::{Mutex, PoisonError};

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, OFlag, fcntl, openat};
use nix::sys::stat::{Mode, SFlag, fstat};

use super::{Finding, Scanner};
use crate::error::{Error, IoContext, Result};
use crate::fsx::kind;

/// Bytes read from a file per `feed`.
const READ_CHUNK: usize = 256 * 1024;

/// A regular file opened by the walk, with the path findings name it by.
struct Job {
    path: PathBuf,
    file: File,
}

/// Scans the files at `paths`, and every regular file below the directories
/// among them, with the built-in rules. The paths themselves are taken as
/// named (a symlink given here is followed); nothing below them is. Findings
/// come sorted by path, line, rule and redaction.
pub fn scan_paths(paths: &[PathBuf]) -> Result<Vec<Finding>> {
    let scanner = Scanner::new();
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(16);
    // A bound on queued jobs is a bound on open descriptors.
    let (tx, rx) = sync_channel::<Job>(threads * 4);
    let rx = Mutex::new(rx);
    let (walked, scanned) = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads).map(|_| s.spawn(|| work(&scanner, &rx))).collect();
        let walked = paths
            .iter()
            .try_for_each(|p| walk_root(p, &mut |job| tx.send(job).is_ok()));
        drop(tx);
        let scanned: Vec<_> = workers.into_iter().map(|w| w.join()).collect();
        (walked, scanned)
    });
    walked?;
    let mut findings = Vec::new();
    for result in scanned {
        match result {
            Ok(r) => findings.extend(r?),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
    findings.sort_by(|a, b| {
        (a.path.as_bytes(), a.line, a.rule, &a.redacted).cmp(&(
            b.path.as_bytes(),
            b.line,
            b.rule,
            &b.redacted,
        ))
    });
    Ok(findings)
}

/// A worker: scans jobs until the walk is over. After an error it keeps
/// taking jobs, without reading them, so the walk never waits on a full queue
/// no one empties.
fn work(scanner: &Scanner, rx: &Mutex<Receiver<Job>>) -> Result<Vec<Finding>> {
    let mut findings = Vec::new();
    let mut failed = None;
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        let job = rx.lock().unwrap_or_else(PoisonError::into_inner).recv();
        let Ok(Job { path, file }) = job else { break };
        if failed.is_some() {
            continue;
        }
        match scan_file(scanner, &path, file, &mut buf) {
            Ok(found) => findings.extend(found),
            Err(e) => failed = Some(e),
        }
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(findings),
    }
}

fn scan_file(scanner: &Scanner, path: &Path, mut file: File, buf: &mut [u8]) -> Result<Vec<Finding>> {
    let mut scan = scanner.file(&path.to_string_lossy());
    loop {
        match file.read(buf) {
            Ok(0) => return Ok(scan.finish()),
            Ok(n) => scan.feed(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io("cannot read", path, e)),
        }
    }
}

/// Hands every regular file at or below `root` to `send`; stops early when
/// `send` says no one is listening any more.
fn walk_root(root: &Path, send: &mut dyn FnMut(Job) -> bool) -> Result<()> {
    let fd = nix::fcntl::open(
        root,
        OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK,
        Mode::empty(),
    )
    .ctx("cannot open", root)?;
    let st = fstat(fd.as_fd()).ctx("cannot stat", root)?;
    match kind(&st) {
        SFlag::S_IFDIR => walk_dir(&fd, root, send).map(|_| ()),
        SFlag::S_IFREG => {
            let file = blocking(fd, root)?;
            send(Job {
                path: root.to_path_buf(),
                file,
            });
            Ok(())
        }
        _ => Err(Error::SpecialFile {
            path: root.to_path_buf(),
        }),
    }
}

/// Walks the open directory `dir`, named `path`, in name order; returns
/// false once `send` refuses.
fn walk_dir(dir: &OwnedFd, path: &Path, send: &mut dyn FnMut(Job) -> bool) -> Result<bool> {
    for name in list(dir, path)? {
        let child = path.join(&name);
        match open_entry(dir.as_fd(), &name) {
            Ok(Entry::Dir(fd)) => {
                if !walk_dir(&fd, &child, send)? {
                    return Ok(false);
                }
            }
            Ok(Entry::File(fd)) => {
                let file = blocking(fd, &child)?;
                if !send(Job { path: child, file }) {
                    return Ok(false);
                }
            }
            // A symlink, a socket, a fifo, a device: not file contents; or an
            // entry that went away since the listing.
            Ok(Entry::Other) | Err(Errno::ENOENT) => {}
            Err(e) => return Err(Error::io("cannot open", &child, e.into())),
        }
    }
    Ok(true)
}

enum Entry {
    Dir(OwnedFd),
    File(OwnedFd),
    Other,
}

/// Opens `name` in `dir` without following a symlink and without blocking
/// on a fifo, and says what it is.
fn open_entry(dir: BorrowedFd<'_>, name: &OsStr) -> nix::Result<Entry> {
    let fd = match openat(
        dir,
        name,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        // O_NOFOLLOW on a symlink; O_PATH-less opens of sockets fail with ENXIO.
        Err(Errno::ELOOP | Errno::ENXIO) => return Ok(Entry::Other),
        Err(e) => return Err(e),
    };
    let st = fstat(fd.as_fd())?;
    Ok(match kind(&st) {
        SFlag::S_IFDIR => Entry::Dir(fd),
        SFlag::S_IFREG => Entry::File(fd),
        _ => Entry::Other,
    })
}

/// The names in the directory open as `dir`, sorted, without `.` and `..`.
fn list(dir: &OwnedFd, path: &Path) -> Result<Vec<OsString>> {
    // std lists a directory only by path; reading it through the descriptor
    // we hold keeps the listing and the opens on the same directory even if
    // `path` is swapped for a symlink meanwhile.
    let by_fd = PathBuf::from(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(dir)));
    let source = if by_fd.exists() { by_fd } else { path.to_path_buf() };
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&source).ctx("cannot list", path)? {
        names.push(entry.ctx("cannot list", path)?.file_name());
    }
    names.sort();
    Ok(names)
}

/// Turns an opened regular file back to blocking reads (`O_NONBLOCK` only
/// guarded the open against a planted fifo).
fn blocking(fd: OwnedFd, path: &Path) -> Result<File> {
    fcntl(fd.as_fd(), FcntlArg::F_SETFL(OFlag::empty())).ctx("cannot open", path)?;
    Ok(File::from(fd))
}
