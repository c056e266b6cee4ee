//! runws's own copy of the record of the run it is running.
//!
//! Outside a sandbox the command can rewrite `manifest.json`, so the record
//! on disk cannot be the only copy of what runws knows. `runws run` keeps the
//! fields it alone writes (the run id, job, command, processes, lease,
//! status and how the command ended, and its `lease`, `net`, `pings`,
//! `sandbox` and `worktree` records) in memory, and each of its writes (the lease renewal,
//! the final record) puts them back over whatever is on disk: a command that
//! edits them, or the whole file, cannot change what runws records, and it
//! cannot keep runws from recording how it ended. What the guard records
//! (outputs, imports, claims, refusals) is kept from disk, entry by entry,
//! when it passes the same checks every reader makes; an entry that does not
//! is dropped, and so is any other record of runws's (a checkpoint, an
//! audit) that does not read as its type. Each restoration is recorded
//! under `restored`: when, which fields, which entries were dropped, and why
//! the file could not be read when it could not.
//!
//! A run that is not `running` on disk was taken over by the reaper, and
//! runws leaves that record as it is, but only when runws's lease did run out
//! at some point (runws was stopped or starved past it): while runws renews
//! its lease in time no reaper takes the run over, so a different status is
//! the command's own edit and is put back like any other.

use std::time::SystemTime;

use serde_json::{Map, Value};

use super::records::{RECORDS, RefusedRecord, RestoredRecord};
use super::{
    Claim, InputRecord, MANIFEST, Manifest, OutputRecord, Status, format_time, parse_time, read_bytes,
};
use crate::error::Result;
use crate::fsx::{Dir, Reserved};

/// The fields `runws run` alone writes. `reap` is the reaper's, but while
/// runws holds its lease no reaper writes it: one on disk then is forged.
const OWNED: &[&str] = &[
    "schema",
    "run_id",
    "job",
    "argv",
    "program",
    "cwd",
    "invoked_from",
    "host",
    "uid",
    "runws",
    "child",
    "started_at",
    "finished_at",
    "status",
    "exit_code",
    "signal",
    "error",
    "lease_ttl_ms",
    "lease_until",
    "timeout_ms",
    "env",
    "ports",
    "listen",
    "capture",
    "fingerprint",
    "reap",
    "lease",
    "net",
    "pings",
    "sandbox",
    "worktree",
    "allow_import",
    "replay_of",
    "replay",
    "resources",
    "restored",
];

/// True for a field `runws run` alone writes.
pub(super) fn is_owned(key: &str) -> bool {
    OWNED.contains(&key)
}

/// How long the final record waits for the run directory's lock.
const FINAL_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// At most this many restorations are listed; the last entry is the latest.
const MAX_RESTORED: usize = 20;

/// At most this many dropped entries are listed in one restoration, each
/// in at most [`MAX_NOTE`] bytes: a restoration has a bounded size.
const MAX_DROPPED: usize = 8;
const MAX_NOTE: usize = 300;

