//! The index of runs: how `ls`, `show last` and `cat last` find runs without
//! reading every manifest.
//!
//! `ROOT/runs.index` (named by [`Root::run_index`]) is an append-only text
//! file, one line per event:
//!
//! - `run ID JOB MS`: a run was created (`runws run` appends it, with one
//!   `write(2)` on an `O_APPEND` descriptor, just before the run's first
//!   record is written): its id, its job (`-` when unknown) and its start
//!   time in milliseconds since the epoch (`-` when unknown).
//! - `stamp DEV INO CTIME MTIME NLINK`: the state of `ROOT/runs` (as
//!   fstat(2) gave it) at a moment when every run directory in it was named
//!   by a line before this one.
//!
//! The index is a HINT, never a record. It is read to know which runs exist
//! and in what order; everything shown of a run (its status above all) is
//! read from its manifest, and a run the index names whose directory is gone
//! is skipped. Every id read from the index is checked as strictly as a run
//! id on the command line, so a line cannot name a path outside `runs/`. No
//! fsync: a crash can lose lines, which the next reader puts back.
//!
//! A reader trusts the index only when its last stamp equals `ROOT/runs` as
//! it is now: a run directory made or removed since (by `runws run`, by an
//! older runws that knows nothing of the index, by hand, or by `reap`)
//! changes the directory's ctime and mtime (which nobody can set back: the
//! ctime is the kernel's), so the stamp no longer matches. The reader then
//! catches up: one pass over the names in `runs/` (getdents, no manifest
//! read), then the manifests of only the runs the index lacks; when it
//! lacks some, names runs that are gone, or holds a line it cannot parse,
//! the index is rewritten (sorted by start time, then id) into a temp file
//! and renamed over the old one. A stamp is written only when `runs/`'s
//! ctime is at least [`SETTLED`] old, so that a directory made in the same
//! clock tick as the stamped state cannot hide behind an equal ctime.
//!
//! Appends and rewrites never lose a line: a rewrite holds an exclusive
//! `flock` on the index it replaces (two rewrites never interleave), and
//! after the rename copies whatever was appended to the old file meanwhile;
//! an appender that finds, after its write, that the path names another
//! file (a rewrite renamed over it) appends its line again. A line twice is
//! harmless: a run is listed once, at its newest line.
//!
//! Only the fast path of `show last` and `ls --limit` trusts a matching
//! stamp ([`Newest`]); a listing that reads the whole index anyway checks
//! it against `runs/` first ([`verified`]), so a forged stamp (anyone who
//! can write ROOT can write one) hides no run from it, and a run it finds
//! missing is put back. Nothing the index is made of makes a reader wait
//! or read without bound: it is opened without blocking and only when a
//! regular file, a lock on it is waited for at most [`LOCK_WAIT`], a line
//! longer than [`MAX_LINE`] is not runws's, and an index over
//! [`MAX_INDEX`] is rebuilt from `runs/` alone.
//!
//! Order: newest first is the reverse of the index's order, which is the
//! order runs were created in (after a rewrite, by start time then id, as
//! `ls` always sorted).

use std::collections::HashSet;
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::sys::stat::{FileStat, fstat};

use crate::error::{IoContext, Result};
use crate::fsx::Dir;
use crate::manifest;
use crate::workspace::{self, Root};

/// How old the ctime of `ROOT/runs` must be before a stamp of it is
/// written: longer than any clock tick a file system's timestamps round to.
pub const SETTLED: Duration = Duration::from_millis(100);

/// How much of the index's end is read at a time, newest lines first.
const CHUNK: u64 = 64 * 1024;

/// One run as the index names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub id: String,
    /// The job, when known: a filter of candidates only (the manifest has
    /// the last word).
    pub job: Option<String>,
    /// Milliseconds since the epoch, when known.
    pub started_ms: Option<i64>,
}

