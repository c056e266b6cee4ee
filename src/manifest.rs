//! The run's record: serde types, and the one way to change it.
//!
//! Every change is a read-modify-write under an exclusive `flock` on the run
//! directory, written to a temp file, synced and renamed over
//! `manifest.json`. runws (which renews the lease and records the end) and the
//! guard calls of the child (which record outputs and imports) therefore
//! never lose each other's writes, and a reader without the lock sees the old
//! manifest or the new one, never a mix. Fields this version does not know
//! are kept as they are.
//!
//! Outside a sandbox the command can rewrite its manifest, so every read
//! checks each value a later command uses to name a path or a process
//! ([`Manifest::validate`], and the run id against the directory's name): a
//! manifest that fails is unreadable, and the error names the field. runws
//! itself writes through an [`Owner`], which puts back the fields it owns.
//!
//! The records other parts of runws add (lease, worktree, sandbox, audit,
//! checkpoint, refusals, restorations) are typed fields too, each written
//! where earlier versions wrote it (see [`records`]); `extra` holds only the
//! fields of newer versions.

use serde::{Deserialize, Serialize};
use std::ffi::OsStr;
use std::time::{Duration, SystemTime};

use crate::error::{Error, Result};
use crate::fsx::{Dir, DirLock, Reserved};
use crate::osname::OsName;
use crate::workspace::{FINAL_TEMP, MANIFEST};

pub mod net;
mod owned;
mod records;
pub mod sandbox;
pub use owned::Owner;
pub use records::{
    Checkpoint, ClaimKind, LeaseRecord, OutputComparison, PingRecord, RefusedRecord, ReplayComparison,
    ReplayOf, ResourcesRecord, RestoredRecord, Source, Truncated, WorktreeRecord,
};

/// The manifest schema this runws writes.
pub const SCHEMA: u32 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// runws has started the child and is waiting for it.
    Running,
    /// The child exited with status 0.
    Succeeded,
    /// The child exited non-zero, or could not be started.
    Failed,
    /// A signal ended the child.
    Killed,
    /// `--timeout` ran out.
    TimedOut,
    /// The kernel's out-of-memory killer ended a process of the run's
    /// control group (`--memory`), and the command did not succeed.
    Oom,
    /// The reaper took the run over after its lease expired.
    Abandoned,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Running => "running",
            Status::Succeeded => "succeeded",
            Status::Failed => "failed",
            Status::Killed => "killed",
            Status::TimedOut => "timed_out",
            Status::Oom => "oom",
            Status::Abandoned => "abandoned",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProcessRecord {
    pub pid: i32,
    /// Clock ticks after boot (`/proc/<pid>/stat` field 22): with the pid,
    /// it names one process even after the pid is reused.
    pub start_time: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ChildRecord {
    pub pid: i32,
    pub pgid: i32,
    pub start_time: u64,
}

/// One variable of the child's environment: its name and where it came
/// from. Values are never recorded.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct EnvRecord {
    pub name: String,
    /// False for the variables runws sets itself; true for grants.
    pub granted: bool,
    /// `runws`, `env` (`--env`), `pass` (`--pass`) or `env-file`.
    pub source: String,
    /// False for a `--pass KEY` whose KEY was not set: recorded, not given.
    pub present: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PortRecord {
    /// The variable that carries it: `PORT`, `PORT_1`, ...
    pub var: String,
    pub port: u16,
    pub host: String,
}

/// One input of the run: defined beside the fingerprint made of them.
pub use crate::fingerprint::InputRecord;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct OutputRecord {
    pub name: OsName,
    /// The file under `outputs/`: `<name>.<run_id>`.
    pub file: OsName,
    pub bytes: u64,
    pub sha256: String,
    pub written_at: String,
}

/// Something a run created that `reap` must clean up.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Claim {
    /// `path`, `branch`, `worktree` or `pgid`.
    pub kind: ClaimKind,
    /// An absolute path, a branch name, or a process group id.
    pub value: String,
    /// The git repository of a branch or worktree.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo: Option<String>,
    /// For a process group: its leader's start time when claimed, so a
    /// reused id is not mistaken for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<u64>,
    pub claimed_at: String,
    /// Set by runws itself for the worktree and branch of `run --worktree`,
    /// never by `runws claim`. A plain run can edit its own manifest, so
    /// the reaper still checks the branch's name.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub made_by_runws: bool,
}

