//! The records of an isolated run: the manifest's `sandbox` record (what
//! isolation the run asked for, the mounts it made, what it went without)
//! and its `audit` record. Data only: the manifest holds them typed, and the
//! sandbox, which fills them in, depends on them, not the other way round.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// What kind of isolation a run asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// `run --sandbox`: read-only file system, private /tmp, hidden home.
    Sandbox,
    /// `audit`: everything outside the run behind a copy-on-write layer.
    Audit,
}

/// `--net`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Net {
    /// A network namespace with only loopback.
    None,
    /// The host's network.
    Host,
    /// A network namespace with only loopback and runws's proxy, which
    /// lets through what the policy allows (`--net allow=...`, `audit
    /// --net`); see the manifest's `net` record.
    Allow,
}

impl Net {
    /// Whether the run has a network namespace of its own.
    pub fn isolated(self) -> bool {
        matches!(self, Net::None | Net::Allow)
    }
}

/// A protection `--sandbox=try` had to go without.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Missing {
    pub protection: String,
    pub why: String,
}

/// The manifest's `sandbox` record: what was asked for and what was missing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SandboxRecord {
    pub kind: Kind,
    /// `on` (refuse the run when a protection fails) or `try`.
    pub mode: String,
    pub net: Net,
    /// True when runws was not root and used a user namespace.
    pub user_namespace: bool,
    #[serde(default)]
    pub rw: Vec<String>,
    #[serde(default)]
    pub ro: Vec<String>,
    #[serde(default)]
    pub hide: Vec<String>,
    /// Every mount the layout made, in order (sandbox only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub layout: Vec<MountOp>,
    /// Whether the command could create user namespaces (`--allow-userns`;
    /// records written before the filter existed did allow them).
    #[serde(default = "allowed")]
    pub nested_userns: bool,
    /// The host uid and gid the command ran as when runws was root and
    /// mapped it to an unprivileged id (uid 0 inside the sandbox).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_ids: Option<(u32, u32)>,
    #[serde(default)]
    pub missing: Vec<Missing>,
    /// `--allow-import` (see [`crate::allowlist`]): always recorded for a
    /// sandboxed run, an empty list allowing nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_import: Option<Vec<String>>,
    /// Which backend enforced the sandbox (records written before there
    /// were two name none: namespaces).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<Backend>,
    /// Why runws chose the backend, when the user did not name it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chosen_because: Option<String>,
    /// Each protection and what enforces it (`missing` lists what
    /// `--sandbox=try` went without).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub enforced: Vec<Enforced>,
    /// What this backend does not do that the other does.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_covered: Vec<String>,
    /// The Landlock backend's rules, in short.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub landlock: Option<LandlockRecord>,
    /// Fields of the record this version does not know.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// `--sandbox=ns` or `--sandbox=landlock`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    /// User, mount, PID, network and IPC namespaces.
    Namespaces,
    /// The Landlock LSM and the system-call filter, without namespaces.
    Landlock,
}

impl Backend {
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Namespaces => "namespaces",
            Backend::Landlock => "landlock",
        }
    }
}

/// One protection of a sandbox and what enforces it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enforced {
    pub protection: String,
    pub by: String,
}

/// The Landlock backend's rules as recorded: the kernel's ABI, what was
/// left unreadable, and what was writable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LandlockRecord {
    pub abi: u32,
    pub hidden: Vec<String>,
    pub writable: Vec<String>,
}

fn allowed() -> bool {
    true
}

/// One step of the layout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum MountOp {
    /// A fresh tmpfs at `target`. `writable: false` hides what was there
    /// behind an empty, read-only directory.
    Tmpfs { target: PathBuf, mode: u32, writable: bool },
    /// `source` (a file or directory tree) placed at `target`; read-only
    /// unless `writable`, in which case it keeps its source's flags. With
    /// `mapped`, id-mapped like a writable one (the run directory's own
    /// top level: private to its owner, yet the command's to enter).
    Bind {
        source: PathBuf,
        target: PathBuf,
        writable: bool,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        mapped: bool,
    },
    /// A file hidden behind an empty, read-only `/dev/null`.
    HideFile { target: PathBuf },
    /// `lower` (a shared cache, never written) seen at `target` through a
    /// copy-on-write overlay whose upper layer is the run's own `upper`.
    Overlay { lower: PathBuf, upper: PathBuf, work: PathBuf, target: PathBuf, userxattr: bool },
    /// A private `/dev` at `target` (see the module docs).
    Dev { target: PathBuf },
}

impl MountOp {
    pub fn target(&self) -> &Path {
        match self {
            MountOp::Tmpfs { target, .. }
            | MountOp::Bind { target, .. }
            | MountOp::HideFile { target }
            | MountOp::Overlay { target, .. }
            | MountOp::Dev { target } => target,
        }
    }
}

/// One change outside the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Change {
    pub path: String,
    /// `created`, `changed` or `deleted`.
    pub change: String,
    /// `file`, `dir`, `symlink` or `other`.
    pub kind: String,
    /// What changed, for `changed`: `content`, `mode`, `owner`, `type`,
    /// `replaced` (a directory emptied and refilled), `times`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub what: Vec<String>,
}

/// A mount the audit could not layer; it was read-only for the command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NotAudited {
    pub path: String,
    pub why: String,
}

/// The manifest's `audit` record, also `logs/audit.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditReport {
    pub changes: Vec<Change>,
    #[serde(default)]
    pub not_audited: Vec<NotAudited>,
}
