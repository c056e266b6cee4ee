//! The manifest's `net` record of `run --sandbox --net allow=...` and
//! `audit --net`: the policy the run's proxy enforced and what went through
//! it. Data only: [`crate::egress`] fills it in.

use serde::{Deserialize, Serialize};

/// The record: the policy, and one entry per distinct destination asked for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetRecord {
    /// The patterns as normalised (`*` alone: `audit --net`, everything
    /// allowed).
    pub policy: Vec<String>,
    /// `--resolve NAME=ADDR`, as given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resolve: Vec<String>,
    /// The proxy as the command reaches it (`http://127.0.0.1:PORT`, inside
    /// the run's network namespace).
    pub proxy: String,
    /// Every distinct destination, in the order first asked for.
    #[serde(default)]
    pub connections: Vec<Connection>,
    /// Connections to destinations past the first
    /// [`MAX_DESTINATIONS`], counted but not itemised.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub more: u64,
    /// False while the run goes on, and in a log a killed runws left: the
    /// counts are those of its last write.
    #[serde(default)]
    pub complete: bool,
}

/// At most this many destinations are itemised: the record stays small
/// whatever the command asks for.
pub const MAX_DESTINATIONS: usize = 1000;

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One destination: host and port as the client asked, and whether the
/// policy allowed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Connection {
    pub host: String,
    pub port: u16,
    pub allowed: bool,
    /// Connections asked for.
    pub count: u64,
    /// Bytes from the command to the destination, and back.
    #[serde(default)]
    pub bytes_out: u64,
    #[serde(default)]
    pub bytes_in: u64,
    pub first: String,
    pub last: String,
    /// Why the last refused (or failed) connection was: a denial by the
    /// policy, a TLS server name that did not match, a name that did not
    /// resolve, a destination that did not answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}
