//! Restores in progress, registered under ROOT, so that `reap` can remove
//! the staging directory of one that was killed.
//!
//! A restore extracts into a staging directory `.NAME.restore-TOKEN` beside
//! its target, which may lie anywhere. Before making it, the restore writes
//! `ROOT/restores/TOKEN.json` naming it (with the restoring process's pid
//! and start time) and holds a lock on that record while it runs; the
//! record goes when the restore ends, whichever way. A record nobody holds
//! was left by a restore that died. Its contents are untrusted (a run
//! outside a sandbox can write under ROOT): the reaper removes only a real
//! directory (never a symlink, reached without one) named exactly as this
//! record's restore would have named it, owned by the user who wrote the
//! record, and root removes it with that user's file rights only.

use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, IoContext, Result};
use crate::fsx::{Dir, Leftover};
use crate::leftovers::Found;
use crate::workspace::{RESTORES, Root};

/// The largest record read back; a real one is one short line.
const MAX_RECORD: u64 = 8192;

#[derive(Serialize, Deserialize)]
struct Record {
    /// The staging directory, for a person (lossy when not UTF-8).
    staging: String,
    /// The staging directory's path, byte for byte, in hex.
    staging_hex: String,
    pid: i32,
    start_time: u64,
}

/// A registered restore's record, removed when dropped.
struct Registration {
    dir: Dir,
    name: String,
    _locked: File,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let _ = self.dir.unlink(&self.name);
    }
}

/// The staging directory of one restore, and its registration: the
/// directory is removed when dropped (unless kept), then the record.
pub struct Staging {
    dir: Option<tempfile::TempDir>,
    _registered: Option<Registration>,
}

impl Staging {
    pub fn path(&self) -> &Path {
        self.dir.as_ref().map_or(Path::new(""), |d| d.path())
    }

    /// Keeps the directory (it was renamed into place); the record goes.
    pub fn keep(mut self) -> PathBuf {
        self.dir.take().map(|d| d.keep()).unwrap_or_default()
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        // The directory before the record that names it.
        drop(self.dir.take());
    }
}

fn short(name: &OsStr) -> String {
    name.to_string_lossy().chars().take(64).collect()
}

/// A token for one restore: letters and digits only.
fn token() -> String {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    format!("{:x}{nanos:x}{n}", std::process::id())
}

fn staging_name(target_name: &OsStr, token: &str) -> String {
    format!(".{}.restore-{token}", short(target_name))
}

/// Makes the staging directory for a restore into `parent/target_name`;
/// with `root`, registered under it first.
pub fn staging(root: Option<&Root>, parent: &Path, target_name: &OsStr) -> Result<Staging> {
    let Some(root) = root else {
        let dir = tempfile::Builder::new()
            .prefix(&format!(".{}.restore-", short(target_name)))
            .tempdir_in(parent)
            .ctx("cannot create a staging directory in", parent)?;
        return Ok(Staging { dir: Some(dir), _registered: None });
    };
    crate::fsx::create_private_dirs(&root.restores()).ctx("cannot create", root.restores())?;
    let records = Dir::open(root)?.sub(RESTORES)?;
    let parent_abs = if parent.is_absolute() {
        parent.to_path_buf()
    } else {
        std::env::current_dir().ctx("cannot read the current directory", ".")?.join(parent)
    };
    loop {
        let token = token();
        let name = staging_name(target_name, &token);
        let path = parent_abs.join(&name);
        let me = std::process::id() as i32;
        let record = Record {
            staging: path.to_string_lossy().into_owned(),
            staging_hex: crate::hex::encode(path.as_os_str().as_bytes()),
            pid: me,
            start_time: crate::procinfo::stat(me).map_or(0, |s| s.start_time),
        };
        let record_name = format!("{token}.json");
        let mut file = match records.create_locked(&record_name, 0o600) {
            Ok(f) => f,
            // Taken, or removed by a cleanup before it was locked: a new token.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::Interrupted | std::io::ErrorKind::AlreadyExists
                ) =>
            {
                continue;
            }
            Err(e) => return Err(Error::io("cannot create", records.join(&record_name), e)),
        };
        let bytes = serde_json::to_vec(&record).map_err(|e| Error::Other(e.to_string()))?;
        std::io::Write::write_all(&mut file, &bytes)
            .and_then(|()| file.sync_all())
            .ctx("cannot write", records.join(&record_name))?;
        records.sync()?;
        let registered = Registration { dir: records, name: record_name, _locked: file };
        match tempfile::Builder::new().prefix(&name).rand_bytes(0).tempdir_in(&parent_abs) {
            Ok(dir) => return Ok(Staging { dir: Some(dir), _registered: Some(registered) }),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                drop(registered);
                return Err(Error::io("cannot create a staging directory in", parent, e));
            }
            Err(e) => return Err(Error::io("cannot create a staging directory in", parent, e)),
        }
    }
}