impl Entry {
    fn line(&self) -> String {
        let job = self.job.as_deref().unwrap_or("-");
        match self.started_ms {
            Some(ms) => format!("run {} {job} {ms}\n", self.id),
            None => format!("run {} {job} -\n", self.id),
        }
    }

    fn key(&self) -> (i64, &str) {
        (self.started_ms.unwrap_or(i64::MIN), &self.id)
    }
}

/// The state of `ROOT/runs` a stamp records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    ctime: (i64, i64),
    mtime: (i64, i64),
    nlink: u64,
}

impl Stamp {
    fn of(st: &FileStat) -> Stamp {
        #[allow(clippy::useless_conversion, clippy::unnecessary_cast)]
        Stamp {
            dev: st.st_dev as u64,
            ino: st.st_ino as u64,
            ctime: (st.st_ctime as i64, st.st_ctime_nsec as i64),
            mtime: (st.st_mtime as i64, st.st_mtime_nsec as i64),
            nlink: st.st_nlink as u64,
        }
    }

    fn line(&self) -> String {
        format!(
            "stamp {} {} {}.{:09} {}.{:09} {}\n",
            self.dev, self.ino, self.ctime.0, self.ctime.1, self.mtime.0, self.mtime.1, self.nlink
        )
    }

    /// Whether the stamped ctime was at least [`SETTLED`] before `taken`.
    fn settled(&self, taken: SystemTime) -> bool {
        let Ok(now) = taken.duration_since(UNIX_EPOCH) else { return false };
        let now_ns = i128::from(now.as_secs() as i64) * 1_000_000_000 + i128::from(now.subsec_nanos());
        let ctime_ns = i128::from(self.ctime.0) * 1_000_000_000 + i128::from(self.ctime.1);
        now_ns - ctime_ns >= SETTLED.as_nanos() as i128
    }
}

/// A line of the index, parsed; `Err` for one that is not a line runws
/// writes (garbage, an id that is not a run id, a torn write).
#[derive(Debug, PartialEq, Eq)]
enum Line {
    Run(Entry),
    Stamp(Stamp),
}

fn parse_time_pair(s: &str) -> Option<(i64, i64)> {
    let (a, b) = s.split_once('.')?;
    if b.len() != 9 {
        return None;
    }
    let ns: i64 = b.parse().ok()?;
    Some((a.parse().ok()?, ns))
}

fn parse_line(line: &[u8]) -> std::result::Result<Line, ()> {
    let text = std::str::from_utf8(line).map_err(drop)?;
    let mut words = text.split(' ');
    let line = match words.next() {
        Some("run") => {
            let id = words.next().ok_or(())?;
            workspace::check_run_id(id).map_err(drop)?;
            let job = match words.next().ok_or(())? {
                "-" => None,
                j => {
                    workspace::check_job(j).map_err(drop)?;
                    Some(j.to_string())
                }
            };
            let started_ms = match words.next().ok_or(())? {
                "-" => None,
                ms => Some(ms.parse::<i64>().map_err(drop)?),
            };
            Line::Run(Entry { id: id.to_string(), job, started_ms })
        }
        Some("stamp") => {
            let mut next = || words.next().ok_or(());
            Line::Stamp(Stamp {
                dev: next()?.parse().map_err(drop)?,
                ino: next()?.parse().map_err(drop)?,
                ctime: parse_time_pair(next()?).ok_or(())?,
                mtime: parse_time_pair(next()?).ok_or(())?,
                nlink: next()?.parse().map_err(drop)?,
            })
        }
        _ => return Err(()),
    };
    if words.next().is_some() {
        return Err(());
    }
    Ok(line)
}

