//! The one error type of the runws library.
//!
//! Each variant is one kind of failure and carries what a person needs to act
//! on it (the path, the run, the name). Each knows its exit code: a new
//! variant must pick one in [`Error::exit_code`], whose match is exhaustive.
//! Messages are lowercase, name things in backticks and end without a period;
//! `main` prints them once, prefixed with `runws: `.

use std::io;
use std::path::{Path, PathBuf};

use crate::exit;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid run id `{id}`: {why}")]
    InvalidRunId { id: String, why: &'static str },

    #[error("invalid name `{name}`: {why}")]
    InvalidName { name: String, why: &'static str },

    #[error("{0}")]
    Usage(String),

    #[error("run directory `{}` already exists; a run id is used once", crate::shown::path(path))]
    RunExists { path: PathBuf },

    #[error("no run `{run}` under `{}`", crate::shown::path(root))]
    NoSuchRun { run: String, root: PathBuf },

    #[error("{op} `{}`: {source}", crate::shown::path(path))]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    #[error("manifest `{}` is missing", crate::shown::path(path))]
    ManifestMissing { path: PathBuf },

    #[error("manifest `{}` is corrupt: {why}", crate::shown::path(path))]
    ManifestCorrupt { path: PathBuf, why: String },

    #[error("not inside a live runws run: {why}")]
    NotInRun { why: String },

    #[error("run `{run}` is not live ({why})")]
    RunNotLive { run: String, why: String },

    #[error("run `{run}` was marked {status} while its command ran; its record is left as it is")]
    TakenOver { run: String, status: &'static str },

    #[error(
        "refused: run `{current}` may not read `{name}` of run `{other}`; a cross-run read must be an explicit `runws import {other} {name}`"
    )]
    CrossRunRead { current: String, other: String, name: String },

    #[error("refused: run `{current}` may not import `{name}` from run `{other}`; {allowed}")]
    ImportNotAllowed { current: String, other: String, name: String, allowed: String },

    #[error("run `{run}` has not produced `{name}`")]
    NotProduced { run: String, name: String },

    #[error("run `{run}` has no archive in `{store}`")]
    NoArchive { run: String, store: String },

    #[error(
        "`{}` does not match its recorded sha256 (recorded {expected}, found {found})",
        crate::shown::path(path)
    )]
    Integrity { path: PathBuf, expected: String, found: String },

    #[error("cannot import `{name}` from run `{run}`: {why}")]
    ImportRefused { run: String, name: String, why: String },

    #[error("refused to follow the symlink `{}`", crate::shown::path(path))]
    Symlink { path: PathBuf },

    #[error("`{}` is not a regular file or directory", crate::shown::path(path))]
    SpecialFile { path: PathBuf },

    #[error("refused: the secret scan found {count} secret(s) in {what}")]
    SecretsFound { what: String, count: usize },

    #[error("command not found: `{0}`")]
    CommandNotFound(String),

    #[error("cannot execute `{}`: {source}", crate::shown::path(path))]
    CannotExecute {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    /// `raise`: the option that raises the limit, when one does.
    #[error(
        "sealing stopped at `{}`: more than {limit} {what}{}",
        crate::shown::path(path),
        raise.map(|o| format!("; raise `{o}` to allow more")).unwrap_or_default()
    )]
    PackBudget { path: PathBuf, what: &'static str, limit: u64, raise: Option<&'static str> },

    #[error(
        "sealing ran past its deadline at `{}`; raise `--deadline` to allow more time",
        crate::shown::path(path)
    )]
    PackDeadline { path: PathBuf },

    #[error("symlink `{}` -> `{target}` leaves the run directory", crate::shown::path(path))]
    LinkEscapes { path: PathBuf, target: String },

    #[error("`{}` changed while it was being sealed", crate::shown::path(path))]
    PackChanged { path: PathBuf },

    #[error("archive `{}` already exists; an archive is written once", crate::shown::path(path))]
    ArchiveExists { path: PathBuf },

    #[error("checksum file `{}` {why}", crate::shown::path(path))]
    ChecksumFile { path: PathBuf, why: &'static str },

    #[error("`{}` is neither a zstd nor a gzip archive", crate::shown::path(path))]
    ArchiveFormat { path: PathBuf },

    #[error("refused to restore `{}`: entry `{entry}` {why}", crate::shown::path(archive))]
    ArchiveRefused { archive: PathBuf, entry: String, why: String },

    #[error("cannot restore into `{}`: {why}", crate::shown::path(path))]
    RestoreTarget { path: PathBuf, why: &'static str },

    #[error(
        "refused to restore `{}`: more than {limit} {what} at entry `{entry}`; raise `{option}` to allow more",
        crate::shown::path(archive)
    )]
    RestoreBudget { archive: PathBuf, entry: String, what: &'static str, limit: u64, option: &'static str },

    #[error("{what} `{}` is not a regular file", crate::shown::path(path))]
    NotRegularFile { what: &'static str, path: PathBuf },

    #[error("no lane `{lane}` under `{}`", crate::shown::path(root))]
    NoSuchLane { lane: String, root: PathBuf },

    #[error(
        "refused: lane `{lane}` is {state}; {why} (claim → run → seal → review → stamp → promote or scrap → reset)"
    )]
    LaneOutOfOrder { lane: String, state: &'static str, why: String },

    #[error("refused: {0}")]
    LaneRefused(String),

    #[error("refused: `{name}` may not {step} lane `{lane}`; its card names `{named}` as the {role}")]
    LaneNotYours { lane: String, step: &'static str, role: &'static str, name: String, named: String },

    #[error("refused: the kit check of lane `{lane}` failed: {failed}; nothing was sealed")]
    KitCheck { lane: String, failed: String },
    #[error("lease `{key}` is held by `{holder}` (token {token}) for another {expires_in:.1?}")]
    LeaseHeld { key: String, holder: String, token: u64, expires_in: std::time::Duration },

    #[error("`{holder}` does not hold the lease `{key}`: {why}")]
    NotLeaseHolder { key: String, holder: String, why: String },

    #[error("stale fence for `{key}`: offered {offered}, highest seen {highest}{}", if *.same_fence { " with other bytes" } else { "" })]
    StaleFence { key: String, offered: u64, highest: u64, same_fence: bool },

    #[error("refused fence {offered} for `{key}`: {why}")]
    UnissuedFence { key: String, offered: u64, why: String },

    #[error("refused: lease `{key}` is not this run's: {why}")]
    ForeignLease { key: String, why: String },

    #[error("cannot reach the store `{store}`: {why}")]
    StoreUnreachable { store: String, why: String },

    #[error("store `{store}` failed to {op}: {why}")]
    Store { store: String, op: &'static str, why: String },

    #[error("store state `{}` is corrupt: {why}", crate::shown::path(path))]
    StoreCorrupt { path: PathBuf, why: String },

    #[error("sandbox: {0}")]
    Sandbox(String),

    /// A guard call that runws answered on the command's behalf (inside a
    /// sandbox): the message and exit code runws gave.
    #[error("{message}")]
    Remote { code: u8, message: String },

    #[error("{0}")]
    Other(String),
}

impl Error {
    /// The process exit code this error ends runws with.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::NotProduced { .. } | Error::NoArchive { .. } => exit::NO,
            Error::CrossRunRead { .. } | Error::ImportNotAllowed { .. } | Error::ForeignLease { .. } => {
                exit::FOREIGN
            }
            Error::Integrity { .. } | Error::ChecksumFile { .. } => exit::INTEGRITY,
            Error::NotInRun { .. } | Error::RunNotLive { .. } => exit::NOT_LIVE,
            Error::CommandNotFound(_) => exit::NOT_FOUND,
            Error::SecretsFound { .. } => exit::SECRETS_FOUND,
            Error::CannotExecute { .. } => exit::CANNOT_EXECUTE,
            Error::LaneOutOfOrder { .. } | Error::LaneRefused(_) => exit::LANE_REFUSED,
            Error::LaneNotYours { .. } => exit::LANE_NOT_YOURS,
            Error::KitCheck { .. } => exit::KIT_CHECK_FAILED,
            // A lease that is no longer yours is, to the caller, a lease held
            // elsewhere: stop working on what it guarded.
            Error::LeaseHeld { .. } | Error::NotLeaseHolder { .. } => exit::LEASE_HELD,
            Error::StaleFence { .. } | Error::UnissuedFence { .. } => exit::STALE_FENCE,
            Error::Remote { code, .. } => *code,
            Error::InvalidRunId { .. }
            | Error::InvalidName { .. }
            | Error::Usage(_)
            | Error::RunExists { .. }
            | Error::TakenOver { .. }
            | Error::NoSuchRun { .. }
            | Error::Io { .. }
            | Error::ManifestMissing { .. }
            | Error::ManifestCorrupt { .. }
            | Error::ImportRefused { .. }
            | Error::Symlink { .. }
            | Error::SpecialFile { .. }
            | Error::PackBudget { .. }
            | Error::PackDeadline { .. }
            | Error::LinkEscapes { .. }
            | Error::PackChanged { .. }
            | Error::ArchiveExists { .. }
            | Error::ArchiveFormat { .. }
            | Error::ArchiveRefused { .. }
            | Error::RestoreTarget { .. }
            | Error::RestoreBudget { .. }
            | Error::NotRegularFile { .. }
            | Error::NoSuchLane { .. }
            | Error::StoreUnreachable { .. }
            | Error::Store { .. }
            | Error::StoreCorrupt { .. }
            | Error::Sandbox(_)
            | Error::Other(_) => exit::FAILURE,
        }
    }

    pub fn io(op: &'static str, path: impl AsRef<Path>, source: io::Error) -> Error {
        Error::Io { op, path: path.as_ref().to_path_buf(), source }
    }
}