/// Removes the staging directories of restores that died, and their
/// records; with `dry_run`, says what it would remove.
pub fn reap(root: &Root, dry_run: bool) -> Vec<Found> {
    let mut out = Vec::new();
    // `ROOT/restores` itself, never a symlink a run put in its place.
    let Ok(records) = Dir::open(root).and_then(|r| r.sub(RESTORES)) else { return out };
    let Ok(names) = records.entries_raw() else { return out };
    for (name, _) in names {
        let Some(token) = name.to_str().and_then(|n| n.strip_suffix(".json")) else { continue };
        if token.is_empty() || !token.bytes().all(|b| b.is_ascii_alphanumeric()) {
            continue;
        }
        out.push(reap_one(&records, token, dry_run));
    }
    out
}

fn reap_one(records: &Dir, token: &str, dry_run: bool) -> Found {
    let record_name = format!("{token}.json");
    let shown_record = crate::shown::os(records.join(&record_name).as_os_str());
    let done = |acted, message: String| Found { ok: true, acted, message };
    let failed = |message: String| Found { ok: false, acted: false, message };
    // The lock first: a held record is a live restore's.
    match records.abandoned(&record_name, false) {
        Ok(Leftover::Abandoned) => {}
        Ok(Leftover::Held) => return done(false, format!("kept `{shown_record}`: its restore is running")),
        Ok(Leftover::Gone) => return done(false, format!("record `{shown_record}`: already gone")),
        Ok(Leftover::NotAFile) => {
            return done(false, format!("kept `{shown_record}`: not a regular file runws wrote"));
        }
        Err(e) => return failed(format!("cannot read `{shown_record}`: {e}")),
    }
    let (record, writer) = match read_record(records, &record_name) {
        Some(r) => r,
        None => {
            return done(false, format!("kept `{shown_record}`: not a record runws wrote"));
        }
    };
    if crate::procinfo::is_same_process(record.pid, record.start_time) {
        return done(false, format!("kept `{shown_record}`: its restore (process {}) is alive", record.pid));
    }
    // Only root may act for the record's writer; anyone else, only for itself.
    let me = nix::unistd::geteuid();
    if !me.is_root() && writer.uid != me.as_raw() {
        return done(false, format!("kept `{shown_record}`: written by uid {}, not this user", writer.uid));
    }
    let staging = match checked_staging(&record, token) {
        Ok(p) => p,
        Err(why) => return done(false, format!("kept `{shown_record}`: {why}")),
    };
    let shown_staging = crate::shown::os(staging.as_os_str());
    let (parent, name) = match (staging.parent(), staging.file_name()) {
        (Some(p), Some(n)) => (p, n),
        _ => return done(false, format!("kept `{shown_record}`: no staging directory named")),
    };
    // From here on, file access has the writer's rights, not root's: what
    // the record names is removed only if its writer could remove it.
    let Some(_acting) = ActingAs::user(writer) else {
        return failed(format!("cannot take the file rights of uid {} for `{shown_record}`", writer.uid));
    };
    let parent = match open_no_symlink(parent) {
        Ok(Some(d)) => d,
        Ok(None) => return done(false, format!("kept `{shown_staging}`: a symlink is on the way")),
        Err(e) if is_not_found(&e) => {
            return remove_record(records, &record_name, dry_run, None, &shown_staging);
        }
        Err(e) => return failed(format!("cannot remove `{shown_staging}`: {e}")),
    };
    let present = match parent.lstat(name) {
        Ok(None) => false,
        Ok(Some(st)) if crate::fsx::kind(&st) == nix::sys::stat::SFlag::S_IFDIR => {
            if st.st_uid != writer.uid {
                return done(
                    false,
                    format!(
                        "kept `{shown_staging}`: owned by uid {}, not by the record's writer (uid {})",
                        st.st_uid, writer.uid
                    ),
                );
            }
            true
        }
        Ok(Some(_)) => return done(false, format!("kept `{shown_staging}`: not a directory")),
        Err(e) => return failed(format!("cannot remove `{shown_staging}`: {e}")),
    };
    remove_record(records, &record_name, dry_run, present.then_some((&parent, name)), &shown_staging)
}

fn remove_record(
    records: &Dir,
    record_name: &str,
    dry_run: bool,
    staging: Option<(&Dir, &OsStr)>,
    shown_staging: &str,
) -> Found {
    if dry_run {
        let message = match staging {
            Some(_) => format!("would remove the staging directory `{shown_staging}` of a restore that died"),
            None => format!("would remove the record of a restore that died (`{shown_staging}` is gone)"),
        };
        return Found { ok: true, acted: true, message };
    }
    if let Some((parent, name)) = staging
        && let Err(e) = parent.remove_tree(name)
    {
        return Found { ok: false, acted: false, message: format!("cannot remove `{shown_staging}`: {e}") };
    }
    // Under the record's lock, and only while nobody holds it.
    match records.abandoned(record_name, true) {
        Ok(_) => Found {
            ok: true,
            acted: true,
            message: match staging {
                Some(_) => format!("removed the staging directory `{shown_staging}` of a restore that died"),
                None => format!("removed the record of a restore that died (`{shown_staging}` was gone)"),
            },
        },
        Err(e) => {
            Found { ok: false, acted: false, message: format!("cannot remove a restore's record: {e}") }
        }
    }
}