/// Appends `run ID JOB MS` for a run just created. Best effort: the index
/// is a hint, and a line that could not be written is put back by the next
/// reader (the run's directory changed `runs/`, so no stamp matches).
///
/// `before` is `runs/` as it was just before the run's directory was made.
/// When the index's last stamp is that state, and `runs/` now holds exactly
/// one directory more (its link count), the stamp is carried forward: a
/// stamp of `runs/` now follows the run's line, so the next reader trusts
/// the index at once instead of catching up. Done under the index's lock,
/// taken without waiting: when a rewrite holds it, the line alone is
/// appended, as without `before`. (What this cannot see: a directory made
/// by something that does not write the index while another is removed, in
/// the instant between `before` and now; deleting the index makes the next
/// reader rebuild it.)
pub fn record(root: &Root, id: &str, job: &str, started: SystemTime, before: Option<&FileStat>) {
    let started_ms = started.duration_since(UNIX_EPOCH).ok().and_then(|d| i64::try_from(d.as_millis()).ok());
    let entry = Entry { id: id.to_string(), job: Some(job.to_string()), started_ms };
    let path = root.run_index();
    if let Some(before) = before
        && append_stamped(root, &path, entry.line().as_bytes(), Stamp::of(before)).is_ok()
    {
        return;
    }
    let _ = append(&path, entry.line().as_bytes());
}

/// See [`record`]: `line`, then a stamp when `before` chains; an error when
/// the index could not be locked or written (the caller appends the line
/// alone).
fn append_stamped(root: &Root, path: &Path, line: &[u8], before: Stamp) -> std::io::Result<()> {
    let mut file = open_for_append(path, true)?;
    let ours = file.metadata()?;
    rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive)?;
    if !still_named(path, &ours) {
        return Err(std::io::Error::other("replaced"));
    }
    // Its length now that no rewrite or stamping appender runs meanwhile.
    let last = last_stamp(&file, file.metadata()?.len())?;
    let mut text = line.to_vec();
    if last == Some(before) {
        let now = Stamp::of(&nix::sys::stat::lstat(&root.runs_path())?);
        if (now.dev, now.ino) == (before.dev, before.ino) && now.nlink == before.nlink + 1 {
            text.extend_from_slice(now.line().as_bytes());
        }
    }
    file.write_all(&text)
}

/// The last stamp among the last 4 KiB of the index (`len` long), when
/// the lines after it parse. Runs started at the same moment leave a few
/// lines after a stamp; an index with no stamp that near its end is behind
/// already, and this stays cheap on every run's start whatever the index's
/// size.
fn last_stamp(file: &File, len: u64) -> std::io::Result<Option<Stamp>> {
    let start = len.saturating_sub(4096);
    let mut buf = vec![0u8; (len - start) as usize];
    file.read_exact_at(&mut buf, start)?;
    // The first line may be cut by the chunk's start; the last one, torn.
    let Some(end) = buf.iter().rposition(|&b| b == b'\n') else { return Ok(None) };
    for line in buf[..end].rsplit(|&b| b == b'\n') {
        match parse_line(line) {
            Ok(Line::Stamp(s)) => return Ok(Some(s)),
            Ok(Line::Run(_)) => {}
            Err(()) => return Ok(None),
        }
    }
    Ok(None)
}

/// Appends `line` in one write; again to the file the path names now when a
/// rewrite replaced the file it was written to.
fn append(path: &Path, line: &[u8]) -> std::io::Result<()> {
    for _ in 0..4 {
        let mut file = open_for_append(path, false)?;
        file.write_all(line)?;
        if still_named(path, &file.metadata()?) {
            return Ok(());
        }
    }
    Ok(())
}

mod libc_flags {
    /// `O_NOFOLLOW | O_NONBLOCK`: the index is never opened through a
    /// symlink, and a fifo or device left in its place cannot make the open
    /// wait (it is then refused as not a regular file; on a regular file
    /// the flag changes nothing).
    pub const NOFOLLOW: i32 = nix::fcntl::OFlag::O_NOFOLLOW.bits() | nix::fcntl::OFlag::O_NONBLOCK.bits();
}

/// The longest line runws writes is well under this: a longer one is not
/// a line of runws's (and is never read whole).
const MAX_LINE: usize = 4096;

