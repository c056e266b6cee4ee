//! Verified, safe extraction of a sealed archive.
//!
//! An archive is read once: its bytes are hashed as they stream into the
//! decompressor (see [`feed`]), and the digest must match `<archive>.sha256`
//! before anything is placed at the target. Checking in the same pass rather
//! than first halves what is read and hashed, and it gives nothing away:
//! until the comparison the extraction only writes into the private staging
//! directory, within the budgets below whatever a forged archive says, and
//! a mismatch (reported as such even when the damaged bytes made the
//! extraction fail first) removes that directory. Both files must be
//! regular files: a fifo, socket, device or directory is refused before it
//! is opened, so none can stall a restore.
//!
//! Extraction goes into a fresh private directory beside the target (see
//! [`make_staging`]); every byte written there goes through the secret scan
//! as it is written, and the whole is held to a budget of bytes and entries
//! (the seal's, by default), so a small archive cannot fill the file system.
//! Only when every entry passed, the budgets held and the scan is complete
//! is that directory renamed into place, in one step: whatever moment a
//! restore is killed at, the target holds nothing or the whole, scanned
//! archive (invariant 8). Anything that could write outside the target
//! (absolute names, `..`, a path through a symlink, a link leading out, a
//! device, a fifo, a setuid bit, a duplicate name) or a budget passed makes
//! the whole restore fail, and the target is left as it was: absent or
//! empty.
//!
//! What the scan found decides in [`restore`] (or in the caller of
//! [`stage`]) before anything is placed: an archive from an ordinary
//! location that holds a secret is refused; one from quarantine, which is
//! where archives that failed the scan are kept, is restored with its
//! findings reported. Whether an archive came from quarantine is decided by
//! where it lies (a path component named `quarantine`), never by what it
//! contains.
//!
//! The restored directory itself is `0700`, as the staging directory was
//! made; what is inside keeps its archived permissions, without setuid,
//! setgid or sticky bits, and is owned by whoever restores it.

mod extract;
pub(crate) use extract::Capped;
mod feed;
pub mod fetch;

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{RenameFlags, renameat, renameat2};
use sha2::{Digest, Sha256};

use crate::error::{Error, IoContext, Result};
use crate::fsx::{self, Dir};
use crate::hex::encode as hex;
use crate::seal::archive::split_parent;
use crate::seal::scan::Finding;
use crate::workspace::{QUARANTINE, Root};

/// The largest checksum file read; a real one is one short line.
pub(crate) const MAX_CHECKSUM_FILE: u64 = 4096;

/// How much a restore may write: the seal's budgets unless raised.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most bytes of file content written, summed over all files.
    pub max_bytes: u64,
    /// Most entries (files, directories, links) created.
    pub max_files: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { max_bytes: crate::seal::DEFAULT_MAX_BYTES, max_files: crate::seal::DEFAULT_MAX_FILES }
    }
}

/// What a restore wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestoreReport {
    /// Regular files and hard links created.
    pub files: u64,
    /// Bytes of file content written.
    pub bytes: u64,
    /// The archive lies under a `quarantine` directory.
    pub from_quarantine: bool,
    /// What the secret scan found in the files' contents, by path inside
    /// the archive.
    pub findings: Vec<Finding>,
    /// What the scan could not look inside (an archive sealed with
    /// `--allow-unscanned` holds such members).
    pub unscanned: Vec<crate::seal::scan::Unscanned>,
}

/// Recomputes the archive's sha256 and compares it with `<archive>.sha256`;
/// returns the hex digest when they match.
pub fn verify(archive: &Path) -> Result<String> {
    // The archive first: a missing archive is not a missing checksum.
    let file = open_archive(archive)?;
    let expected = expected_sha256(archive)?;
    check_sha256(archive, &file, &expected)?;
    Ok(expected)
}

/// Restores `archive` into `target`, which must be absent or an empty
/// directory, within `limits`. An archive from an ordinary location in which
/// the scan finds a secret is refused; see [`stage`] to decide otherwise. On
/// any error `target` is left as it was.
pub fn restore(archive: &Path, target: &Path, root: Option<&Root>, limits: Limits) -> Result<RestoreReport> {
    let staged = stage(archive, target, root, limits)?;
    let report = staged.report();
    if !report.findings.is_empty() && !report.from_quarantine {
        return Err(Error::SecretsFound {
            what: format!("archive `{}`", archive.display()),
            count: report.findings.len(),
        });
    }
    staged.place()
}

