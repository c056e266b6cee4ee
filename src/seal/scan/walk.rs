//! Scanning files and trees on disk.
//!
//! A run's directory is written by the command it ran, so the walk trusts
//! nothing inside it: below the paths it is given it never follows a
//! symlink (a link to `~/.ssh` is not the run's to scan, and the archive
//! records links as links anyway) and reads only regular files. The walk
//! ([`crate::fsx::walk`]) lists each directory through its open descriptor
//! and looks at every entry relative to it without following links; the
//! scan then opens each
//! file it found with `O_NOFOLLOW` and checks it is the very inode the walk
//! saw, so a directory swapped for a symlink in between is caught rather
//! than followed. Files are scanned on as many threads as there are cores;
//! the result is sorted, so it does not depend on scheduling.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat};

use super::{Allowance, DeepScan, Finding, LIMITS, Scanner, Unscanned};
use crate::error::{Error, IoContext, Result};
use crate::fsx::kind;
use crate::fsx::walk::{self, Entry, Failure, Named, Visit, Visitor, Walk};

/// Bytes read from a file per `feed`.
const READ_CHUNK: usize = 256 * 1024;

/// A regular file the walk found: where it is and which inode it was.
struct Job {
    path: PathBuf,
    dev: u64,
    ino: u64,
    /// Only a path the caller named may be a symlink.
    follow: bool,
}

impl Job {
    fn new(path: PathBuf, st: &FileStat, follow: bool) -> Job {
        Job { path, dev: st.st_dev, ino: st.st_ino, follow }
    }
}

/// What a scan of files on disk found, and what it could not look inside.
#[derive(Debug, Default)]
pub struct Report {
    /// Sorted by path, line, rule and redaction.
    pub findings: Vec<Finding>,
    /// Compressed files and archive members not scanned, sorted by path.
    pub unscanned: Vec<Unscanned>,
}

/// Scans the files at `paths`, and every regular file below the directories
/// among them, with the built-in rules, looking inside compressed files and
/// archives within [`LIMITS`]. The paths themselves are taken as named (a
/// symlink given here is followed); nothing below them is.
pub fn scan_paths(paths: &[PathBuf]) -> Result<Report> {
    let mut jobs = Vec::new();
    for path in paths {
        walk_root(path, &mut jobs)?;
    }
    let scanner = Scanner::new();
    let allowance = Allowance::new(&LIMITS);
    let threads =
        std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 16).min(jobs.len().max(1));
    let next = AtomicUsize::new(0);
    let outcomes = std::thread::scope(|s| {
        let workers: Vec<_> =
            (0..threads).map(|_| s.spawn(|| work(&scanner, &allowance, &jobs, &next))).collect();
        workers.into_iter().map(|w| w.join()).collect::<Vec<_>>()
    });
    let mut findings = Vec::new();
    let mut unscanned = Vec::new();
    let mut first_error: Option<(usize, Error)> = None;
    for outcome in outcomes {
        let ((found, skipped), error) = outcome.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        findings.extend(found);
        unscanned.extend(skipped);
        if let Some((i, e)) = error
            && first_error.as_ref().is_none_or(|(j, _)| i < *j)
        {
            first_error = Some((i, e));
        }
    }
    // The error of the first file in walk order, whichever thread met it.
    if let Some((_, e)) = first_error {
        return Err(e);
    }
    findings.sort_by(|a, b| {
        (a.path.as_bytes(), a.line, a.rule, &a.redacted).cmp(&(
            b.path.as_bytes(),
            b.line,
            b.rule,
            &b.redacted,
        ))
    });
    unscanned.sort_by(|a, b| (a.path.as_bytes(), &a.why).cmp(&(b.path.as_bytes(), &b.why)));
    Ok(Report { findings, unscanned })
}

type Found = (Vec<Finding>, Vec<Unscanned>);

/// A worker: takes the next job until none are left; stops at its first
/// error and reports it with the job's index.
fn work(
    scanner: &Scanner,
    allowance: &Allowance,
    jobs: &[Job],
    next: &AtomicUsize,
) -> (Found, Option<(usize, Error)>) {
    let mut found: Found = (Vec::new(), Vec::new());
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(job) = jobs.get(i) else {
            return (found, None);
        };
        match scan_job(scanner, allowance, job, &mut buf) {
            Ok((f, u)) => {
                found.0.extend(f);
                found.1.extend(u);
            }
            Err(e) => return (found, Some((i, e))),
        }
    }
}

