//! The records runws adds to a manifest beside its core fields, typed: the
//! run's lease and worktree, its pings, the guard's refusals, runws's restorations, the
//! seal's checkpoint, and what a full disk cut. Each is an optional field of
//! [`super::Manifest`], absent when absent, and written under the name and
//! in the shape earlier versions wrote. A record a newer runws could extend
//! keeps, in its own `extra`, the fields this version does not know.
//!
//! Every value read back is untrusted: [`RECORDS`] names each record with a
//! check that its value reads as its type, so that a forged one is named in
//! the error that refuses the manifest, or dropped when runws rewrites it.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::osname::OsName;

/// The fields of a record this version does not know, kept as they are.
pub type Extra = Map<String, Value>;

/// What a claim names: `path`, `branch`, `worktree` or `pgid`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ClaimKind {
    Path,
    Branch,
    Worktree,
    Pgid,
    /// Any other word, kept as written: [`super::Claim::validate`] refuses
    /// it naming its field, and runws's own rewrite drops that claim alone.
    #[serde(untagged)]
    Unknown(String),
}

impl ClaimKind {
    pub fn as_str(&self) -> &str {
        match self {
            ClaimKind::Path => "path",
            ClaimKind::Branch => "branch",
            ClaimKind::Worktree => "worktree",
            ClaimKind::Pgid => "pgid",
            ClaimKind::Unknown(other) => other,
        }
    }
}

impl From<&str> for ClaimKind {
    fn from(word: &str) -> ClaimKind {
        match word {
            "path" => ClaimKind::Path,
            "branch" => ClaimKind::Branch,
            "worktree" => ClaimKind::Worktree,
            "pgid" => ClaimKind::Pgid,
            other => ClaimKind::Unknown(other.to_string()),
        }
    }
}

impl std::fmt::Display for ClaimKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `lease`: the store lease `run --lease` held, and when it was lost.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaseRecord {
    pub holder: String,
    pub key: String,
    /// When runws found another holder had taken the lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_at: Option<String>,
    /// The store's URL, its password redacted.
    pub store: String,
    /// The fencing token the run was given.
    pub token: u64,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `worktree`: the git worktree `run --worktree` made for the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorktreeRecord {
    /// The commit the branch started from.
    pub base: String,
    pub branch: String,
    pub path: String,
    pub repo: String,
    #[serde(flatten)]
    pub extra: Extra,
}

/// One entry of `refused`: a cross-run guard call refused by
/// `--allow-import`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RefusedRecord {
    pub at: String,
    /// The guard call: `import`.
    pub call: String,
    pub name: OsName,
    /// The run it asked for.
    pub run: String,
    pub why: String,
    #[serde(flatten)]
    pub extra: Extra,
}

/// One entry of `restored`: what runws put back over a record its command
/// changed (see [`super::Owner`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RestoredRecord {
    pub at: String,
    /// Entries of the guard's lists that failed their checks.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<String>,
    /// The fields runws put back.
    pub fields: Vec<String>,
    /// Why the file could not be read, when it could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// One entry of `pings`: how one `--ping` went. The URL is not recorded
/// (a ping URL is a credential: whoever has it can report the job).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PingRecord {
    /// When the ping ended (its last attempt, or runws gave up waiting).
    pub at: String,
    /// How many attempts were made.
    pub attempts: u32,
    /// Why the last attempt failed, when the ping did not get a 2xx.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `start`, `success` or `fail`.
    pub event: String,
    /// True when the server answered 2xx.
    pub ok: bool,
    /// The HTTP status of the last response, when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `truncated`: what was cut from a final record that did not fit its
/// reserved space on a full disk, each list and how many entries.
pub type Truncated = BTreeMap<String, u64>;

/// Where a checkpoint saved the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// Sealed and scanned: an archive with its receipt.
    Receipt,
    /// Packed unscanned under `quarantine/`.
    Quarantine,
    /// Nothing was saved.
    None,
    /// A source a newer runws records, kept as written; ranked as nothing.
    #[serde(untagged)]
    Other(String),
}

impl Source {
    pub fn as_str(&self) -> &str {
        match self {
            Source::Receipt => "receipt",
            Source::Quarantine => "quarantine",
            Source::None => "none",
            Source::Other(other) => other,
        }
    }

    /// The precedence of checkpoints: a receipt is never replaced by a
    /// quarantine, nor either by nothing.
    pub fn rank(&self) -> u8 {
        match self {
            Source::Receipt => 2,
            Source::Quarantine => 1,
            Source::None | Source::Other(_) => 0,
        }
    }
}