/// The reaper's record on a run it took over.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ReapRecord {
    pub reaped_at: String,
    /// `host:pid` of the reaper that took the run over.
    pub reaped_by: String,
    /// The status the run had when it was taken over.
    pub was: Status,
    /// True once every teardown step succeeded.
    pub completed: bool,
    /// What was done, one line per step.
    #[serde(default)]
    pub actions: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    pub schema: u32,
    pub run_id: String,
    pub job: String,
    pub argv: Vec<String>,
    /// The program runws resolved and executed (absolute), when found.
    #[serde(default)]
    pub program: Option<String>,
    /// The child's working directory.
    pub cwd: String,
    /// The directory runws was started from.
    pub invoked_from: String,
    pub host: String,
    pub uid: u32,
    pub runws: ProcessRecord,
    #[serde(default)]
    pub child: Option<ChildRecord>,
    pub started_at: String,
    #[serde(default)]
    pub finished_at: Option<String>,
    pub status: Status,
    #[serde(default)]
    pub exit_code: Option<i32>,
    #[serde(default)]
    pub signal: Option<i32>,
    /// Why runws could not start or record the command, when it could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub lease_ttl_ms: u64,
    pub lease_until: String,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    pub env: Vec<EnvRecord>,
    pub ports: Vec<PortRecord>,
    #[serde(default)]
    pub listen: bool,
    #[serde(default)]
    pub capture: bool,
    pub inputs: Vec<InputRecord>,
    pub input_fingerprint: String,
    /// A fingerprint computed elsewhere (`--fingerprint`).
    #[serde(default)]
    pub fingerprint: Option<String>,
    pub outputs: Vec<OutputRecord>,
    /// What the run made outside plain files of its own directory, recorded
    /// by `runws claim` so that `reap` can remove exactly that.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub claims: Vec<Claim>,
    /// Set by `reap` when it takes the run over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reap: Option<ReapRecord>,
    // The records other parts of runws add, in the order and the shape
    // earlier versions wrote them (see [`records::as_written`]).
    /// `--allow-import` of a plain run (a sandboxed run's is in `sandbox`).
    #[serde(default, skip_serializing_if = "Option::is_none", serialize_with = "records::as_written")]
    pub allow_import: Option<Vec<String>>,
    /// What `runws audit` found changed outside the run.
    #[serde(default, skip_serializing_if = "Option::is_none", serialize_with = "records::as_written")]
    pub audit: Option<sandbox::AuditReport>,
    /// How the run's seal ended.
    #[serde(default, skip_serializing_if = "Option::is_none", serialize_with = "records::as_written")]
    pub checkpoint: Option<Checkpoint>,
    /// True when its seal saved nothing: `reap --keep` never removes it.
    #[serde(default, skip_serializing_if = "Option::is_none", serialize_with = "records::as_written")]
    pub held: Option<bool>,
    /// The store lease `run --lease` held.
    #[serde(default, skip_serializing_if = "Option::is_none", serialize_with = "records::as_written")]
    pub lease: Option<LeaseRecord>,
    /// How each `--ping` went, in the order sent.
    #[serde(default, skip_serializing_if = "Option::is_none", serialize_with = "records::as_written")]
    pub pings: Option<Vec<PingRecord>>,
    /// Cross-run guard calls refused by `--allow-import`, the latest last.
    #[serde(default, skip_serializing_if = "Option::is_none", serialize_with = "records::as_written")]
    pub refused: Option<Vec<RefusedRecord>>,
    /// How a replay's result compares with its original's (see `replay_of`).
    #[serde(default, skip_serializing_if = "Option::is_none", serialize_with = "records::as_written")]
    pub replay: Option<ReplayComparison>,
    /// The run this run replayed.
    #[serde(default, skip_serializing_if = "Option::is_none", serialize_with = "records::as_written")]
    pub replay_of: Option<ReplayOf>,
    /// Its limits, and what it used (see [`crate::cgroup`]).
    #[serde(default, skip_serializing_if = "Option::is_none", serialize_with = "records::as_written")]
    pub resources: Option<ResourcesRecord>,
    /// What runws put back over the command's edits, the latest last.
    #[serde(default, skip_serializing_if = "Option::is_none", serialize_with = "records::as_written")]
    pub restored: Option<Vec<RestoredRecord>>,
    /// The network policy of `--net allow` or `audit --net`, and what
    /// went through its proxy.
    #[serde(default, skip_serializing_if = "Option::is_none", serialize_with = "records::as_written")]
    pub net: Option<net::NetRecord>,
    /// The isolation of `run --sandbox` or `audit`.
    #[serde(default, skip_serializing_if = "Option::is_none", serialize_with = "records::as_written")]
    pub sandbox: Option<sandbox::SandboxRecord>,
    /// What a full disk cut from the final record.
    #[serde(default, skip_serializing_if = "Option::is_none", serialize_with = "records::as_written")]
    pub truncated: Option<Truncated>,
    /// The git worktree of `run --worktree`.
    #[serde(default, skip_serializing_if = "Option::is_none", serialize_with = "records::as_written")]
    pub worktree: Option<WorktreeRecord>,
    /// Fields written by newer versions, kept as they are.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// Why a value read back from a manifest is refused: the field, and what is