/// An index larger than this is not read: it is rebuilt from `runs/`
/// (about 4 million runs' lines).
const MAX_INDEX: u64 = 256 << 20;

/// The runs of the index, newest first, read lazily from the end of the
/// file while its last stamp holds; caught up from `runs/` otherwise.
pub struct Newest<'a> {
    root: &'a Root,
    runs: &'a Dir,
    seen: HashSet<String>,
    state: State,
}

enum State {
    /// Lines not yet read lie before the tail's position.
    Tail(Tail),
    /// A caught-up list, oldest first; popped from its end.
    Listed(Vec<Entry>),
}

impl<'a> Newest<'a> {
    /// Opens the index of `root`, whose `runs/` is `runs`.
    pub fn open(root: &'a Root, runs: &'a Dir) -> Result<Newest<'a>> {
        let mut me = Newest { root, runs, seen: HashSet::new(), state: State::Listed(Vec::new()) };
        me.state = match me.trusted_tail()? {
            Some(tail) => State::Tail(tail),
            None => State::Listed(catch_up(root, runs)?),
        };
        Ok(me)
    }

    /// The tail of the index, when its last stamp equals `runs/` now; the
    /// run lines after that stamp are put back to be read again.
    fn trusted_tail(&self) -> Result<Option<Tail>> {
        let now = Stamp::of(&fstat(self.runs.borrow()).ctx("cannot read", self.runs.path())?);
        let file = match open_index(&self.root.run_index()) {
            Some(f) => f,
            None => return Ok(None),
        };
        let mut tail = Tail::new(file)?;
        let start = tail.mark();
        loop {
            match tail.next_line()? {
                None => return Ok(None),
                Some(line) => match parse_line(&line) {
                    Ok(Line::Stamp(s)) if s == now => {
                        tail.reset(start);
                        return Ok(Some(tail));
                    }
                    Ok(Line::Stamp(_)) | Err(()) => return Ok(None),
                    Ok(Line::Run(_)) => {}
                },
            }
        }
    }

    /// The next run, newest first, each once.
    pub fn next_entry(&mut self) -> Result<Option<Entry>> {
        loop {
            let next = match &mut self.state {
                State::Listed(list) => list.pop(),
                State::Tail(tail) => match tail.next_line()? {
                    None => None,
                    Some(line) => match parse_line(&line) {
                        Ok(Line::Run(e)) => Some(e),
                        Ok(Line::Stamp(_)) => continue,
                        Err(()) => {
                            // A line the index should not hold: caught up
                            // from runs/, and the rest listed from that.
                            let mut list = catch_up(self.root, self.runs)?;
                            list.retain(|e| !self.seen.contains(&e.id));
                            self.state = State::Listed(list);
                            continue;
                        }
                    },
                },
            };
            match next {
                None => return Ok(None),
                Some(e) if self.seen.insert(e.id.clone()) => return Ok(Some(e)),
                Some(_) => {}
            }
        }
    }
}

/// Every run, oldest first: the whole index, checked against the names in
/// `runs/` (and brought up to date) whatever its stamp says, so a forged
/// stamp hides no run from a listing that reads it all.
pub fn verified(root: &Root, runs: &Dir) -> Result<Vec<Entry>> {
    catch_up(root, runs)
}

/// Opens the index for reading: a regular file, never through a symlink.
fn open_index(path: &Path) -> Option<File> {
    regular(std::fs::OpenOptions::new().read(true).custom_flags(libc_flags::NOFOLLOW).open(path)).ok()
}

/// Opens the index to append to it (made when missing; with `read`, to be
/// read too): a regular file only, as [`open_index`].
fn open_for_append(path: &Path, read: bool) -> std::io::Result<File> {
    regular(
        std::fs::OpenOptions::new()
            .read(read)
            .append(true)
            .create(true)
            .mode(0o600)
            .custom_flags(libc_flags::NOFOLLOW)
            .open(path),
    )
}