fn is_not_found(e: &Error) -> bool {
    matches!(e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
}

/// Who wrote a record: its file's owner and group.
#[derive(Clone, Copy)]
struct Writer {
    uid: u32,
    gid: u32,
}

fn read_record(records: &Dir, name: &str) -> Option<(Record, Writer)> {
    use std::os::unix::fs::MetadataExt;
    let file = records.open_read(name).ok()??;
    let meta = file.metadata().ok()?;
    let writer = Writer { uid: meta.uid(), gid: meta.gid() };
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(file, MAX_RECORD), &mut bytes).ok()?;
    Some((serde_json::from_slice(&bytes).ok()?, writer))
}

/// This thread's file-system identity (`setfsuid`, `setfsgid`) set to a
/// record's writer while held, when root reaps a record another user
/// wrote: the kernel then grants root's reaper no more than that user's
/// rights (capabilities that bypass file permissions are dropped with a
/// non-zero fsuid). Nothing changes for a reaper that is not root, or for a
/// record root wrote.
struct ActingAs {
    restore: Option<(nix::unistd::Uid, nix::unistd::Gid)>,
}

impl ActingAs {
    /// `None` when the identity could not be taken.
    fn user(writer: Writer) -> Option<ActingAs> {
        use nix::unistd::{Gid, Uid, setfsgid, setfsuid};
        if !nix::unistd::geteuid().is_root() || writer.uid == 0 {
            return Some(ActingAs { restore: None });
        }
        let old_gid = setfsgid(Gid::from_raw(writer.gid));
        let old_uid = setfsuid(Uid::from_raw(writer.uid));
        let acting = ActingAs { restore: Some((old_uid, old_gid)) };
        // An id that is not valid changes nothing and returns the current one.
        let uid_now = setfsuid(Uid::from_raw(u32::MAX));
        let gid_now = setfsgid(Gid::from_raw(u32::MAX));
        (uid_now.as_raw() == writer.uid && gid_now.as_raw() == writer.gid).then_some(acting)
    }
}

impl Drop for ActingAs {
    fn drop(&mut self) {
        if let Some((uid, gid)) = self.restore {
            nix::unistd::setfsuid(uid);
            nix::unistd::setfsgid(gid);
        }
    }
}

/// The staging path a record names, when it is one this record's restore
/// would have made: absolute, plain components, named `.NAME.restore-TOKEN`.
fn checked_staging(record: &Record, token: &str) -> std::result::Result<PathBuf, &'static str> {
    let bytes = crate::hex::decode(&record.staging_hex).ok_or("its staging path is not hex")?;
    let path = PathBuf::from(OsStr::from_bytes(&bytes));
    if !path.is_absolute() {
        return Err("its staging path is not absolute");
    }
    if !path.components().skip(1).all(|c| matches!(c, Component::Normal(_))) {
        return Err("its staging path is not plain");
    }
    let name = path.file_name().ok_or("no staging directory named")?.as_bytes();
    let suffix = format!(".restore-{token}");
    if !(name.starts_with(b".") && name.ends_with(suffix.as_bytes()) && name.len() > suffix.len() + 1) {
        return Err("it names no staging directory of its restore");
    }
    Ok(path)
}

/// Opens the absolute directory `path` one component at a time, never
/// following a symlink; `None` when one is on the way.
fn open_no_symlink(path: &Path) -> Result<Option<Dir>> {
    let mut dir = Dir::open("/")?;
    for c in path.components().skip(1) {
        let Component::Normal(part) = c else { return Ok(None) };
        dir = match dir.sub(part) {
            Ok(d) => d,
            Err(Error::Symlink { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
    }
    Ok(Some(dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips() {
        let b = b"/tmp/caf\xe9/.x.restore-1";
        assert_eq!(crate::hex::decode(&crate::hex::encode(b)).unwrap(), b);
        assert!(crate::hex::decode("abc").is_none());
        assert!(crate::hex::decode("zz").is_none());
    }

    #[test]
    fn only_its_own_staging_name_is_accepted() {
        let rec = |p: &[u8]| Record {
            staging: String::new(),
            staging_hex: crate::hex::encode(p),
            pid: 0,
            start_time: 0,
        };
        assert!(checked_staging(&rec(b"/t/.out.restore-ab1"), "ab1").is_ok());
        for bad in [
            &b"/t/.out.restore-ab2"[..],
            b"/t/out.restore-ab1",
            b"t/.out.restore-ab1",
            b"/t/../.x.restore-ab1",
            b"/t/.restore-ab1",
        ] {
            assert!(checked_staging(&rec(bad), "ab1").is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }
}