/// An archive extracted and scanned into its staging directory, with nothing
/// under the target yet. [`Staged::place`] moves it there; dropping it
/// removes the staging directory.
pub struct Staged {
    report: RestoreReport,
    extracted: extract::Extracted,
    staging: crate::restores::Staging,
    parent_dir: Dir,
    name: OsString,
    target: PathBuf,
    target_existed: bool,
    /// The owner of the archive file that was read.
    archive_uid: u32,
}

/// Extracts and scans all of `archive` within `limits` into a private
/// staging directory beside `target`, verifying its checksum in the same
/// read; a mismatch fails the whole. Nothing appears under
/// `target`; on any error the staging directory is removed. With `root`,
/// the staging directory is registered under it first ([`crate::restores`])
/// so that `reap` removes it if this process dies.
pub fn stage(archive: &Path, target: &Path, root: Option<&Root>, limits: Limits) -> Result<Staged> {
    let target_existed = check_target(target)?;
    // One open file serves the extraction and the checksum, read once (see
    // `feed`), so a rename of another file over `archive` changes nothing.
    let file = open_archive(archive)?;
    let archive_uid = std::os::unix::fs::MetadataExt::uid(&file.metadata().ctx("cannot stat", archive)?);
    let expected = expected_sha256(archive)?;
    let format = detect(archive, &file)?;
    let from_quarantine = in_quarantine(archive);

    let (parent, name) = split_parent(target)?;
    let parent_dir = Dir::open(parent)?;
    let staging = crate::restores::staging(root, parent, name)?;

    let (extracted, found) =
        feed::decompressed(&file, format, |stream| extract::extract(stream, staging.path(), archive, limits));
    // The checksum is judged first: an archive that is not the one sealed
    // is a checksum failure, whatever its damaged bytes made the extraction
    // say. On any failure `staging` is dropped, which removes it.
    let found = found.ctx("cannot read", archive)?;
    if found != expected {
        return Err(Error::Integrity { path: archive.to_path_buf(), expected, found });
    }
    let mut extracted = extracted?;
    let report = RestoreReport {
        files: extracted.files,
        bytes: extracted.bytes,
        from_quarantine,
        findings: std::mem::take(&mut extracted.findings),
        unscanned: std::mem::take(&mut extracted.unscanned),
    };
    Ok(Staged {
        report,
        extracted,
        staging,
        parent_dir,
        name: name.to_owned(),
        target: target.to_path_buf(),
        target_existed,
        archive_uid,
    })
}

impl Staged {
    /// What the extraction wrote and the scan found.
    pub fn report(&self) -> &RestoreReport {
        &self.report
    }

    /// The owner of the archive file that was read (not of its path now).
    pub fn archive_uid(&self) -> u32 {
        self.archive_uid
    }

    /// The private staging directory the archive was extracted into,
    /// removed when this is dropped unless placed.
    pub fn staged_at(&self) -> &Path {
        self.staging.path()
    }

    /// Renames the staging directory onto the target in one step; refuses
    /// when something appeared at the target meanwhile.
    pub fn place(self) -> Result<RestoreReport> {
        let Staged { report, extracted, staging, parent_dir, name, target, target_existed, .. } = self;
        if let Err(e) = extracted.apply_dir_modes() {
            extracted.reopen_dirs();
            return Err(e);
        }
        let staged = staging.path().file_name().unwrap_or_default().to_owned();
        let moved = if target_existed {
            // Replaces an empty directory only; a non-empty one fails with ENOTEMPTY.
            renameat(parent_dir.borrow(), staged.as_os_str(), parent_dir.borrow(), name.as_os_str())
        } else {
            renameat2(
                parent_dir.borrow(),
                staged.as_os_str(),
                parent_dir.borrow(),
                name.as_os_str(),
                RenameFlags::RENAME_NOREPLACE,
            )
            .or_else(|e| match e {
                // Without RENAME_NOREPLACE a plain rename still refuses a file or
                // a non-empty directory that appeared meanwhile.
                Errno::EINVAL | Errno::ENOSYS => {
                    renameat(parent_dir.borrow(), staged.as_os_str(), parent_dir.borrow(), name.as_os_str())
                }
                e => Err(e),
            })
        };
        match moved {
            Ok(()) => {
                let _ = staging.keep();
            }
            Err(e) => {
                extracted.reopen_dirs();
                let why = match e {
                    Errno::EEXIST | Errno::ENOTEMPTY => "something appeared there during the restore",
                    _ => "cannot rename the staging directory into place",
                };
                return Err(Error::RestoreTarget { path: target, why });
            }
        }
        parent_dir.sync()?;
        Ok(report)
    }
}

