//! Packing a run directory into one compressed, checksummed tar archive.
//!
//! The archive either is complete or does not exist: it is written under a
//! temp name beside the destination, synced, and renamed into place with no
//! overwrite only when every entry made it in. Any budget overrun (bytes,
//! entries, deadline), special file, or symlink leading out of the run fails
//! the whole pack and removes the temp file (invariant 7).
//!
//! The walk never follows a symlink: every step is an `openat` or `fstatat`
//! relative to an open directory with `O_NOFOLLOW`, in byte-sorted order so
//! the same tree gives the same archive. Each file is read once; the same
//! buffer feeds the tar entry and the [`Inspector`] (the secret scanner), and
//! the compressed stream is hashed on its way to disk, so the archive is
//! never read back.
//!
//! Entries are relative (`manifest.json`, `outputs/x`), in GNU tar format
//! (long names use GNU extensions; GNU tar lists and extracts them).
//! Metadata is normalised so an archive does not carry the sealing host's
//! identity or privileges: uid and gid are 0 with no user or group names,
//! permissions keep only the `rwx` bits (no setuid, setgid or sticky), and
//! the modification time (whole seconds) is kept. A hard link in the run is
//! packed as a separate copy of the file. The archive file itself is
//! created `0600`: evidence is private until someone chooses to share it.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};
use std::time::Instant;

use nix::errno::Errno;
use nix::fcntl::{AtFlags, RenameFlags, renameat2};
use nix::sys::stat::fstatat;
use nix::unistd::{UnlinkatFlags, linkat, unlinkat};
use sha2::Digest;

use super::compress::Compressor;
pub use super::compress::Format;
use super::sink::HashingWriter;
use super::walk::Packer;
pub use super::walk::{Inspector, NoInspection, PackOptions};
use crate::error::{Error, IoContext, Result};
use crate::fsx::{self, Dir};

/// What a successful pack wrote.
#[derive(Clone, Debug)]
pub struct PackReport {
    /// Regular files packed.
    pub files: u64,
    /// Bytes of file content packed.
    pub bytes: u64,
    /// Paths left out because they are never packed (names only, relative).
    pub excluded: Vec<String>,
    pub archive_sha256: String,
    pub archive_path: PathBuf,
    pub archive_bytes: u64,
}

/// Packs the `include`d top-level entries of `src_run_dir` into the new file
/// `dst_archive`, which must not exist. On error nothing is left at
/// `dst_archive` or under a temp name.
pub fn pack(
    src_run_dir: &Path,
    dst_archive: &Path,
    opts: &PackOptions,
    inspector: &mut dyn Inspector,
) -> Result<PackReport> {
    let mut seen = std::collections::HashSet::new();
    for name in &opts.include {
        fsx::check_name(name)?;
        if !seen.insert(name) {
            return Err(Error::Usage(format!("`{name}` is included twice")));
        }
    }
    let (dst_dir, dst_name) = split_parent(dst_archive)?;
    let dst_dir = Dir::open(dst_dir)?;
    if exists(dst_dir.borrow(), dst_name, dst_archive)? {
        return Err(Error::ArchiveExists { path: dst_archive.to_path_buf() });
    }
    let root = Dir::open(src_run_dir)?;
    // Locked while this process writes it: `reap` removes one whose
    // writer died (see [`Dir::create_locked`]).
    let (tmp, file) = loop {
        let tmp = temp_name(dst_name);
        match dst_dir.create_locked(&tmp, 0o600) {
            Ok(f) => break (tmp, f),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::io("cannot create", dst_dir.join(&tmp), e)),
        }
    };
    let tmp_path = dst_dir.join(&tmp);

    let outcome = write_archive(&root, file, &tmp_path, opts, inspector)
        .and_then(|done| publish(&dst_dir, &tmp, dst_name, dst_archive, opts.durable).map(|()| done));
    let (mut report, sha, archive_bytes) = match outcome {
        Ok(done) => done,
        Err(e) => {
            let _ = dst_dir.unlink(&tmp);
            return Err(e);
        }
    };
    report.archive_sha256 = sha;
    report.archive_bytes = archive_bytes;
    report.archive_path = dst_archive.to_path_buf();
    Ok(report)
}

/// Writes `<archive>.sha256` atomically, in the format `sha256sum -c` reads
/// when run in the archive's directory.
pub fn write_sha256_file(archive: &Path, sha256_hex: &str) -> Result<()> {
    if sha256_hex.len() != 64 || !sha256_hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Err(Error::Other(format!("`{sha256_hex}` is not a lowercase sha256 hex digest")));
    }
    let (dir, name) = split_parent(archive)?;
    let name = fsx::os_to_str(name)?;
    // sha256sum escapes such names with a backslash syntax; archives never need them.
    if name.contains(['\n', '\\']) {
        return Err(Error::InvalidName {
            name: name.escape_debug().to_string(),
            why: "an archive name cannot hold a newline or `\\`",
        });
    }
    let line = format!("{sha256_hex}  {name}\n");
    Dir::open(dir)?.write_atomic(&format!("{name}.sha256"), line.as_bytes(), 0o644, true)
}

