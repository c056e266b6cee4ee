//! What stands between the command and the host: one trait, plugged in at
//! the named points of the pipeline (see [`super`]). A plain run uses
//! [`Plain`]; `run --sandbox` and `runws audit` use the sandbox's
//! implementation (`crate::sandbox::Isolated`). A new backend is a new
//! implementation of this trait, not edits across the run.

use std::path::Path;

use super::lease::RunLease;
use crate::child::{Ended, Outcome, Spec};
use crate::error::Result;
use crate::manifest::Manifest;
use crate::workspace::{Root, RunDir};
use crate::worktree::Added;

/// What an isolation sees while the run is prepared.
pub struct Preparing<'a> {
    pub run: &'a RunDir,
    pub root: &'a Root,
    /// The runws binary (`/proc/self/exe`).
    pub exe: &'a Path,
    /// The `--allow-import` list the guard holds the command to.
    pub allow_import: &'a [String],
    /// The worktree `--worktree` made for the run.
    pub worktree: Option<&'a Added>,
}

/// What an isolation sees once the command has been let through its gate.
pub struct Opened<'a> {
    pub run: &'a RunDir,
    pub root: &'a Root,
    pub allow_import: &'a [String],
    /// The run's lease, as runws took it.
    pub lease: Option<&'a RunLease>,
    /// The run's store (`--store`, `RUNWS_STORE`): its fleet view serves
    /// imports of other hosts' runs.
    pub store: Option<&'a str>,
}

/// A change an isolation asks to be made to the run's record.
pub type Note = Box<dyn FnOnce(&mut Manifest)>;

/// The isolation of one run, from preparation to its end. Every step but
/// [`Isolation::prepare`] has a default that does nothing.
pub trait Isolation {
    /// Whether the command may be given the store's URL (`RUNWS_STORE`) for
    /// its fenced writes. An isolated command reaches the store through
    /// runws instead, and never sees the URL, whose password it could read.
    fn shows_store(&self) -> bool {
        true
    }

    /// Before runws becomes the run's supervisor, and with it non-dumpable:
    /// the moment to make what only a dumpable process may, holding nothing
    /// of the run's yet. Never fails the run: what cannot be made here is
    /// made later, the slower way.
    fn early(&mut self, _root: &Root) {}

    /// Before the fork: turns the plain `spec` into the isolated one and
    /// records the isolation in `m`.
    fn prepare(&mut self, at: &Preparing<'_>, spec: &mut Spec, m: &mut Manifest) -> Result<()>;

    /// Once the command's process exists and its record is written, right
    /// before its gate opens: the last moment to finish what its
    /// confinement needs (the Landlock ruleset, filled on a thread). An
    /// error keeps the gate shut: the command never runs.
    fn before_gate(&mut self) -> Result<()> {
        Ok(())
    }

    /// Right after the gate opened, while the command starts: must not wait
    /// for it.
    fn opened(&mut self, _at: &Opened<'_>) {}

    /// Waits until the command itself runs; returns what to add to the
    /// record then. An error means the command never ran (its exit code
    /// says why: 125 for a refused setup, 126 or 127 for a failed exec).
    fn started(&mut self) -> Result<Option<Note>> {
        Ok(None)
    }

    /// For the watch loop: a pipe that reports the command's end before the
    /// child itself ends (see [`crate::child::Watch::ended`]).
    fn end_report(&self) -> Option<Ended<'_>> {
        None
    }

    /// Once nothing of the run is alive: corrects `outcome` to the
    /// command's own status where the child was not the command, removes
    /// what the run must not leave behind, records and shows what the
    /// isolation found; returns what to add to the final record. The run's
    /// end is recorded whatever this does.
    fn ended(&mut self, _run: &RunDir, _outcome: &mut Outcome) -> Option<Note> {
        None
    }
}

/// No isolation: the command runs as the user, on the host, with the guard
/// checking its calls itself.
pub struct Plain;

impl Isolation for Plain {
    fn prepare(&mut self, at: &Preparing<'_>, _spec: &mut Spec, m: &mut Manifest) -> Result<()> {
        if !at.allow_import.is_empty() {
            m.allow_import = Some(at.allow_import.to_vec());
        }
        Ok(())
    }
}
