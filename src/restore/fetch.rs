//! Archives in a bucket, for `verify` and `restore`: the archive's
//! `.sha256` object is read first, then the archive is streamed through a
//! sha256 (to nowhere for `verify`, into a private scratch directory for
//! `restore`), and a digest that does not match is refused before anything
//! is extracted. The restore then reads the downloaded copy like any local
//! archive, in a `quarantine/` directory when the object lay under one.

use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::archive_store::{Bucket, S3Place, Scratch};
use crate::error::{Error, IoContext, Result};
use crate::workspace::QUARANTINE;

/// An archive downloaded and verified; its scratch directory goes when
/// this is dropped.
pub struct Fetched {
    pub archive: PathBuf,
    _scratch: Scratch,
}

/// The digest the archive's `.sha256` object records.
fn expected(bucket: &Bucket, url: &str, place: &S3Place, name: &str) -> Result<String> {
    let sum_url = format!("{url}.sha256");
    let bad = |why| Error::ChecksumFile { path: PathBuf::from(&sum_url), why };
    let text =
        match bucket.get_small(&format!("{}.sha256", place.key(name)), super::MAX_CHECKSUM_FILE as usize) {
            Ok(Some(bytes)) => String::from_utf8(bytes).map_err(|_| bad("is not text"))?,
            // No checksum and no archive (or no bucket): nothing to verify,
            // which is not an integrity failure.
            Ok(None) if bucket.head(&place.key(name)).is_ok_and(|h| h.is_none()) => {
                return Err(Error::Usage(format!("no archive `{url}`: the store holds no such object")));
            }
            Ok(None) => return Err(bad("is missing")),
            Err(Error::Other(_)) => return Err(bad("is over 4096 bytes")),
            Err(e) => return Err(e),
        };
    crate::archive_store::checksum_line(&text, name.as_bytes()).map_err(bad)
}

fn open(url: &str) -> Result<(Bucket, S3Place, String)> {
    let (place, name) = S3Place::parse_object(url)?;
    crate::fsx::check_name(&name)?;
    Ok((Bucket::open(&place)?, place, name))
}

/// Recomputes the sha256 of the archive at `url` and compares it with its
/// `.sha256` object; returns the digest when they match.
pub fn verify(url: &str) -> Result<String> {
    let (bucket, place, name) = open(url)?;
    let expected = expected(&bucket, url, &place, &name)?;
    let (found, _) = bucket.get_hashed(&place.key(&name), None, u64::MAX)?;
    if found != expected {
        return Err(Error::Integrity { path: PathBuf::from(url), expected, found });
    }
    Ok(expected)
}

/// Downloads the archive at `url` into a scratch directory under `uploads`,
/// with its checksum file beside it, refusing more than `max` bytes and a
/// digest that does not match.
pub fn fetch(url: &str, uploads: &Path, max: u64) -> Result<Fetched> {
    let (bucket, place, name) = open(url)?;
    let expected = expected(&bucket, url, &place, &name)?;
    let scratch = Scratch::new(uploads)?;
    let mut dir = scratch.path();
    if place.in_quarantine() {
        dir.push(QUARANTINE);
        std::fs::create_dir(&dir).ctx("cannot create", &dir)?;
    }
    let archive = dir.join(&name);
    // Readable by its owner only, and never through a symlink.
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(&archive)
        .ctx("cannot create", &archive)?;
    let (found, _) = bucket.get_hashed(&place.key(&name), Some(&mut file), max)?;
    if found != expected {
        return Err(Error::Integrity { path: PathBuf::from(url), expected, found });
    }
    std::fs::write(dir.join(format!("{name}.sha256")), format!("{expected}  {name}\n"))
        .ctx("cannot write", dir.join(format!("{name}.sha256")))?;
    Ok(Fetched { archive, _scratch: scratch })
}
