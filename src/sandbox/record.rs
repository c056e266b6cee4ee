//! The sandbox's record in the manifest (`sandbox`): what isolation a run
//! asked for and what it went without. Data only, so that the manifest can
//! hold it typed without depending on the sandbox's machinery.

use serde::{Deserialize, Serialize};

use super::mounts::MountOp;

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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Net {
    /// A network namespace with only loopback.
    None,
    /// The host's network.
    Host,
}

/// A protection `--sandbox=try` had to go without.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Missing {
    pub protection: String,
    pub why: String,
}

/// The manifest's `sandbox` record: what was asked for and what was missing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
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
    /// Fields of the record this version does not know.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

fn allowed() -> bool {
    true
}