fn scan_job(scanner: &Scanner, allowance: &Allowance, job: &Job, buf: &mut [u8]) -> Result<Found> {
    let mut flags = OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
    if !job.follow {
        flags |= OFlag::O_NOFOLLOW;
    }
    let fd = match nix::fcntl::open(&job.path, flags, Mode::empty()) {
        Ok(fd) => fd,
        // Removed since the walk: nothing left to scan.
        Err(Errno::ENOENT) => return Ok((Vec::new(), Vec::new())),
        Err(Errno::ELOOP) => {
            return Err(Error::Symlink { path: job.path.clone() });
        }
        Err(e) => return Err(Error::io("cannot open", &job.path, e.into())),
    };
    let st = fstat(fd.as_fd()).ctx("cannot stat", &job.path)?;
    if (st.st_dev, st.st_ino) != (job.dev, job.ino) || kind(&st) != SFlag::S_IFREG {
        return Err(Error::Other(format!(
            "`{}` was replaced while it was being scanned; refusing to scan what it now points at",
            job.path.display()
        )));
    }
    let mut file = blocking(fd, &job.path)?;
    let mut scan = DeepScan::new(scanner, &LIMITS, allowance, &crate::shown::path(&job.path));
    loop {
        match file.read(buf) {
            Ok(0) => return Ok(scan.finish()),
            Ok(n) => scan.feed(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io("cannot read", &job.path, e)),
        }
    }
}

/// Adds `root` (a regular file, or every regular file below a directory) to
/// `jobs`, in name order.
fn walk_root(root: &Path, jobs: &mut Vec<Job>) -> Result<()> {
    match walk::open_named(root)? {
        Named::Dir(dir) => Walk::new().run_with(&dir, &mut Jobs(jobs)),
        Named::Other(st) if kind(&st) == SFlag::S_IFREG => {
            jobs.push(Job::new(root.to_path_buf(), &st, true));
            Ok(())
        }
        Named::Other(_) => Err(Error::SpecialFile { path: root.to_path_buf() }),
    }
}

/// Collects the regular files of a walk as jobs.
struct Jobs<'a>(&'a mut Vec<Job>);

impl Visitor for Jobs<'_> {
    type Error = Error;

    fn entry(&mut self, entry: &Entry<'_>) -> Result<Visit> {
        match (entry.kind(), &entry.stat) {
            (walk::Kind::Dir, _) => return Ok(Visit::Descend),
            (walk::Kind::File, Some(st)) => self.0.push(Job::new(entry.path(), st, false)),
            // A symlink, a socket, a fifo, a device: not file contents;
            // or gone since the listing.
            _ => {}
        }
        Ok(Visit::Skip)
    }

    fn failed(&mut self, failure: Failure) -> Result<()> {
        match failure {
            // Gone since the `stat`.
            Failure::Open { errno: Errno::ENOENT, .. } => Ok(()),
            // Swapped for a symlink since the `stat`.
            Failure::Open { path, errno: Errno::ELOOP | Errno::ENOTDIR } => Err(Error::Symlink { path }),
            other => Err(other.into_error()),
        }
    }
}

/// Turns an opened regular file back to blocking reads (`O_NONBLOCK` only
/// guarded the open against a planted fifo).
fn blocking(fd: OwnedFd, path: &Path) -> Result<File> {
    fcntl(fd.as_fd(), FcntlArg::F_SETFL(OFlag::empty())).ctx("cannot open", path)?;
    Ok(File::from(fd))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_replaced_after_the_walk_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("outputs");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("a.txt"), "one\n").unwrap();
        let mut jobs = Vec::new();
        walk_root(tmp.path(), &mut jobs).unwrap();
        assert_eq!(jobs.len(), 1);

        let scanner = Scanner::new();
        let allowance = Allowance::new(&LIMITS);
        let mut buf = vec![0; 64];
        assert_eq!(scan_job(&scanner, &allowance, &jobs[0], &mut buf).unwrap(), (vec![], vec![]));

        // The directory becomes a symlink to a look-alike tree elsewhere.
        let elsewhere = tmp.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("a.txt"), "one\n").unwrap();
        std::fs::rename(&dir, tmp.path().join("moved")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &dir).unwrap();
        assert!(matches!(scan_job(&scanner, &allowance, &jobs[0], &mut buf), Err(Error::Other(_))));
    }
}
