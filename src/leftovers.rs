//! What a runws process killed half-way leaves behind, and how `reap`
//! proves it dead before removing it.
//!
//! Every temp file runws writes is locked by its writer for as long as it
//! is open ([`Dir::create_locked`]): the temp files of atomic writes
//! (`.NAME.PID.N.NANOS.tmp`: manifests, outputs, the store's files) and a
//! seal's temp archive (`.NAME.PID.N.partial`). A lock dies with its
//! process, so a temp file whose lock is free was left by a writer that
//! died, even when its pid was reused since. Restores register their
//! staging directories ([`crate::restores`]); run directories left without
//! a manifest are handled by the reaper itself ([`crate::reap`]).

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use crate::fsx::walk::{Entry, Failure, Mounts, Order, Visit, Visitor, Walk};
use crate::fsx::{self, Dir, Leftover};
use crate::seal::archive;

/// One leftover found, removed, or kept.
pub struct Found {
    /// False when the step is a failure.
    pub ok: bool,
    /// Something was (or, in a dry run, would be) removed.
    pub acted: bool,
    pub message: String,
}

/// True for the name of a temp file runws writes and removes itself.
pub fn is_temp(name: &OsStr) -> bool {
    fsx::is_temp_name(name.as_bytes()) || archive::is_partial_name(name.as_bytes())
}

/// Removes (with `dry_run`, lists) the temp files of dead writers in `dir`
/// and, `depth` levels down, in its subdirectories (never through a
/// symlink, nor into a mount point); a live writer's are left alone, and so is every path in
/// `recorded` (relative to `dir`): a run's evidence may bear any name (an
/// input, or an output another run imported), a temp file's among them.
pub fn temp_files(
    dir: &Dir,
    depth: usize,
    recorded: &BTreeSet<PathBuf>,
    dry_run: bool,
    out: &mut Vec<Found>,
) {
    let mut v = TempFiles { recorded, dry_run, out };
    // Infallible: every failure is noted in `out` and the walk goes on. A
    // mount point is not entered: what is mounted there is not runws's.
    let walk = Walk::new().order(Order::AsListed).max_depth(depth).mounts(Mounts::Stay);
    let _ = walk.run_with(dir, &mut v);
}

/// The walk of [`temp_files`].
struct TempFiles<'a> {
    recorded: &'a BTreeSet<PathBuf>,
    dry_run: bool,
    out: &'a mut Vec<Found>,
}

impl Visitor for TempFiles<'_> {
    type Error = crate::error::Error;

    fn entry(&mut self, e: &Entry<'_>) -> crate::error::Result<Visit> {
        if self.recorded.contains(e.rel) {
            return Ok(Visit::Skip);
        }
        if is_temp(e.name) {
            self.out.push(temp_file(e.dir, e.name, self.dry_run));
            return Ok(Visit::Skip);
        }
        // A symlink is never entered.
        Ok(Visit::Descend)
    }

    fn failed(&mut self, failure: Failure) -> crate::error::Result<()> {
        match failure {
            Failure::List { error, .. } => self.out.push(Found {
                ok: false,
                acted: false,
                message: format!("cannot look for temp files: {error}"),
            }),
            // Not a directory (any more), or not to be entered: nothing to look for.
            Failure::Stat { .. } | Failure::Open { .. } | Failure::TooDeep { .. } => {}
        }
        Ok(())
    }
}

fn temp_file(dir: &Dir, name: &OsStr, dry_run: bool) -> Found {
    let shown = crate::shown::os(dir.join(name).as_os_str());
    let what = if archive::is_partial_name(name.as_bytes()) { "seal's temp archive" } else { "temp file" };
    let found = |acted, message| Found { ok: true, acted, message };
    match dir.abandoned(name, !dry_run) {
        Ok(Leftover::Abandoned) if dry_run => {
            found(true, format!("would remove the {what} `{shown}` of a writer that died"))
        }
        Ok(Leftover::Abandoned) => found(true, format!("removed the {what} `{shown}` of a writer that died")),
        Ok(Leftover::Held) => found(false, format!("kept the {what} `{shown}`: its writer is alive")),
        Ok(Leftover::NotAFile) => found(false, format!("kept `{shown}`: not a regular file")),
        Ok(Leftover::Gone) => found(false, format!("{what} `{shown}`: already gone")),
        Err(e) => Found { ok: false, acted: false, message: format!("cannot remove `{shown}`: {e}") },
    }
}