/// `opened`, when it is a regular file.
fn regular(opened: std::io::Result<File>) -> std::io::Result<File> {
    let file = opened?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    Ok(file)
}

/// Whether `path` still names the file `ours` describes (no rewrite renamed
/// another over it).
fn still_named(path: &Path, ours: &std::fs::Metadata) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|now| (now.dev(), now.ino()) == (ours.dev(), ours.ino()))
}

/// Reads a file's lines from its end. An unterminated last line (a write
/// under way, or torn by a full disk) is not read.
struct Tail {
    file: File,
    /// Bytes before `pos` are not read yet.
    pos: u64,
    /// Read bytes not yet handed out: whole lines, the last without its
    /// newline; the first may be partial while `pos > 0`.
    carry: Vec<u8>,
}

impl Tail {
    fn new(file: File) -> Result<Tail> {
        let len = file.metadata().ctx("cannot read", "runs.index")?.len();
        let mut tail = Tail { file, pos: len, carry: Vec::new() };
        // Drop an unterminated last line.
        loop {
            if let Some(nl) = tail.carry.iter().rposition(|&b| b == b'\n') {
                tail.carry.truncate(nl);
                return Ok(tail);
            }
            if tail.pos == 0 {
                tail.carry.clear();
                return Ok(tail);
            }
            tail.read_before()?;
        }
    }

    /// Reads the chunk before those read. A line longer than [`MAX_LINE`]
    /// is not read on: it becomes one line that is not runws's (so the
    /// reader catches up), and nothing before it is read.
    fn read_before(&mut self) -> Result<()> {
        // Called when what is held has no newline: one line, still partial.
        if self.carry.len() > MAX_LINE {
            self.carry = vec![0];
            self.pos = 0;
            return Ok(());
        }
        let start = self.pos.saturating_sub(CHUNK);
        let mut buf = vec![0u8; (self.pos - start) as usize];
        self.file.read_exact_at(&mut buf, start).ctx("cannot read", "runs.index")?;
        buf.extend_from_slice(&self.carry);
        self.carry = buf;
        self.pos = start;
        Ok(())
    }

    fn mark(&self) -> (u64, Vec<u8>) {
        (self.pos, self.carry.clone())
    }

    fn reset(&mut self, (pos, carry): (u64, Vec<u8>)) {
        self.pos = pos;
        self.carry = carry;
    }

    /// The line before those handed out, without its newline.
    fn next_line(&mut self) -> Result<Option<Vec<u8>>> {
        loop {
            if let Some(nl) = self.carry.iter().rposition(|&b| b == b'\n') {
                let line = self.carry.split_off(nl + 1);
                self.carry.truncate(nl);
                return Ok(Some(line));
            }
            if self.pos == 0 {
                if self.carry.is_empty() {
                    return Ok(None);
                }
                return Ok(Some(std::mem::take(&mut self.carry)));
            }
            self.read_before()?;
        }
    }
}

/// How long a reader waits for another's rewrite of the index (0.4 s at
/// 100,000 runs on a busy machine) before it lists without one.
const LOCK_WAIT: Duration = Duration::from_secs(2);

/// The index opened for a rewrite: exclusively locked, and still the file
/// the path names.
fn lock_index(path: &Path) -> Option<File> {
    for _ in 0..8 {
        let file = open_for_append(path, true).ok()?;
        // Bounded: a lock held for longer (by anyone who can open the
        // index) leaves the runs listed from runs/ without a rewrite.
        let deadline = std::time::Instant::now() + LOCK_WAIT;
        while rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
            if std::time::Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        // Else replaced by another rewrite while this one waited: that file.
        if still_named(path, &file.metadata().ok()?) {
            return Some(file);
        }
    }
    None
}

