//! Inputs: copied into `inputs/` and hashed in the same pass, and the
//! combined fingerprint over all of them.
//!
//! Each byte of an input is read once, and what is hashed is what lands in
//! `inputs/`. The walk opens and creates; a small pool of threads copies and
//! hashes many files at once ([`pool`]); a large file's copy overlaps
//! reading, hashing and writing ([`copy_and_hash`]; sha2 uses the CPU's SHA
//! instructions where present). The copies are made durable together by one
//! `syncfs` before the record that lists them is written.
//! The fingerprint is the sha256 of the sorted list of (path, kind, bytes,
//! sha256, producer run): independent of the order the inputs were given in
//! and of timestamps, and different when any byte or name differs.

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::mpsc;

use sha2::{Digest, Sha256};

use crate::error::{Error, IoContext, Result};
use crate::fsx::walk::{Entry, Failure, Kind, Visit, Walk};
use crate::fsx::{self, Dir};
use crate::osname::OsName;
use crate::shown;
use pool::{Job, Pool};
pub use recorded::{Recorded, check_same, copy_recorded, records_of};
use serde::{Deserialize, Serialize};

mod pool;
mod recorded;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct InputRecord {
    /// Path relative to `inputs/` (see [`OsName`] for names that are not UTF-8).
    pub path: OsName,
    /// `file` or `symlink` (a symlink is recorded, never followed).
    #[serde(default = "file_kind")]
    pub kind: String,
    pub bytes: u64,
    pub sha256: String,
    /// Set for `runws import`: the run that produced it, and the output name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_run: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_output: Option<OsName>,
}

fn file_kind() -> String {
    "file".to_string()
}

const CHUNK: usize = 1 << 20;

/// Hashes everything `reader` yields; returns (bytes, sha256 hex).
pub fn hash_reader(reader: &mut impl Read) -> std::io::Result<(u64, String)> {
    digest(reader, None, &mut vec![0u8; 256 * 1024])
}

/// Reads `from` to its end through `buf`, hashing each piece and, with
/// `to`, writing it there; returns (bytes, sha256 hex). Each byte is read
/// once.
fn digest(from: &mut impl Read, mut to: Option<&mut File>, buf: &mut [u8]) -> std::io::Result<(u64, String)> {
    let mut hasher = Sha256::new();
    let mut total = 0u64;
    loop {
        let n = match from.read(buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..n]);
        if let Some(to) = to.as_mut() {
            to.write_all(&buf[..n])?;
        }
        total += n as u64;
    }
    Ok((total, crate::hex::encode(&hasher.finalize())))
}