/// Opens the archive, refusing anything but a regular file before it could
/// block or act on a device.
fn open_archive(archive: &Path) -> Result<File> {
    fsx::open_regular(archive)
        .ctx("cannot open archive", archive)?
        .ok_or_else(|| Error::NotRegularFile { what: "archive", path: archive.to_path_buf() })
}

/// True when `target` exists (as an empty directory); an error when it is
/// anything else.
fn check_target(target: &Path) -> Result<bool> {
    let meta = match std::fs::symlink_metadata(target) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(Error::io("cannot stat", target, e)),
    };
    if !meta.file_type().is_dir() {
        return Err(Error::RestoreTarget {
            path: target.to_path_buf(),
            why: "it exists and is not a directory",
        });
    }
    let mut entries = std::fs::read_dir(target).ctx("cannot list", target)?;
    if entries.next().is_some() {
        return Err(Error::RestoreTarget { path: target.to_path_buf(), why: "it is not empty" });
    }
    Ok(true)
}

pub(crate) fn in_quarantine(archive: &Path) -> bool {
    let named = |p: &Path| p.components().any(|c| c == Component::Normal(QUARANTINE.as_ref()));
    // A symlink elsewhere to a quarantined archive is still quarantined.
    named(archive) || std::fs::canonicalize(archive).is_ok_and(|p| named(&p))
}

/// The digest recorded in `<archive>.sha256` (`<hex>  <name>`, as written
/// by `sha256sum`), which must name this archive.
fn expected_sha256(archive: &Path) -> Result<String> {
    let (_, name) = split_parent(archive)?;
    let mut sum_name = name.to_owned();
    sum_name.push(".sha256");
    let sum_path = archive.with_file_name(sum_name);
    let bad = |why| Error::ChecksumFile { path: sum_path.clone(), why };
    let file = match fsx::open_regular(&sum_path) {
        Ok(Some(f)) => f,
        Ok(None) => return Err(bad("is not a regular file")),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(bad("is missing")),
        Err(e) => return Err(Error::io("cannot open", &sum_path, e)),
    };
    let mut text = String::new();
    if file.take(MAX_CHECKSUM_FILE).read_to_string(&mut text).is_err() {
        return Err(bad("is not text"));
    }
    crate::archive_store::checksum_line(&text, name.as_encoded_bytes()).map_err(bad)
}

fn check_sha256(archive: &Path, file: &File, expected: &str) -> Result<()> {
    let mut hasher = Sha256::new();
    io::copy(&mut HashingReader { file, hasher: &mut hasher }, &mut io::sink())
        .ctx("cannot read", archive)?;
    let found = hex(&hasher.finalize());
    if found != expected {
        return Err(Error::Integrity { path: archive.to_path_buf(), expected: expected.to_string(), found });
    }
    Ok(())
}

/// The two compressions a sealed archive may use, told apart by magic bytes.
#[derive(Clone, Copy, Debug)]
enum Compression {
    Zstd,
    Gzip,
}

fn detect(archive: &Path, mut file: &File) -> Result<Compression> {
    let mut magic = [0u8; 4];
    let mut got = 0;
    while got < magic.len() {
        match file.read(&mut magic[got..]).ctx("cannot read", archive)? {
            0 => break,
            n => got += n,
        }
    }
    file.seek(SeekFrom::Start(0)).ctx("cannot read", archive)?;
    match magic {
        [0x28, 0xb5, 0x2f, 0xfd] => Ok(Compression::Zstd),
        [0x1f, 0x8b, ..] if got >= 2 => Ok(Compression::Gzip),
        _ => Err(Error::ArchiveFormat { path: archive.to_path_buf() }),
    }
}

/// Reads the archive file and hashes every byte read.
struct HashingReader<'a> {
    file: &'a File,
    hasher: &'a mut Sha256,
}

impl Read for HashingReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.file.read(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

#[cfg(test)]
mod tests;