/// wrong with it.
fn bad(field: impl std::fmt::Display, why: impl std::fmt::Display) -> String {
    format!("field `{field}`: {why}")
}

fn check_pid(field: &str, pid: i32, least: i32) -> std::result::Result<(), String> {
    if pid < least {
        return Err(bad(field, format!("{pid} is not a process runws would look up or signal")));
    }
    Ok(())
}

/// A path relative to `inputs/`: plain components only.
fn check_relative(field: &str, path: &OsName) -> std::result::Result<(), String> {
    let bytes = path.as_bytes();
    let plain = !bytes.is_empty()
        && !bytes.contains(&0)
        && bytes.split(|b| *b == b'/').all(|c| !c.is_empty() && c != b"." && c != b"..");
    if !plain {
        return Err(bad(field, format!("`{}` is not a plain relative path", path.shown())));
    }
    Ok(())
}

fn check_absolute(field: &str, path: &str) -> std::result::Result<(), String> {
    if !path.starts_with('/') || path.contains('\0') {
        return Err(bad(field, format!("`{}` is not an absolute path", path.escape_debug())));
    }
    Ok(())
}

impl OutputRecord {
    /// Its name is one path component and its file is `<name>.<run_id>`,
    /// as the guard writes it.
    pub fn validate(&self, i: usize, run_id: &str) -> std::result::Result<(), String> {
        crate::fsx::check_name(&self.name).map_err(|e| bad(format_args!("outputs[{i}].name"), e))?;
        if self.file != self.name.joined(".", run_id) {
            return Err(bad(
                format_args!("outputs[{i}].file"),
                format!("`{}` is not `{}.{run_id}`", self.file.shown(), self.name.shown()),
            ));
        }
        Ok(())
    }
}

impl InputRecord {
    /// A relative path of plain components; a producer run and output that
    /// are a run id and a name.
    pub fn validate(&self, i: usize) -> std::result::Result<(), String> {
        check_relative(&format!("inputs[{i}].path"), &self.path)?;
        if let Some(run) = &self.from_run {
            crate::workspace::check_run_id(run).map_err(|e| bad(format_args!("inputs[{i}].from_run"), e))?;
        }
        if let Some(name) = &self.from_output {
            crate::fsx::check_name(name).map_err(|e| bad(format_args!("inputs[{i}].from_output"), e))?;
        }
        Ok(())
    }
}

