//! The guard's calls, as one trait: what a command asks of its own run,
//! whoever performs it (see [`super::Local`] and [`super::Remote`]).

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::path::Path;

use crate::error::Result;
use crate::manifest::{Claim, ClaimKind, InputRecord, Manifest, OutputRecord};

/// What a write did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Written {
    /// New bytes were written and recorded.
    New(OutputRecord),
    /// The same bytes were already recorded: nothing was rewritten.
    Unchanged(OutputRecord),
}

/// The calls a command makes from inside its run. Each proves first that
/// the caller belongs to the live run, and names are single path
/// components, checked before anything is read or sent.
pub trait Calls {
    fn run_id(&self) -> &str;

    /// The run's directory, `ROOT/runs/<run_id>`.
    fn dir(&self) -> &Path;

    /// The current manifest.
    fn manifest(&self) -> Result<Manifest>;

    /// Writes output `name` from `reader`: `outputs/<name>.<run_id>`,
    /// atomically, recorded with its bytes and sha256.
    fn put(&self, name: &OsStr, reader: &mut (dyn Read + Send)) -> Result<Written>;

    /// Copies output `name` of this run to `out`. `from` may only name this
    /// run: reading another run's output is refused.
    fn get(&self, name: &OsStr, from: Option<&str>, out: &mut dyn Write) -> Result<u64>;

    /// True only if this run recorded `name` and its bytes still match.
    fn has(&self, name: &OsStr) -> Result<bool>;

    /// Copies output `name` of the finished run `run` into
    /// `inputs/<run>/<name>`, and records it (with the producer run) in the
    /// inputs and the input fingerprint.
    fn import(&self, run: &str, name: &OsStr) -> Result<InputRecord>;

    /// Records something the run created outside plain files of its own
    /// directory (`path`, `branch`, `worktree`, `pgid`), for `reap`.
    fn claim(&self, kind: &ClaimKind, value: &str, repo: Option<&Path>) -> Result<Claim>;
}