/// `<archive>.sha256`: where [`write_sha256_file`] writes.
pub fn sha256_path(archive: &Path) -> std::path::PathBuf {
    let mut name = archive.as_os_str().to_owned();
    name.push(".sha256");
    name.into()
}

pub(crate) fn split_parent(path: &Path) -> Result<(&Path, &OsStr)> {
    let name =
        path.file_name().ok_or_else(|| Error::Usage(format!("`{}` does not name a file", path.display())))?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Ok((parent, name))
}

fn exists(dir: BorrowedFd<'_>, name: &OsStr, path: &Path) -> Result<bool> {
    match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(_) => Ok(true),
        Err(Errno::ENOENT) => Ok(false),
        Err(e) => Err(Error::io("cannot stat", path, e.into())),
    }
}

/// True for the name of a seal's temp archive: `.NAME.PID.N.partial`.
pub fn is_partial_name(name: &[u8]) -> bool {
    let Some(rest) = name.strip_prefix(b".").and_then(|n| n.strip_suffix(b".partial")) else { return false };
    let mut parts = rest.rsplitn(3, |&b| b == b'.');
    let (Some(n), Some(pid), Some(_)) = (parts.next(), parts.next(), parts.next()) else { return false };
    let digits = |p: &[u8]| !p.is_empty() && p.iter().all(u8::is_ascii_digit);
    digits(pid) && digits(n)
}

fn temp_name(final_name: &OsStr) -> String {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let short: String = final_name.to_string_lossy().chars().take(64).collect();
    format!(".{short}.{}.{n}.partial", std::process::id())
}

/// Renames the finished temp file to its final name without replacing
/// anything that appeared there meanwhile, then makes the rename durable.
fn publish(dir: &Dir, tmp: &str, name: &OsStr, path: &Path, durable: bool) -> Result<()> {
    match renameat2(dir.borrow(), tmp, dir.borrow(), name, RenameFlags::RENAME_NOREPLACE) {
        Ok(()) => {}
        Err(Errno::EEXIST) => {
            return Err(Error::ArchiveExists { path: path.to_path_buf() });
        }
        // Some file systems lack RENAME_NOREPLACE; a hard link also refuses to replace.
        Err(Errno::EINVAL | Errno::ENOSYS) => {
            match linkat(dir.borrow(), tmp, dir.borrow(), name, AtFlags::empty()) {
                Ok(()) => {}
                Err(Errno::EEXIST) => {
                    return Err(Error::ArchiveExists { path: path.to_path_buf() });
                }
                Err(e) => return Err(Error::io("cannot rename into", path, e.into())),
            }
            let _ = unlinkat(dir.borrow(), tmp, UnlinkatFlags::NoRemoveDir);
        }
        Err(e) => return Err(Error::io("cannot rename into", path, e.into())),
    }
    if durable { dir.sync() } else { Ok(()) }
}

/// The compressed archive's bytes on their way to disk, hashed and counted.
fn write_archive(
    root: &Dir,
    file: File,
    tmp_path: &Path,
    opts: &PackOptions,
    inspector: &mut dyn Inspector,
) -> Result<(PackReport, String, u64)> {
    if opts.deadline.is_some_and(|d| Instant::now() >= d) {
        return Err(Error::PackDeadline { path: root.path().to_path_buf() });
    }
    let compressor =
        Compressor::new(opts.format, HashingWriter::new(file)).ctx("cannot start compressing", tmp_path)?;
    let what = format!("packing `{}`", crate::shown::path(root.path()));
    let progress = crate::progress::Progress::start(what, "files", None);
    let mut packer = Packer {
        root,
        opts,
        inspector,
        tar: tar::Builder::new(compressor),
        tmp_path,
        files: 0,
        bytes: 0,
        entries: 0,
        excluded: Vec::new(),
        progress: &progress,
    };
    let names: Vec<&OsStr> = opts.include.iter().map(OsStr::new).collect();
    packer.pack(&names)?;
    let Packer { tar, files, bytes, excluded, .. } = packer;
    let written = tar.into_inner().and_then(Compressor::finish).ctx("cannot write", tmp_path)?;
    if opts.durable {
        written.file.sync_all().ctx("cannot sync", tmp_path)?;
    }
    let sha = crate::hex::encode(&written.hasher.finalize());
    let report = PackReport {
        files,
        bytes,
        excluded,
        archive_sha256: String::new(),
        archive_path: PathBuf::new(),
        archive_bytes: 0,
    };
    Ok((report, sha, written.bytes))
}

#[cfg(test)]
mod tests;
