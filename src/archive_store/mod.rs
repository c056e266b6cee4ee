//! Where sealed evidence is kept off the host: an S3-compatible bucket,
//! named `s3://BUCKET/PREFIX`.
//!
//! The layout mirrors the local one: a seal `--to s3://B/P` puts
//! `P/<stem>.tar.zst`, `P/<stem>.tar.zst.sha256` (the line `sha256sum -c`
//! reads) and `P/<stem>.receipt.json`, and a quarantine the same under
//! `P/quarantine/`; an archive store (`--archive-store`,
//! `RUNWS_ARCHIVE_STORE`) is to a job what `ROOT/archive` is: a run of job
//! J seals to `…/J/`.
//!
//! Every object is written create-only (`If-None-Match: *`), so nothing
//! sealed is ever overwritten, and the archive takes its real name only
//! once it is whole: a single conditional PUT for a small archive, and for
//! a large one a multipart upload to a staging key, copied to the real name
//! create-only and then removed. A killed upload leaves nothing under the
//! real name.
//!
//! The URL names a place, never a credential: those come from the standard
//! AWS environment and configuration, and are never recorded.

mod listing;
#[cfg(feature = "s3")]
mod profile;
#[cfg(feature = "s3")]
mod s3;

use std::path::{Path, PathBuf};

pub use listing::{evidence, list, stem};

use crate::error::{Error, IoContext, Result};
use crate::fsx::{Dir, Leftover};

/// The environment variable naming the archive store when `--archive-store`
/// does not.
pub const ENV: &str = "RUNWS_ARCHIVE_STORE";

/// A place in an S3-compatible bucket: `s3://BUCKET/PREFIX`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Place {
    pub bucket: String,
    /// Without a leading or trailing `/`; empty for the bucket's top.
    pub prefix: String,
}

impl S3Place {
    /// Parses `s3://BUCKET[/PREFIX]`, as strictly as a path the command line
    /// names: a bucket name as S3 allows it, and a prefix of plain segments
    /// (no empty, `.` or `..` segment, no control characters).
    pub fn parse(url: &str) -> Result<S3Place> {
        let bad = |why: &str| {
            Error::Usage(format!("`{}` is not an archive store URL: {why}", crate::shown::line(url)))
        };
        let rest = url.strip_prefix("s3://").ok_or_else(|| bad("it must start with s3://"))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.contains('@') || bucket.contains(':') {
            // Not echoed: what is before the `@` may be a key.
            return Err(Error::Usage(
                "an archive store URL is s3://BUCKET/PREFIX: credentials and endpoints do not belong in it \
                 (AWS_ACCESS_KEY_ID, AWS_ENDPOINT_URL, a profile)"
                    .into(),
            ));
        }
        check_bucket(bucket).map_err(|why| bad(&why))?;
        let prefix = prefix.strip_suffix('/').unwrap_or(prefix);
        if !prefix.is_empty() {
            for seg in prefix.split('/') {
                check_segment(seg)
                    .map_err(|why| bad(&format!("segment `{}`: {why}", crate::shown::line(seg))))?;
            }
        }
        Ok(S3Place { bucket: bucket.to_string(), prefix: prefix.to_string() })
    }

    /// The place one segment further down (a job's name, `quarantine`).
    pub fn join(&self, segment: &str) -> Result<S3Place> {
        check_segment(segment)
            .map_err(|why| Error::InvalidName { name: crate::shown::line(segment), why })?;
        let prefix =
            if self.prefix.is_empty() { segment.to_string() } else { format!("{}/{segment}", self.prefix) };
        Ok(S3Place { bucket: self.bucket.clone(), prefix })
    }

    /// The key of the object `name` here.
    pub fn key(&self, name: &str) -> String {
        if self.prefix.is_empty() { name.to_string() } else { format!("{}/{name}", self.prefix) }
    }

    /// `s3://BUCKET/PREFIX`.
    pub fn url(&self) -> String {
        if self.prefix.is_empty() {
            format!("s3://{}", self.bucket)
        } else {
            format!("s3://{}/{}", self.bucket, self.prefix)
        }
    }