/// `s` cut to at most [`MAX_NOTE`] bytes (at a character boundary).
fn clip(s: &str) -> String {
    if s.len() <= MAX_NOTE {
        return s.to_string();
    }
    let mut end = MAX_NOTE - 3;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// The record of a run, as its runws last wrote it.
pub struct Owner {
    m: Manifest,
    /// The lease this runws last wrote: until then no reaper takes over.
    held_until: Option<SystemTime>,
    /// True once the lease ran out before runws renewed it.
    lapsed: bool,
}

/// What was found on disk and had to be put back.
#[derive(Default)]
struct Restoration {
    fields: Vec<String>,
    dropped: Vec<String>,
    why: Option<String>,
}

impl Owner {
    /// Takes over the record runws has just written as the run's first.
    pub fn new(m: Manifest) -> Owner {
        let held_until = parse_time(&m.lease_until);
        Owner { m, held_until, lapsed: false }
    }

    /// The record as runws last wrote it.
    pub fn record(&self) -> &Manifest {
        &self.m
    }

    /// Read-modify-write under the run directory's lock, as
    /// [`super::update`], with runws's own fields put back first.
    pub fn update<T>(
        &mut self,
        dir: &Dir,
        durable: bool,
        change: impl FnOnce(&mut Manifest) -> Result<T>,
    ) -> Result<T> {
        let _lock = dir.lock()?;
        let (mut m, taken_over) = self.current(dir);
        let value = change(&mut m)?;
        // The final record grows with this one; a full disk stops neither.
        let _ = super::grow_reservation(dir, m.to_json().len());
        super::write(dir, &m, durable)?;
        self.written(m, taken_over);
        Ok(value)
    }

    /// [`Owner::update`] while the command runs: the command can hold the
    /// run directory's lock (`flock` on it) as long as it likes, so runws
    /// waits at most `wait` and skips this change (`None`) rather than stop
    /// forwarding signals and enforcing `--timeout` behind it.
    pub fn update_within<T>(
        &mut self,
        dir: &Dir,
        wait: std::time::Duration,
        change: impl FnOnce(&mut Manifest) -> Result<T>,
    ) -> Result<Option<T>> {
        let Some(_lock) = dir.lock_within(wait)? else { return Ok(None) };
        let (mut m, taken_over) = self.current(dir);
        let value = change(&mut m)?;
        let _ = super::grow_reservation(dir, m.to_json().len());
        super::write(dir, &m, false)?;
        self.written(m, taken_over);
        Ok(Some(value))
    }

    /// [`Owner::update`] through a temp file made by [`super::reserve`]: the
    /// run's final record, durable with one flush instead of two. The temp
    /// file's entry reached the disk when it was reserved, so syncing the file
    /// makes the record durable under that name; the rename over
    /// `manifest.json` reaches the disk later, and until it does
    /// [`super::read`] takes the record from the temp file. A lock a process
    /// left behind by the command still holds is waited for a while, then
    /// gone without: runws's fields are put back whatever the file holds, so
    /// the end is recorded all the same.
    pub fn update_reserved<T>(
        &mut self,
        dir: &Dir,
        slot: Reserved<'_>,
        change: impl FnOnce(&mut Manifest) -> Result<T>,
    ) -> Result<T> {
        let _lock = dir.lock_within(FINAL_LOCK_WAIT)?;
        if _lock.is_none() {
            eprintln!(
                "runws: warning: `{}` stayed locked (by a process the command left?); recording the end without the lock",
                dir.path().display()
            );
        }
        let (mut m, taken_over) = self.current(dir);
        let value = change(&mut m)?;
        // On a full disk a record that outgrew its reserved space is cut to
        // fit (see [`super::fitted`]); what was written is runws's copy.
        let (bytes, cut) = super::write_reserved(dir, slot, &m, false)?;
        if cut && let Ok(smaller) = super::parse(&bytes, &dir.join(MANIFEST)) {
            m = smaller;
        }
        // The slot is renamed by name, and the command can put a file of its
        // own under that name: then the record is written again, durably,
        // through a temp file of a fresh name.
        if read_bytes(dir, MANIFEST).ok().flatten().as_deref() != Some(bytes.as_slice()) {
            super::write(dir, &m, true)?;
        }
        self.written(m, taken_over);
        Ok(value)
    }

    /// After a write: what runws wrote is its copy from now on (unless the
    /// record was a reaper's, which runws leaves alone).
    fn written(&mut self, m: Manifest, taken_over: bool) {
        if taken_over {
            return;
        }
        if m.status == Status::Running {
            self.held_until = parse_time(&m.lease_until);
        }
        self.m = m;
    }

    /// The record to change: the one on disk with runws's fields put back,
    /// or the one on disk as it is when a reaper took the run over; true
    /// for the latter.
    fn current(&mut self, dir: &Dir) -> (Manifest, bool) {
        let now = SystemTime::now();
        if self.held_until.is_none_or(|t| now > t) {
            self.lapsed = true;
        }
        let path = dir.join(MANIFEST);
        let bytes = read_bytes(dir, MANIFEST)
            .map_err(|e| e.to_string())
            .and_then(|b| b.ok_or_else(|| "it was missing".to_string()));
        let disk =
            bytes.as_ref().map_err(Clone::clone).and_then(|b| match serde_json::from_slice::<Value>(b) {
                Ok(Value::Object(map)) => Ok(map),
                Ok(_) => Err("it is not a JSON object".to_string()),
                Err(e) => Err(format!("it is not JSON: {e}")),
            });
        // A reaper takes a run over only when its runws is gone, and one on
        // the run's host can see that this runws is alive: a takeover comes
        // from a reaper on another host (a root shared between hosts), which
        // records itself. A status changed with no such record is the
        // command's own edit (it can stop runws past its lease): put back.
        if self.lapsed
            && let Ok(map) = &disk
            && map.get("status").and_then(Value::as_str).is_some_and(|s| s != Status::Running.as_str())
            && let Ok(b) = &bytes
            && let Ok(m) = super::parse(b, &path)
            && m.run_id == self.m.run_id
            && m.reap.as_ref().and_then(|r| r.reaped_by.rsplit_once(':')).is_some_and(|(by, _)| by != m.host)
        {
            return (m, true);
        }
        let mut note = Restoration::default();
        let m = match disk {
            Ok(map) => self.restore(map, &mut note).unwrap_or_else(|why| {
                note.why = Some(why);
                self.m.clone()
            }),
            Err(why) => {
                note.why = Some(why);
                self.m.clone()
            }
        };
        (self.noted(m, note, now), false)
    }

    /// `disk` with every field runws owns put back, entries of the guard's
    /// lists that fail their checks dropped, and runws's own inputs and
    /// claims put back among the guard's.
    fn restore(
        &self,
        mut disk: Map<String, Value>,
        note: &mut Restoration,
    ) -> std::result::Result<Manifest, String> {
        let Value::Object(mine) = serde_json::to_value(&self.m).map_err(|e| e.to_string())? else {
            return Err("runws's own record is not an object".into());
        };
        for key in OWNED {
            let (was, is) = (disk.get(*key), mine.get(*key));
            if was != is {
                note.fields.push((*key).to_string());
                match is {
                    Some(v) => disk.insert((*key).to_string(), v.clone()),
                    None => disk.remove(*key),
                };
            }
        }
        let run_id = self.m.run_id.as_str();
        keep_valid::<OutputRecord>(&mut disk, "outputs", note, |o, i| o.validate(i, run_id));
        keep_valid::<InputRecord>(&mut disk, "inputs", note, InputRecord::validate);
        keep_valid::<Claim>(&mut disk, "claims", note, Claim::validate);
        keep_valid::<RefusedRecord>(&mut disk, "refused", note, |_, _| Ok(()));
        // Any other record of runws's that does not read as its type goes
        // whole (the ones runws owns were put back above).
        for (field, check) in RECORDS {
            if let Some(value) = disk.get(*field).filter(|v| !v.is_null())
                && let Err(why) = check(value)
            {
                note.dropped.push(super::bad(field, why));
                disk.remove(*field);
            }
        }
        let mut m: Manifest = serde_json::from_value(Value::Object(disk)).map_err(|e| e.to_string())?;
        // The inputs runws copied in are its own; imports are the guard's.
        // An import recorded under the path of one of runws's own inputs is
        // a forgery: runws's entry wins.
        let own: Vec<InputRecord> = self.m.inputs.iter().filter(|i| i.from_run.is_none()).cloned().collect();
        m.inputs.retain(|i| i.from_run.is_some() && !own.iter().any(|o| o.path == i.path));
        m.inputs.extend(own);
        m.inputs.sort_by(|a, b| a.path.cmp(&b.path));
        m.inputs.dedup_by(|a, b| a.path == b.path);
        let fingerprint = crate::fingerprint::combine(&m.inputs);
        if m.input_fingerprint != fingerprint {
            note.fields.push("input_fingerprint".into());
            m.input_fingerprint = fingerprint;
        }
        for c in &self.m.claims {
            if !m.claims.iter().any(|d| d.kind == c.kind && d.value == c.value && d.repo == c.repo) {
                m.claims.push(c.clone());
            }
        }
        m.validate()?;
        Ok(m)
    }

    /// `m` with the restoration recorded, when there was one.
    fn noted(&self, mut m: Manifest, note: Restoration, now: SystemTime) -> Manifest {
        if note.fields.is_empty() && note.dropped.is_empty() && note.why.is_none() {
            return m;
        }
        let more = note.dropped.len().saturating_sub(MAX_DROPPED);
        let mut dropped: Vec<String> = note.dropped.iter().take(MAX_DROPPED).map(|d| clip(d)).collect();
        if more > 0 {
            dropped.push(format!("and {more} more"));
        }
        let entry = RestoredRecord {
            at: format_time(now),
            dropped,
            fields: note.fields,
            why: note.why.as_deref().map(|why| {
                format!("the manifest could not be read ({}); rewritten from runws's own record", clip(why))
            }),
            extra: Map::new(),
        };
        let mut list = self.m.restored.clone().unwrap_or_default();
        list.truncate(MAX_RESTORED - 1);
        list.push(entry);
        m.restored = Some(list);
        m
    }
}

/// Keeps the entries of the list `key` that parse and pass `check`; notes
/// the others as dropped. Anything but a list becomes an empty list.
fn keep_valid<T: serde::de::DeserializeOwned>(
    disk: &mut Map<String, Value>,
    key: &str,
    note: &mut Restoration,
    check: impl Fn(&T, usize) -> std::result::Result<(), String>,
) {
    let entries = match disk.remove(key) {
        None => return,
        Some(Value::Array(a)) => a,
        Some(_) => {
            note.dropped.push(format!("{key}: not a list"));
            Vec::new()
        }
    };
    let mut kept = Vec::new();
    for (i, v) in entries.into_iter().enumerate() {
        match serde_json::from_value::<T>(v.clone()) {
            Ok(t) => match check(&t, i) {
                Ok(()) => kept.push(v),
                Err(why) => note.dropped.push(why),
            },
            Err(e) => note.dropped.push(format!("{key}[{i}]: {e}")),
        }
    }
    disk.insert(key.to_string(), Value::Array(kept));
}