/// Brings the index up to date with `runs/`: returns every run, oldest
/// first. Rewrites the index when it lacks runs, names runs that are gone,
/// or holds a line runws does not write; appends a stamp when it was
/// complete. When the index cannot be written, the runs are still listed.
fn catch_up(root: &Root, runs: &Dir) -> Result<Vec<Entry>> {
    let path = root.run_index();
    let locked = lock_index(&path);
    let taken = SystemTime::now();
    let stamp = Stamp::of(&fstat(runs.borrow()).ctx("cannot read", runs.path())?);
    let names: HashSet<String> =
        runs.entries()?.into_iter().filter(|n| workspace::check_run_id(n).is_ok()).collect();

    let mut bytes = Vec::new();
    if let Some(f) = &locked {
        // What it held when locked, and only when not absurdly large: a
        // file grown beyond that is rebuilt from runs/ alone.
        let len = f.metadata().ctx("cannot read", &path)?.len();
        if len <= MAX_INDEX {
            f.take(len).read_to_end(&mut bytes).ctx("cannot read", &path)?;
        } else {
            bytes.extend_from_slice(b"\0\n");
        }
    }
    let read_len = bytes.len() as u64;
    let (mut entries, clean) = parse_all(&bytes);
    let listed: HashSet<&str> = entries.iter().map(|e| e.id.as_str()).collect();
    let mut missing: Vec<Entry> =
        names.iter().filter(|n| !listed.contains(n.as_str())).map(|id| from_manifest(runs, id)).collect();
    let before = entries.len();
    entries.retain(|e| names.contains(&e.id));
    let stale = entries.len() != before;
    let settled = stamp.settled(taken);

    if missing.is_empty() && !stale && clean {
        if settled && let Some(mut f) = locked.as_ref() {
            let _ = f.write_all(stamp.line().as_bytes());
        }
        return Ok(entries);
    }
    entries.append(&mut missing);
    entries.sort_by(|a, b| a.key().cmp(&b.key()));
    let mut text = String::with_capacity(entries.len() * 64);
    for e in &entries {
        text.push_str(&e.line());
    }
    if settled {
        text.push_str(&stamp.line());
    }
    if let Some(old) = &locked
        && let Some(appended) = rewrite(&path, old, read_len, text.as_bytes())
    {
        let (more, _) = parse_all(&appended);
        let known: HashSet<String> = entries.iter().map(|e| e.id.clone()).collect();
        entries.extend(
            more.into_iter().filter(|e| !known.contains(&e.id) && runs.lstat(&e.id).ok().flatten().is_some()),
        );
    }
    Ok(entries)
}

/// Replaces the index by `text` (temp file, then rename); returns what was
/// appended to the old file after its first `read_len` bytes were read,
/// which is copied into the new one.
fn rewrite(path: &Path, old: &File, read_len: u64, text: &[u8]) -> Option<Vec<u8>> {
    let parent = path.parent()?;
    let name = path.file_name()?;
    let dir = Dir::open(parent).ok()?;
    let (tmp, mut file) = dir.create_temp(name, 0o600).ok()?;
    if file.write_all(text).is_err() || dir.rename(&tmp, name).is_err() {
        let _ = dir.unlink(&tmp);
        return None;
    }
    // Appenders that wrote to the old file before the rename: their lines.
    let mut appended = Vec::new();
    let mut r = old;
    use std::io::Seek;
    r.seek(std::io::SeekFrom::Start(read_len)).ok()?;
    r.take(MAX_INDEX).read_to_end(&mut appended).ok()?;
    if let Some(nl) = appended.iter().rposition(|&b| b == b'\n') {
        appended.truncate(nl + 1);
        let _ = file.write_all(&appended);
    } else {
        appended.clear();
    }
    Some(appended)
}