    /// The URL of the object `name` here.
    pub fn object_url(&self, name: &str) -> String {
        format!("s3://{}/{}", self.bucket, self.key(name))
    }

    /// Splits the URL of an object into its place and name.
    pub fn parse_object(url: &str) -> Result<(S3Place, String)> {
        let place = S3Place::parse(url)?;
        match place.prefix.rsplit_once('/') {
            Some((dir, name)) => {
                Ok((S3Place { bucket: place.bucket, prefix: dir.to_string() }, name.to_string()))
            }
            None if !place.prefix.is_empty() => {
                Ok((S3Place { bucket: place.bucket, prefix: String::new() }, place.prefix))
            }
            None => {
                Err(Error::Usage(format!("`{}` names a bucket, not an archive", crate::shown::line(url))))
            }
        }
    }

    /// True when a segment of the place is `quarantine`: as for a local
    /// archive, where an archive lies decides whether it is quarantined.
    pub fn in_quarantine(&self) -> bool {
        self.prefix.split('/').any(|s| s == crate::workspace::QUARANTINE)
    }
}

fn check_bucket(b: &str) -> std::result::Result<(), String> {
    let ok_chars = b.bytes().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'.' || c == b'-');
    let ends = |c: Option<u8>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if !(3..=63).contains(&b.len())
        || !ok_chars
        || !ends(b.bytes().next())
        || !ends(b.bytes().last())
        || b.contains("..")
    {
        return Err(format!(
            "`{}` is not a bucket name (3 to 63 lowercase letters, digits, `.` and `-`)",
            crate::shown::line(b)
        ));
    }
    Ok(())
}

fn check_segment(s: &str) -> std::result::Result<(), &'static str> {
    if s.is_empty() {
        Err("an archive store segment cannot be empty")
    } else if s == "." || s == ".." {
        Err("`.` and `..` are not archive store segments")
    } else if s.len() > 255 || s.chars().any(|c| c.is_control() || c == '\\') {
        Err("an archive store segment is at most 255 bytes, without control characters or `\\`")
    } else {
        Ok(())
    }
}

/// Where a seal puts its archive: a directory, or a place in a bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    Local(PathBuf),
    S3(S3Place),
}

impl Place {
    /// `s3://…` names a bucket; anything else is a directory.
    pub fn parse(s: &str) -> Result<Place> {
        if s.starts_with("s3://") {
            Ok(Place::S3(S3Place::parse(s)?))
        } else if let Some((scheme, _)) = s.split_once("://") {
            Err(Error::Usage(format!(
                "`{}` is not an archive place: runws stores archives in directories and s3://BUCKET/PREFIX, not {scheme}://",
                crate::shown::line(s)
            )))
        } else {
            Ok(Place::Local(PathBuf::from(s)))
        }
    }

    /// A job's place in an archive store.
    pub fn for_job(&self, job: &str) -> Result<Place> {
        match self {
            Place::Local(d) => {
                crate::fsx::check_name(job)?;
                Ok(Place::Local(d.join(job)))
            }
            Place::S3(p) => Ok(Place::S3(p.join(job)?)),
        }
    }
}

/// Whether `place` holds an object (a file) named `name`; a store that
/// does not answer says no, and the create-only write that follows says
/// why.
pub fn holds(place: &Place, name: &str) -> bool {
    match place {
        Place::Local(d) => d.join(name).symlink_metadata().is_ok(),
        Place::S3(p) => Bucket::open(p).and_then(|b| b.head(&p.key(name))).is_ok_and(|h| h.is_some()),
    }
}

/// The archive store the command line or the environment names, if any.
pub fn configured(arg: Option<&str>) -> Result<Option<Place>> {
    let from_env = std::env::var(ENV).ok().filter(|s| !s.is_empty());
    match arg.map(str::to_string).or(from_env) {
        Some(s) => Place::parse(&s).map(Some),
        None => Ok(None),
    }
}