/// Adds the operation and path to an `io::Result` or a nix result.
pub trait IoContext<T> {
    fn ctx(self, op: &'static str, path: impl AsRef<Path>) -> Result<T>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn ctx(self, op: &'static str, path: impl AsRef<Path>) -> Result<T> {
        self.map_err(|e| Error::io(op, path, e))
    }
}

impl<T> IoContext<T> for nix::Result<T> {
    fn ctx(self, op: &'static str, path: impl AsRef<Path>) -> Result<T> {
        self.map_err(|e| Error::io(op, path, io::Error::from(e)))
    }
}

/// The error and its causes on one line: a control character left in a
/// message (a name a context did not escape, another tool's text) is
/// escaped, so an error never forges a second line.
pub fn render(err: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in err.chain() {
        let text = cause.to_string();
        // thiserror messages already include their source's text.
        if !parts.last().is_some_and(|p| p.contains(&text)) {
            parts.push(text);
        }
    }
    crate::shown::line(&parts.join(": "))
}

/// The exit code of the first runws error in the chain; 125 otherwise.
pub fn exit_code_of(err: &anyhow::Error) -> u8 {
    err.chain().find_map(|e| e.downcast_ref::<Error>()).map(Error::exit_code).unwrap_or(exit::FAILURE)
}