/// Copies `src` to `dst`, hashing the bytes as they pass; returns
/// (bytes, sha256 hex). Each byte is read once. Three stages overlap: a
/// reader thread fills buffers, this thread hashes them in order, a writer
/// thread writes them out and hands them back, so on two cores the copy
/// costs little more than the hash.
pub fn copy_and_hash(src: &mut (impl Read + Send), dst: &mut File) -> std::io::Result<(u64, String)> {
    const IN_FLIGHT: usize = 4;
    let (to_hasher, filled) = mpsc::sync_channel::<Vec<u8>>(IN_FLIGHT);
    let (to_writer, hashed) = mpsc::sync_channel::<Vec<u8>>(IN_FLIGHT);
    let (to_reader, spare) = mpsc::sync_channel::<Vec<u8>>(IN_FLIGHT * 2 + 2);
    std::thread::scope(|scope| {
        let reader = scope.spawn(move || -> std::io::Result<()> {
            loop {
                // A fresh buffer comes zeroed from the allocator (fresh pages,
                // not a memset); a recycled one is full length already.
                let mut buf = spare.try_recv().unwrap_or_else(|_| vec![0u8; CHUNK]);
                buf.resize(CHUNK, 0);
                let mut filled_len = 0;
                while filled_len < CHUNK {
                    match src.read(&mut buf[filled_len..]) {
                        Ok(0) => break,
                        Ok(n) => filled_len += n,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
                if filled_len == 0 {
                    return Ok(());
                }
                buf.truncate(filled_len);
                // The hasher stopped (the writer failed): its error wins.
                if to_hasher.send(buf).is_err() || filled_len < CHUNK {
                    return Ok(());
                }
            }
        });
        let writer = scope.spawn(move || -> std::io::Result<()> {
            for buf in hashed {
                dst.write_all(&buf)?;
                let _ = to_reader.try_send(buf);
            }
            Ok(())
        });
        let mut hasher = Sha256::new();
        let mut total = 0u64;
        for buf in filled {
            hasher.update(&buf);
            total += buf.len() as u64;
            if to_writer.send(buf).is_err() {
                break;
            }
        }
        drop(to_writer);
        let read_result =
            reader.join().unwrap_or_else(|_| Err(std::io::Error::other("reader thread panicked")));
        let write_result =
            writer.join().unwrap_or_else(|_| Err(std::io::Error::other("writer thread panicked")));
        read_result?;
        write_result?;
        Ok((total, crate::hex::encode(&hasher.finalize())))
    })
}

/// The combined fingerprint of no inputs: [`combine`] of an empty list,
/// spelled out so that a run without inputs hashes nothing (the first hash
/// in a process detects the CPU's SHA instructions, tens of microseconds on
/// a virtual machine).
const NO_INPUTS: &str = "sha256:be22fec7f1943dd7b3fe4ec5cc8a9f556a827761641020037851c767e13d47a5";

/// The combined fingerprint of a list of inputs.
pub fn combine(inputs: &[InputRecord]) -> String {
    if inputs.is_empty() {
        return NO_INPUTS.to_string();
    }
    hash_list(inputs)
}

fn hash_list(inputs: &[InputRecord]) -> String {
    let mut sorted: Vec<&InputRecord> = inputs.iter().collect();
    sorted.sort_by(|a, b| a.path.cmp(&b.path));
    let mut h = Sha256::new();
    h.update(b"runws-inputs-v1\n");
    for i in sorted {
        // The path's own bytes (a name that is not UTF-8 included): paths
        // cannot hold NUL, so NUL separates fields unambiguously.
        h.update(i.path.as_bytes());
        h.update(b"\0");
        h.update(i.kind.as_bytes());
        h.update(b"\0");
        h.update(i.bytes.to_string().as_bytes());
        h.update(b"\0");
        h.update(i.sha256.as_bytes());
        h.update(b"\0");
        h.update(i.from_run.as_deref().unwrap_or("").as_bytes());
        h.update(b"\n");
    }
    format!("sha256:{}", crate::hex::encode(&h.finalize()))
}

/// Copies the user's `--input` paths into `inputs/`, each under its own
/// file name; returns the records, sorted by path. Names are bytes: a name
/// that is not UTF-8 is copied and recorded as it is. Once this returns,
/// every copy is durable (one `syncfs` of the file system of `inputs/`).
pub fn copy_inputs(sources: &[std::path::PathBuf], inputs: &Dir) -> Result<Vec<InputRecord>> {
    if sources.is_empty() {
        return Ok(Vec::new());
    }
    let mut records = Vec::new();
    let mut pool = Pool::new();
    let walked = submit_inputs(sources, inputs, &mut pool, &mut records);
    records.extend(pool.finish(walked)?);
    // No copy was synced on its own: one sync of the file system makes all
    // of them (data, inodes and directory entries) durable before the
    // manifest that lists them is written.
    nix::unistd::syncfs(inputs.borrow()).map_err(|e| Error::io("cannot sync", inputs.path(), e.into()))?;
    records.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(records)
}

/// Walks the inputs: directories and symlinks are made (and symlinks
/// recorded in `records`) here, files handed to `pool`.
fn submit_inputs(
    sources: &[std::path::PathBuf],
    inputs: &Dir,
    pool: &mut Pool,
    records: &mut Vec<InputRecord>,
) -> Result<()> {
    let mut names = std::collections::BTreeSet::new();
    for src in sources {
        let name = src.file_name().filter(|n| *n != "." && *n != "..").ok_or_else(|| {
            Error::Usage(format!("--input `{}` has no usable file name", shown::os(src.as_os_str())))
        })?;
        fsx::check_name(name)?;
        if !names.insert(name.to_os_string()) {
            return Err(Error::Usage(format!(
                "two inputs are named `{}`; give each input its own name",
                shown::os(name)
            )));
        }
        let name = OsName::from(name);
        // The path the user named is followed; links inside a directory are not.
        let meta = std::fs::metadata(src).ctx("cannot read input", src)?;
        if meta.is_dir() {
            copy_dir(src, inputs, &name, &name, pool, records)?;
        } else if meta.is_file() {
            // A fifo or device swapped in since the stat is refused, not
            // waited on.
            let from = fsx::open_regular(src)
                .ctx("cannot open input", src)?
                .ok_or_else(|| Error::SpecialFile { path: src.clone() })?;
            let len = from.metadata().ctx("cannot read input", src)?.len();
            submit_file(pool, from, src, inputs, &name, &name, len)?;
        } else {
            return Err(Error::SpecialFile { path: src.clone() });
        }
    }
    Ok(())
}

/// Creates the copy of the opened `from` as `name` in `into` and hands both
/// to `pool`.
fn submit_file(
    pool: &mut Pool,
    from: File,
    src: &Path,
    into: &Dir,
    name: &OsName,
    rel: &OsName,
    size: u64,
) -> Result<()> {
    let to = into.create_new_rw(name, 0o644).ctx("cannot create", into.join(name))?;
    pool.submit(Job { from, to, src: src.to_path_buf(), rel: rel.clone(), size })
}

/// Copies the directory `src` (named by the user: followed) as `name` in
/// `parent`, and everything below it in name order; a symlink below it is
/// copied as a symlink, never followed.
fn copy_dir(
    src: &Path,
    parent: &Dir,
    name: &OsName,
    rel: &OsName,
    pool: &mut Pool,
    out: &mut Vec<InputRecord>,
) -> Result<()> {
    parent.mkdir(name, 0o755).ctx("cannot create", parent.join(name))?;
    // `made[d]` is the copy of the directory holding the entries at depth `d + 1`.
    let mut made = vec![parent.sub(name)?];
    let from = Dir::open(src)?;
    let visit = |e: &Entry<'_>| {
        made.truncate(e.depth);
        let dir = &made[e.depth - 1];
        let child = OsName::from(e.name.to_os_string());
        let child_rel = rel.joined("/", e.rel);
        match e.kind() {
            Kind::Symlink => {
                let target =
                    nix::fcntl::readlinkat(e.dir.borrow(), e.name).ctx("cannot read link", e.path())?;
                dir.symlink(Path::new(&target), &child)?;
                let text = target.as_bytes();
                out.push(InputRecord {
                    path: child_rel,
                    kind: "symlink".into(),
                    bytes: text.len() as u64,
                    sha256: crate::hex::encode(&Sha256::digest(text)),
                    from_run: None,
                    from_output: None,
                });
                Ok(Visit::Skip)
            }
            Kind::Dir => {
                dir.mkdir(&child, 0o755).ctx("cannot create", dir.join(&child))?;
                let sub = dir.sub(&child)?;
                made.push(sub);
                Ok(Visit::Descend)
            }
            Kind::File => {
                let path = e.path();
                let from = match e.dir.open_read(e.name) {
                    Ok(Some(f)) => f,
                    Ok(None) => return Err(cannot_open(&path, std::io::ErrorKind::NotFound.into())),
                    Err(Error::Io { source, .. }) => return Err(cannot_open(&path, source)),
                    Err(e) => return Err(e),
                };
                let size = e.stat.as_ref().map_or(0, |st| u64::try_from(st.st_size).unwrap_or(0));
                submit_file(pool, from, &path, dir, &child, &child_rel, size)?;
                Ok(Visit::Skip)
            }
            Kind::Special => Err(Error::SpecialFile { path: e.path() }),
            Kind::Gone => Err(cannot_open(&e.path(), std::io::ErrorKind::NotFound.into())),
        }
    };
    // Failures keep the words an input's copy has always used.
    Walk::new().run_or(&from, visit, |failure| {
        Err(match failure {
            Failure::List { path, error: Error::Io { source, .. } } => {
                Error::io("cannot list input", path, source)
            }
            Failure::Stat { path, errno } => Error::io("cannot read input", path, errno.into()),
            other => other.into_error(),
        })
    })
}

fn cannot_open(path: &Path, e: std::io::Error) -> Error {
    Error::io("cannot open input", path, e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_inputs_is_the_hash_of_an_empty_list() {
        assert_eq!(combine(&[]), hash_list(&[]));
    }

    fn rec(path: &str, sha: &str) -> InputRecord {
        InputRecord {
            path: path.into(),
            kind: "file".into(),
            bytes: 1,
            sha256: sha.into(),
            from_run: None,
            from_output: None,
        }
    }

    #[test]
    fn fingerprint_ignores_order_and_sees_names_and_bytes() {
        let a = combine(&[rec("a", "1"), rec("b", "2")]);
        assert_eq!(a, combine(&[rec("b", "2"), rec("a", "1")]));
        assert_ne!(a, combine(&[rec("a", "1"), rec("c", "2")]));
        assert_ne!(a, combine(&[rec("a", "1"), rec("b", "3")]));
        assert!(a.starts_with("sha256:"));
    }

    #[test]
    fn names_that_are_not_utf8_are_hashed_as_their_bytes() {
        let raw = |b: &[u8]| InputRecord { path: OsName::from_bytes(b.to_vec()), ..rec("x", "1") };
        let latin = combine(&[raw(b"caf\xe9")]);
        // Not the escaped spelling, not another byte, not the lossy text.
        assert_ne!(latin, combine(&[rec("caf\\xe9", "1")]));
        assert_ne!(latin, combine(&[raw(b"caf\xe8")]));
        assert_ne!(latin, combine(&[rec("caf\u{fffd}", "1")]));
        assert_eq!(latin, combine(&[raw(b"caf\xe9")]));
    }

    #[test]
    fn copy_and_hash_matches_plain_hash() {
        let tmp = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..3_500_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let src = tmp.path().join("src");
        std::fs::write(&src, &data).unwrap();
        let mut out = File::create(tmp.path().join("dst")).unwrap();
        let (n, h) = copy_and_hash(&mut File::open(&src).unwrap(), &mut out).unwrap();
        assert_eq!(n, data.len() as u64);
        assert_eq!(h, crate::hex::encode(&Sha256::digest(&data)));
        assert_eq!(std::fs::read(tmp.path().join("dst")).unwrap(), data);
    }
}