impl Claim {
    /// What `runws claim` accepts: a known kind, an absolute path, a branch
    /// name that cannot be an option, a process group id above 1, and an
    /// absolute repository for a branch or worktree.
    pub fn validate(&self, i: usize) -> std::result::Result<(), String> {
        let value = format!("claims[{i}].value");
        if self.value.is_empty() || self.value.contains('\0') {
            return Err(bad(value, "empty or holds NUL"));
        }
        match &self.kind {
            ClaimKind::Path | ClaimKind::Worktree => check_absolute(&value, &self.value)?,
            ClaimKind::Branch => {
                let v = &self.value;
                if v.starts_with('-') || v.contains("..") || v.contains(' ') {
                    return Err(bad(value, format!("`{}` is not a branch name", v.escape_debug())));
                }
            }
            ClaimKind::Pgid => {
                let pgid: i32 = self.value.parse().map_err(|_| bad(&value, "not a process group id"))?;
                check_pid(&value, pgid, 2)?;
            }
            ClaimKind::Unknown(other) => {
                return Err(bad(
                    format_args!("claims[{i}].kind"),
                    format!("`{}` is not path, branch, worktree or pgid", other.escape_debug()),
                ));
            }
        }
        if matches!(self.kind, ClaimKind::Branch | ClaimKind::Worktree) {
            let repo = format!("claims[{i}].repo");
            match &self.repo {
                Some(r) => check_absolute(&repo, r)?,
                None => return Err(bad(repo, "a branch or worktree claim names its repository")),
            }
        }
        Ok(())
    }
}

impl Manifest {
    /// Checks every value a later runws command takes from the manifest to
    /// name a path or a process, as strictly as runws checked it before
    /// writing it: outside a sandbox the command can rewrite its manifest,
    /// so nothing in it is trusted. The error names the field.
    ///
    /// The pid of runws itself may be 1 (runws as a container's first
    /// process); it is only ever looked up, never signalled. The command's
    /// pid and process group, which the reaper signals, must be above 1.
    pub fn validate(&self) -> std::result::Result<(), String> {
        crate::workspace::check_run_id(&self.run_id).map_err(|e| bad("run_id", e))?;
        crate::workspace::check_job(&self.job).map_err(|e| bad("job", e))?;
        check_pid("runws.pid", self.runws.pid, 1)?;
        if let Some(c) = &self.child {
            check_pid("child.pid", c.pid, 2)?;
            check_pid("child.pgid", c.pgid, 2)?;
        }
        for (i, o) in self.outputs.iter().enumerate() {
            o.validate(i, &self.run_id)?;
        }
        for (i, input) in self.inputs.iter().enumerate() {
            input.validate(i)?;
        }
        for (i, c) in self.claims.iter().enumerate() {
            c.validate(i)?;
        }
        if let Some(r) = &self.replay_of {
            crate::workspace::check_run_id(&r.run).map_err(|e| bad("replay_of.run", e))?;
        }
        Ok(())
    }

    pub fn output(&self, name: &OsStr) -> Option<&OutputRecord> {
        self.outputs.iter().find(|o| o.name == *name)
    }

    /// True while the lease the run holds has not run out.
    pub fn lease_valid_at(&self, now: SystemTime) -> bool {
        parse_time(&self.lease_until).is_some_and(|t| t > now)
    }

    pub fn to_json(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec_pretty(self).expect("a manifest always serialises");
        bytes.push(b'\n');
        bytes
    }
}