/// The digest of the first line of a checksum file, `<hex>  <name>` as
/// `sha256sum` writes it, which must name `name`.
pub fn checksum_line(text: &str, name: &[u8]) -> std::result::Result<String, &'static str> {
    let line = text.lines().next().unwrap_or_default();
    let shape = "does not hold `<sha256>  <name>`";
    let (digest, rest) = line.split_at_checked(64).ok_or(shape)?;
    if !digest.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(shape);
    }
    let listed = rest.strip_prefix("  ").or_else(|| rest.strip_prefix(" *")).ok_or(shape)?;
    if listed.as_bytes() != name {
        return Err("names another file");
    }
    Ok(digest.to_ascii_lowercase())
}

/// The most compressed bytes of an archive of `max_bytes` of content
/// that runws downloads or hashes: zstd and gzip add at most a small
/// fraction to data they cannot compress, and tar a header per file.
pub const fn compressed_most(max_bytes: u64) -> u64 {
    max_bytes.saturating_add(max_bytes / 8).saturating_add(64 << 20)
}

/// What a seal packs at most with its default budgets (the seal's
/// `DEFAULT_MAX_BYTES`, which a test holds equal): the most content of an
/// archive read from a store without a `--max-bytes` of its own.
pub const DEFAULT_SEAL_BYTES: u64 = 256 << 20;

/// The URL, when `archive` names an object in a bucket rather than a file.
pub fn remote(archive: &Path) -> Option<&str> {
    archive.to_str().filter(|s| s.starts_with("s3://"))
}

/// One stored object, as a listing shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Stored {
    pub url: String,
    pub bytes: u64,
    /// RFC 3339, as the store reports it.
    pub modified: String,
}

#[cfg(feature = "s3")]
pub use s3::Bucket;

/// Without the `s3` feature every bucket operation is refused with the
/// same sentence.
#[cfg(not(feature = "s3"))]
pub struct Bucket(std::convert::Infallible);

#[cfg(not(feature = "s3"))]
impl Bucket {
    pub fn open(place: &S3Place) -> Result<Bucket> {
        Err(Error::Usage(format!(
            "this runws was built without S3 support (the `s3` cargo feature); cannot use `{}`",
            place.url()
        )))
    }
    pub fn head(&self, _: &str) -> Result<Option<u64>> {
        match self.0 {}
    }
    pub fn put_new(&self, _: &str, _: Vec<u8>) -> Result<()> {
        match self.0 {}
    }
    pub fn put_file_new(&self, _: &str, _: &Path) -> Result<()> {
        match self.0 {}
    }
    pub fn delete(&self, _: &str) -> Result<()> {
        match self.0 {}
    }
    pub fn get_small(&self, _: &str, _: usize) -> Result<Option<Vec<u8>>> {
        match self.0 {}
    }
    pub fn get_hashed(&self, _: &str, _: Option<&mut std::fs::File>, _: u64) -> Result<(String, u64)> {
        match self.0 {}
    }
    pub fn list(&self, _: &str) -> Result<Vec<Stored>> {
        match self.0 {}
    }
}

/// A private directory under `ROOT/uploads` a seal stages in, or a restore
/// downloads to, removed when dropped; `<name>.lock`, locked while it
/// lives, tells the next one whether a leftover's writer is gone (killed),
/// and that one removes it.
pub struct Scratch {
    uploads: Dir,
    name: String,
    _lock: std::fs::File,
}

impl Scratch {
    pub fn new(uploads: &Path) -> Result<Scratch> {
        let dir = open_uploads(uploads)?;
        sweep(&dir);
        loop {
            let name = uuid::Uuid::now_v7().to_string();
            let lock = match dir.create_locked(format!("{name}.lock"), 0o600) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::io("cannot create", dir.join(format!("{name}.lock")), e)),
            };
            dir.mkdir(&name, 0o700).ctx("cannot create", dir.join(&name))?;
            return Ok(Scratch { uploads: dir, name, _lock: lock });
        }
    }

    pub fn path(&self) -> PathBuf {
        self.uploads.join(&self.name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = self.uploads.remove_tree(&self.name);
        let _ = self.uploads.unlink(format!("{}.lock", self.name));
    }
}

