//! The protocol on a sandboxed run's socket, shared by the guard's
//! [`super::Remote`] and runws's side of it (`sandbox::broker`).
//!
//! One JSON line each way (a name that is not UTF-8 travels as the manifest
//! writes it, `{"hex": ...}`: see [`crate::osname`]); `put` and `publish`
//! stream their bytes after the request line, `get` streams them after its
//! reply line. A request line is at most [`MAX_REQUEST`] bytes; a payload
//! to publish is at most [`MAX_PUBLISH`] bytes. The socket is reached
//! through `/proc/self/fd/N/`, so a run directory whose path exceeds the 108
//! bytes of a socket address still works.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::fsx::Dir;
use crate::manifest::ClaimKind;
use crate::osname::OsName;

/// The socket's name in the run's `run/` directory.
pub const SOCKET: &str = "guard.sock";
/// The longest request line, in bytes.
pub const MAX_REQUEST: u64 = 64 * 1024;
/// The largest payload a sandboxed command publishes, in bytes.
pub const MAX_PUBLISH: usize = 16 << 20;

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    Put {
        name: OsName,
    },
    Get {
        name: OsName,
        from: Option<String>,
    },
    Has {
        name: OsName,
    },
    Import {
        run: String,
        name: OsName,
    },
    Info,
    Claim {
        kind: ClaimKind,
        value: String,
        repo: Option<PathBuf>,
    },
    /// The payload follows the request line, up to the end of the stream.
    Publish {
        key: String,
        fence: u64,
    },
    LeaseRenew {
        key: String,
        holder: Option<String>,
        ttl_ms: u64,
    },
    LeaseShow {
        key: String,
    },
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Reply {
    pub ok: bool,
    #[serde(default)]
    pub code: u8,
    #[serde(default)]
    pub error: Option<String>,
    #[serde(default)]
    pub value: serde_json::Value,
    /// For `get`: how many bytes follow the reply line.
    #[serde(default)]
    pub bytes: u64,
}

/// The socket's address, through the open `run/` directory `dir`.
pub fn socket_path(dir: &Dir) -> String {
    format!("/proc/self/fd/{}/{SOCKET}", dir.raw_fd())
}

/// A payload over [`MAX_PUBLISH`], refused on either side.
pub fn too_big() -> Error {
    Error::Usage(format!("a payload published from a sandbox is at most {MAX_PUBLISH} bytes"))
}