/// A time as the manifest writes it: RFC 3339, UTC, milliseconds.
pub(crate) fn format_time(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

pub(crate) fn parse_time(s: &str) -> Option<SystemTime> {
    humantime::parse_rfc3339(s).ok()
}

pub(crate) fn now_plus(d: Duration) -> String {
    format_time(SystemTime::now() + d)
}

/// Reads and parses the manifest of the run directory `dir`.
///
/// A run's final record is durable in its temp file (`FINAL_TEMP`) before
/// it is renamed over `manifest.json`, and runws does not wait for that
/// rename to reach the disk (see [`Owner::update_reserved`]). So when
/// `manifest.json` still says `running` (or is missing or unreadable) and
/// the temp file holds a complete record of an ended run, that record is
/// the run's: the machine stopped, or runws was killed, between the two.
/// Under the lock, [`read_settled`] also moves it into place.
pub(crate) fn read(dir: &Dir) -> Result<Manifest> {
    let current = read_named(dir, MANIFEST);
    if is_settled(&current) {
        return current;
    }
    match left_in_final_temp(dir, &current) {
        Some(Ok(ended)) => Ok(ended),
        // No temp file: a holder of the lock may have just renamed it into
        // place after `current` was read.
        None => read_named(dir, MANIFEST),
        Some(Err(())) => current,
    }
}

/// [`read`] for a holder of the run's lock: a final record left in its temp
/// file is first renamed over `manifest.json` (durably), as the runws that
/// wrote it would have, so the directory holds it where every tool looks.
pub(crate) fn read_settled(dir: &Dir, _lock: &DirLock) -> Result<Manifest> {
    let current = read_named(dir, MANIFEST);
    if is_settled(&current) {
        return current;
    }
    match left_in_final_temp(dir, &current) {
        Some(Ok(ended)) => {
            // A runws killed after writing the record but before syncing it
            // left bytes that may not be on disk yet: sync them before the
            // rename makes them the only record.
            if let Some(file) = dir.open_read(FINAL_TEMP)? {
                file.sync_all().map_err(|e| Error::io("cannot sync", dir.join(FINAL_TEMP), e))?;
            }
            dir.rename(FINAL_TEMP, MANIFEST)?;
            dir.sync()?;
            Ok(ended)
        }
        _ => current,
    }
}

/// Settles the manifest (see [`read_settled`]) when it needs it, waiting at
/// most `wait` for the lock; a manifest that needs nothing is not locked.
pub(crate) fn settle(dir: &Dir, wait: std::time::Duration) -> Result<Manifest> {
    let current = read_named(dir, MANIFEST);
    if is_settled(&current) {
        return current;
    }
    match dir.lock_within(wait)? {
        Some(lock) => read_settled(dir, &lock),
        None => Err(Error::Other(format!(
            "the manifest in `{}` is locked (a stopped process holds it); try again",
            dir.path().display()
        ))),
    }
}

/// A readable manifest.json of an ended run: no final record can be
/// waiting in `FINAL_TEMP` for it.
fn is_settled(current: &Result<Manifest>) -> bool {
    matches!(current, Ok(m) if m.status != Status::Running)
}

/// What `FINAL_TEMP` holds: `None` when there is no such file,
/// `Some(Ok(..))` for a complete record of an ended run (of the same run as
/// `current` when that could be read), `Some(Err(()))` for anything else.
fn left_in_final_temp(dir: &Dir, current: &Result<Manifest>) -> Option<std::result::Result<Manifest, ()>> {
    let ended = match read_named(dir, FINAL_TEMP) {
        Err(Error::ManifestMissing { .. }) => return None,
        Err(_) => return Some(Err(())),
        Ok(m) => m,
    };
    let same_run = current.as_ref().map_or(true, |m| m.run_id == ended.run_id);
    Some(if ended.status != Status::Running && same_run { Ok(ended) } else { Err(()) })
}

/// The most bytes read from a manifest: far more than any run records, and
/// a bound on what a planted file can make a reader hold.
pub const MAX_BYTES: u64 = 64 << 20;

/// The bytes of `name` in `dir`, never through a symlink; `None` when it
/// does not exist.
fn read_bytes(dir: &Dir, name: &str) -> Result<Option<Vec<u8>>> {
    let path = dir.join(name);
    let Some(file) = dir.open_read(name)? else { return Ok(None) };
    // Room for a usual manifest up front: one read and the one that finds
    // the end, instead of a dozen that grow the buffer from 32 bytes.
    let mut bytes = Vec::with_capacity(16 * 1024);
    std::io::Read::read_to_end(&mut std::io::Read::take(file, MAX_BYTES + 1), &mut bytes)
        .map_err(|e| Error::io("cannot read", &path, e))?;
    if bytes.len() as u64 > MAX_BYTES {
        return Err(Error::ManifestCorrupt { path, why: format!("it is larger than {MAX_BYTES} bytes") });
    }
    Ok(Some(bytes))
}

/// Reads, parses and checks `name` in the run directory `dir`: its run id
/// must be the directory's name.
fn read_named(dir: &Dir, name: &str) -> Result<Manifest> {
    let path = dir.join(name);
    let Some(bytes) = read_bytes(dir, name)? else {
        return Err(Error::ManifestMissing { path });
    };
    let m = parse(&bytes, &path)?;
    check_dir_name(&m, dir, &path)?;
    Ok(m)
}

/// Reads, parses and checks the manifest of a run restored from its
/// archive, which lies in a directory of another name than the run's.
pub(crate) fn read_restored(dir: &Dir) -> Result<Manifest> {
    let path = dir.join(MANIFEST);
    let Some(bytes) = read_bytes(dir, MANIFEST)? else {
        return Err(Error::ManifestMissing { path });
    };
    parse(&bytes, &path)
}

/// The run id a manifest names must be its directory's name: a run cannot
/// speak for another run (or for a path) by naming it.
fn check_dir_name(m: &Manifest, dir: &Dir, path: &std::path::Path) -> Result<()> {
    let dir_name = dir.path().file_name().and_then(|n| n.to_str()).unwrap_or_default();
    if m.run_id != dir_name {
        return Err(Error::ManifestCorrupt {
            path: path.to_path_buf(),
            why: bad(
                "run_id",
                format!("`{}` is not the name of its directory `{dir_name}`", m.run_id.escape_debug()),
            ),
        });
    }
    Ok(())
}

/// Parses a manifest and checks every value in it (see [`Manifest::validate`]).
pub(crate) fn parse(bytes: &[u8], path: &std::path::Path) -> Result<Manifest> {
    let corrupt = |why: String| Error::ManifestCorrupt { path: path.to_path_buf(), why };
    let m: Manifest = serde_json::from_slice(bytes).map_err(|e| {
        // A record of runws's that does not read is named; anything else
        // is said as the parser says it.
        let named = serde_json::from_slice(bytes).ok().and_then(|map| records::first_unreadable(&map));
        corrupt(named.unwrap_or_else(|| e.to_string()))
    })?;
    if m.schema != SCHEMA {
        return Err(corrupt(format!("schema {} is not the schema {SCHEMA} this runws reads", m.schema)));
    }
    m.validate().map_err(corrupt)?;
    Ok(m)
}

/// Writes a manifest (the first one, or one already under the lock).
pub(crate) fn write(dir: &Dir, m: &Manifest, durable: bool) -> Result<()> {
    dir.write_atomic(MANIFEST, &m.to_json(), 0o644, durable)
}

/// Writes the first manifest of a run: visible at once; the caller makes it
/// durable with [`crate::fsx::PendingSync::sync`] once the command is running, so the
/// disk's latency overlaps the command instead of delaying it (see
/// [`Dir::write_atomic_deferred`]).
pub(crate) fn write_first(dir: &Dir, m: &Manifest) -> Result<crate::fsx::PendingSync> {
    dir.write_atomic_deferred(MANIFEST, &m.to_json(), 0o644)
}

/// Like [`update`], but the new manifest is only renamed into place, not
/// synced: the caller (the reaper) syncs the file system once after many
/// updates.
pub(crate) fn update_unsynced<T>(dir: &Dir, change: impl FnOnce(&mut Manifest) -> Result<T>) -> Result<T> {
    let lock = dir.lock()?;
    update_locked_unsynced(dir, &lock, change)
}

/// The reaper's read-modify-write under the run's lock, which the caller
/// took (waiting as long as it chose): `change` sees the settled manifest,
/// which is written back only when `change` changed it, renamed into place
/// unsynced as in [`update_unsynced`]. When `change` returns an error
/// nothing is written.
pub(crate) fn update_locked_unsynced<T>(
    dir: &Dir,
    lock: &DirLock,
    change: impl FnOnce(&mut Manifest) -> Result<T>,
) -> Result<T> {
    let mut m = read_settled(dir, lock)?;
    let before = m.to_json();
    let value = change(&mut m)?;
    let after = m.to_json();
    if after != before {
        dir.write_atomic_unsynced(MANIFEST, &after, 0o644)?;
    }
    Ok(value)
}

/// Read-modify-write under the run directory's lock. `change` sees the
/// current manifest; when it returns an error nothing is written.
pub(crate) fn update<T>(
    dir: &Dir,
    durable: bool,
    change: impl FnOnce(&mut Manifest) -> Result<T>,
) -> Result<T> {
    let lock = dir.lock()?;
    let mut m = read_settled(dir, &lock)?;
    // Room in the final record for what the change adds, before the change
    // makes anything (an output it renames into place): on a full disk the
    // call fails having changed nothing.
    grow_reservation(dir, m.to_json().len() + ENTRY_ROOM)?;
    let value = change(&mut m)?;
    let bytes = m.to_json();
    let _ = grow_reservation(dir, bytes.len());
    dir.write_atomic(MANIFEST, &bytes, 0o644, durable)?;
    Ok(value)
}

/// Room for the entry one change of the guard's adds (an output, an
/// import, a claim, a refusal), reserved before the change.
const ENTRY_ROOM: usize = 16 << 10;

/// Room the final record has beyond the record it grows from: the end of
/// the run (its status, times, error), a lease's loss, and the bounded list
/// of restorations runws adds. Every write of the guard's, while the run
/// lives, grows the reservation to the new record plus this much.
pub const FINAL_ROOM: u64 = 128 << 10;

/// Creates the temp file of a later [`Owner::update_reserved`], with disk space
/// allocated for a record as large as `m` plus [`FINAL_ROOM`]: the end of
/// the run is then recorded even when the command has filled the disk.
/// The caller makes its directory entry durable with
/// [`Reserved::sync_entry`], so that when the update comes (a run's final
/// record) only the file itself remains to write and sync.
pub(crate) fn reserve<'a>(dir: &'a Dir, m: &Manifest) -> Result<Reserved<'a>> {
    let slot = dir.reserve_named(MANIFEST, FINAL_TEMP, 0o644)?;
    slot.allocate(m.to_json().len() as u64 + FINAL_ROOM)?;
    Ok(slot)
}