/// The run lines of `bytes`, each id once (at its last line), oldest
/// first; and whether every line was one runws writes (an unterminated last
/// line is not read, and not counted against it).
fn parse_all(bytes: &[u8]) -> (Vec<Entry>, bool) {
    let whole = match bytes.iter().rposition(|&b| b == b'\n') {
        Some(nl) => &bytes[..nl],
        None => &bytes[..0],
    };
    let mut clean = true;
    let mut entries = Vec::new();
    if !whole.is_empty() || bytes.first() == Some(&b'\n') {
        for line in whole.split(|&b| b == b'\n') {
            match parse_line(line) {
                Ok(Line::Run(e)) => entries.push(e),
                Ok(Line::Stamp(_)) => {}
                Err(()) => clean = false,
            }
        }
    }
    // Each id once, at its newest line.
    let mut seen = HashSet::new();
    let mut kept: Vec<Entry> = entries.into_iter().rev().filter(|e| seen.insert(e.id.clone())).collect();
    kept.reverse();
    (kept, clean)
}

/// The index's line for a run it lacks, from the run's manifest (job and
/// start unknown when it cannot be read).
fn from_manifest(runs: &Dir, id: &str) -> Entry {
    let m = runs.sub(id).and_then(|d| manifest::read(&d)).ok();
    let job = m.as_ref().map(|m| m.job.clone()).filter(|j| workspace::check_job(j).is_ok());
    let started_ms = m
        .as_ref()
        .and_then(|m| manifest::parse_time(&m.started_at))
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .and_then(|d| i64::try_from(d.as_millis()).ok());
    Entry { id: id.to_string(), job, started_ms }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip_and_garbage_is_refused() {
        let e = Entry { id: "r1".into(), job: Some("nightly".into()), started_ms: Some(1_700_000_000_123) };
        let line = e.line();
        assert_eq!(parse_line(line.trim_end().as_bytes()), Ok(Line::Run(e)));
        let unknown = Entry { id: "r2".into(), job: None, started_ms: None };
        assert_eq!(parse_line(unknown.line().trim_end().as_bytes()), Ok(Line::Run(unknown)));
        let s = Stamp { dev: 1, ino: 2, ctime: (3, 4), mtime: (5, 6), nlink: 7 };
        assert_eq!(parse_line(s.line().trim_end().as_bytes()), Ok(Line::Stamp(s)));
        for bad in [
            "run ../x job 1",
            "run .. job 1",
            "run a/b job 1",
            "run x ../j 1",
            "run x j one",
            "run x j 1 extra",
            "run x j",
            "stamp 1 2 3 4 5",
            "stamp 1 2 3.4 5.6 7",
            "",
            "garbage",
            "run \u{e9} j 1",
        ] {
            assert!(parse_line(bad.as_bytes()).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn parse_all_keeps_each_id_once_at_its_newest_line_and_skips_a_torn_end() {
        let text = b"run a j 1\nrun b j 2\nrun a j 3\nrun c j 4";
        let (entries, clean) = parse_all(text);
        let ids: Vec<&str> = entries.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, ["b", "a"]);
        assert!(clean);
        let (_, clean) = parse_all(b"run a j 1\nnonsense\n");
        assert!(!clean);
    }

    #[test]
    fn the_tail_reads_lines_backwards_across_chunks() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("i");
        let mut text = String::new();
        for i in 0..20_000 {
            text.push_str(&format!("run r{i} j {i}\n"));
        }
        text.push_str("run torn j");
        std::fs::write(&path, &text).unwrap();
        let mut tail = Tail::new(File::open(&path).unwrap()).unwrap();
        let mut n = 20_000;
        while let Some(line) = tail.next_line().unwrap() {
            n -= 1;
            assert_eq!(line, format!("run r{n} j {n}").into_bytes());
        }
        assert_eq!(n, 0);
    }

    #[test]
    fn a_stamp_is_settled_only_well_after_the_ctime() {
        let s = Stamp { dev: 1, ino: 2, ctime: (100, 0), mtime: (100, 0), nlink: 3 };
        assert!(!s.settled(UNIX_EPOCH + Duration::from_millis(100_050)));
        assert!(s.settled(UNIX_EPOCH + Duration::from_millis(100_100)));
    }
}