/// `ROOT/uploads`, made and opened from its parent (ROOT), never through a
/// symlink a plain run's command planted in its place.
fn open_uploads(uploads: &Path) -> Result<Dir> {
    let (Some(parent), Some(name)) = (uploads.parent(), uploads.file_name()) else {
        return Err(Error::Usage(format!("`{}` is not a scratch directory", uploads.display())));
    };
    crate::fsx::create_private_dirs(parent).ctx("cannot create", parent)?;
    let parent = Dir::open(parent)?;
    parent.mkdir_if_missing(name, 0o700)?;
    parent.sub(name)
}

/// An exclusive lock, held while it lives, on the directory `.seal` in the
/// directory a seal packs (the run's, or the lane's): seals of one run
/// take turns. It goes with the directory. A plain run's command (or any
/// process of the user) can hold it, so it is waited for only until
/// `deadline`, the seal's: then the seal is refused, nothing attempted.
/// Made and opened never through a symlink.
pub fn seal_mutex(src: &Path, deadline: Option<std::time::Instant>) -> Result<crate::fsx::DirLock> {
    let dir = Dir::open(src)?;
    dir.mkdir_if_missing(".seal", 0o700)?;
    let lock = dir.sub(".seal")?;
    let wait = deadline.map_or(std::time::Duration::from_secs(24 * 3600), |d| {
        d.saturating_duration_since(std::time::Instant::now())
    });
    lock.lock_within(wait)?.ok_or_else(|| {
        Error::Other(format!(
            "another process held `{}` (a seal of the same run) until the deadline; nothing was sealed",
            lock.path().display()
        ))
    })
}

/// Removes the scratch directories of writers that died.
fn sweep(dir: &Dir) {
    let Ok(names) = dir.entries() else { return };
    for lock in names.iter().filter_map(|n| n.strip_suffix(".lock")) {
        if crate::fsx::check_name(lock).is_err() {
            continue;
        }
        if let Ok(Leftover::Abandoned) = dir.abandoned(format!("{lock}.lock"), false)
            && dir.remove_tree(lock).is_ok()
        {
            let _ = dir.abandoned(format!("{lock}.lock"), true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_parsed_strictly() {
        let p = S3Place::parse("s3://my-bucket/a/b/").unwrap();
        assert_eq!((p.bucket.as_str(), p.prefix.as_str()), ("my-bucket", "a/b"));
        assert_eq!(p.url(), "s3://my-bucket/a/b");
        assert_eq!(p.join("job").unwrap().object_url("x.tar.zst"), "s3://my-bucket/a/b/job/x.tar.zst");
        assert_eq!(S3Place::parse("s3://my-bucket").unwrap().object_url("x"), "s3://my-bucket/x");
        for bad in [
            "s3://",
            "s3://ab",
            "s3://Upper",
            "s3://key:secret@bucket/p",
            "s3://bucket//p",
            "s3://bucket/../p",
            "s3://bucket/a/./b",
            "s3://bucket/a\nb",
            "s3://-bucket/p",
            "http://bucket/p",
        ] {
            assert!(S3Place::parse(bad).is_err(), "{bad}");
        }
        assert!(S3Place::parse("s3://bucket/p").unwrap().join("..").is_err());
        assert!(matches!(Place::parse("gs://b/p"), Err(Error::Usage(_))));
        assert_eq!(Place::parse("dir/x").unwrap(), Place::Local("dir/x".into()));
    }

    #[test]
    fn objects_split_into_place_and_name() {
        let (p, n) = S3Place::parse_object("s3://bucket/p/quarantine/r.tar.zst").unwrap();
        assert_eq!((p.prefix.as_str(), n.as_str()), ("p/quarantine", "r.tar.zst"));
        assert!(p.in_quarantine());
        let (p, n) = S3Place::parse_object("s3://bucket/r.tar.zst").unwrap();
        assert_eq!((p.prefix.as_str(), n.as_str()), ("", "r.tar.zst"));
        assert!(S3Place::parse_object("s3://bucket").is_err());
    }
}