/// Grows the final record's reservation (when the run has one) to a record
/// of `len` bytes: what the guard recorded then fits it too.
fn grow_reservation(dir: &Dir, len: usize) -> Result<()> {
    dir.allocate_named(FINAL_TEMP, len as u64 + FINAL_ROOM)
}

/// Writes `m` through `slot`, the reserved temp file in the run directory
/// `dir`: when the disk is full and the record has outgrown the space
/// reserved for it, it is cut to fit ([`fitted`]). The slot is renamed by
/// name, and a command without a sandbox can remove that name or put a
/// directory there: then the record is written through a temp file of a
/// fresh name, durably. Returns the bytes written, and whether they were cut.
pub(crate) fn write_reserved(
    dir: &Dir,
    slot: Reserved<'_>,
    m: &Manifest,
    durable: bool,
) -> Result<(Vec<u8>, bool)> {
    let bytes = m.to_json();
    let mut cut = None;
    let reserved = slot.replace_fitting(durable, &bytes, |cap| {
        let smaller = fitted(m, cap);
        cut.clone_from(&smaller);
        smaller
    });
    let written = match cut {
        Some(smaller) => (smaller, true),
        None => (bytes, false),
    };
    if let Err(e) = reserved {
        // The original error says more than a second failure on a full disk.
        dir.write_atomic(MANIFEST, &written.0, 0o644, true).map_err(|_| e)?;
    }
    Ok(written)
}