/// `checkpoint`: how the seal of a finished run ended (also what `seal`
/// returns).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub source: Source,
    pub archive: Option<std::path::PathBuf>,
    pub archive_sha256: Option<String>,
    pub receipt: Option<std::path::PathBuf>,
    /// Why the seal failed, when it did.
    pub reason: Option<String>,
    /// The scan's findings, redacted.
    #[serde(default)]
    pub findings: Vec<String>,
    /// What the scan could not look inside, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_scanned: Vec<String>,
    pub at: String,
    #[serde(flatten)]
    pub extra: Extra,
}

/// The manifest's `resources` record.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ResourcesRecord {
    /// `cgroup v2` or `cgroup v1`, when the run had a group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// The group's directories.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub group_dirs: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids_limit: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_limit: Option<f64>,
    /// Why the limits asked for with `--limits=try` were not applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing: Option<String>,
    /// The most memory the group used at once, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_memory: Option<u64>,
    /// The most processes the group held at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peak_pids: Option<u64>,
    /// CPU time of everything the command started, in milliseconds (for a
    /// run without a group: of the processes runws waited for, which, as
    /// their subreaper, is every process that ended before the command).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_user_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_system_ms: Option<u64>,
    /// How many processes the kernel's out-of-memory killer ended in the group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oom_kills: Option<u64>,
    /// How many processes were left when the command ended, and killed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub killed_left: Option<u64>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `replay_of`: the run a replay ran again, and the archive it came from
/// when it was replayed from one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayOf {
    /// The original run's id.
    pub run: String,
    /// The sealed archive the original was restored from, when it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive: Option<std::path::PathBuf>,
    /// True when that archive lay in quarantine (replayed only with
    /// `--from-quarantine`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub from_quarantine: bool,
    #[serde(flatten)]
    pub extra: Extra,
}

/// How one output of a replay compares with the original's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputComparison {
    pub name: OsName,
    /// `same` (equal sha256), `different`, `missing` (the original made it,
    /// the replay did not) or `new` (the replay made it, the original did not).
    pub result: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub original_sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay_sha256: Option<String>,
}

/// `replay`: how a replay's result compares with its original's, written
/// once the replay has ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayComparison {
    /// True when every output, the status and the exit code are the same.
    pub same: bool,
    /// The status of the original, then of the replay.
    pub status: (String, String),
    pub exit_code: (Option<i32>, Option<i32>),
    pub outputs: Vec<OutputComparison>,
    /// The program the original executed, when the replay's was another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub program_was: Option<String>,
    pub at: String,
    #[serde(flatten)]
    pub extra: Extra,
}

/// Serialises a record as earlier versions wrote it: as a JSON value, every
/// object's keys in order of their names, whatever order its type declares.
pub fn as_written<T: Serialize, S: serde::Serializer>(record: &Option<T>, s: S) -> Result<S::Ok, S::Error> {
    serde_json::to_value(record).map_err(serde::ser::Error::custom)?.serialize(s)
}

/// A check that a value read back reads as a record's type.
pub type Check = fn(&Value) -> Result<(), String>;

fn reads<T: DeserializeOwned>(v: &Value) -> Result<(), String> {
    T::deserialize(v).map(drop).map_err(|e| e.to_string())
}

/// Every record runws adds, by its field, with its check.
pub const RECORDS: &[(&str, Check)] = &[
    ("allow_import", reads::<Vec<String>>),
    ("audit", reads::<super::sandbox::AuditReport>),
    ("checkpoint", reads::<Checkpoint>),
    ("held", reads::<bool>),
    ("lease", reads::<LeaseRecord>),
    ("net", reads::<super::net::NetRecord>),
    ("pings", reads::<Vec<PingRecord>>),
    ("refused", reads::<Vec<RefusedRecord>>),
    ("replay", reads::<ReplayComparison>),
    ("resources", reads::<ResourcesRecord>),
    ("replay_of", reads::<ReplayOf>),
    ("restored", reads::<Vec<RestoredRecord>>),
    ("sandbox", reads::<super::sandbox::SandboxRecord>),
    ("truncated", reads::<Truncated>),
    ("worktree", reads::<WorktreeRecord>),
];

/// The first record of `map` that does not read as its type, as the
/// field and why.
pub fn first_unreadable(map: &Map<String, Value>) -> Option<String> {
    RECORDS.iter().find_map(|(field, check)| {
        // A null reads as an absent record.
        let value = map.get(*field).filter(|v| !v.is_null())?;
        check(value).err().map(|why| super::bad(field, why))
    })
}