/// `m` serialised in at most `cap` bytes, or `None` when even runws's own
/// fields do not fit: the lists the run filled in (outputs, imports,
/// claims, refusals, restorations) lose entries from their ends, the
/// largest list first, and the record says so under `truncated` (each
/// list and how many entries went); then other fields not runws's own.
pub(crate) fn fitted(m: &Manifest, cap: u64) -> Option<Vec<u8>> {
    let mut m = m.clone();
    let mut cut = Truncated::new();
    loop {
        if !cut.is_empty() {
            m.truncated = Some(cut.clone());
        }
        let bytes = m.to_json();
        let excess = (bytes.len() as u64).saturating_sub(cap);
        if excess == 0 {
            return Some(bytes);
        }
        let lens = [
            ("outputs", m.outputs.len()),
            ("inputs", m.inputs.iter().filter(|i| i.from_run.is_some()).count()),
            ("claims", m.claims.iter().filter(|c| !c.made_by_runws).count()),
            ("refused", m.refused.as_ref().map_or(0, Vec::len)),
            ("restored", m.restored.as_ref().map_or(0, Vec::len)),
        ];
        let Some(&(list, n)) = lens.iter().filter(|(_, n)| *n > 0).max_by_key(|(_, n)| *n) else {
            // No list left to cut: fields of other parts of runws go whole,
            // in the order of their names.
            let mut others: Vec<String> = m.extra.keys().cloned().collect();
            let records = [
                ("audit", m.audit.is_some()),
                ("checkpoint", m.checkpoint.is_some()),
                ("held", m.held.is_some()),
                ("refused", m.refused.is_some()),
            ];
            others.extend(records.iter().filter(|(_, present)| *present).map(|(name, _)| name.to_string()));
            others.sort();
            let other = others.into_iter().find(|k| !owned::is_owned(k))?;
            match other.as_str() {
                "audit" => m.audit = None,
                "checkpoint" => m.checkpoint = None,
                "held" => m.held = None,
                "refused" => m.refused = None,
                key => drop(m.extra.remove(key)),
            }
            *cut.entry(other).or_default() += 1;
            continue;
        };
        // Cut about as many entries as the excess holds, at least one.
        let each = (bytes.len() / (n + 1)).max(1) as u64;
        let k = (excess.div_ceil(each) as usize).clamp(1, n);
        match list {
            "outputs" => m.outputs.truncate(n - k),
            "inputs" => {
                let mut left = k;
                while left > 0 {
                    let Some(i) = m.inputs.iter().rposition(|i| i.from_run.is_some()) else { break };
                    m.inputs.remove(i);
                    left -= 1;
                }
                m.input_fingerprint = crate::fingerprint::combine(&m.inputs);
            }
            "claims" => {
                let mut left = k;
                while left > 0 {
                    let Some(i) = m.claims.iter().rposition(|c| !c.made_by_runws) else { break };
                    m.claims.remove(i);
                    left -= 1;
                }
            }
            "refused" => m.refused.iter_mut().for_each(|a| a.truncate(n - k)),
            _ => m.restored.iter_mut().for_each(|a| a.truncate(n - k)),
        }
        *cut.entry(list.to_string()).or_default() += k as u64;
    }
}

#[cfg(test)]
mod tests;
