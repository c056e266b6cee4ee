//! How a run's end is recorded: the command's outcome, a command that could
//! not be started, a run that failed before it started.

use std::time::SystemTime;

use crate::child::Outcome;
use crate::error::Error;
use crate::exit;
use crate::fsx::Reserved;
use crate::manifest::{self, Manifest, Owner, ResourcesRecord, Status};
use crate::sys::proc::Termination;
use crate::workspace::RunDir;

/// The exit status runws reports for how the command ended.
pub(super) fn exit_code(o: &Outcome) -> u8 {
    match (o.timed_out, o.signal, o.exit_code) {
        (true, ..) => exit::TIMED_OUT,
        (false, Some(sig), _) => Termination::Signaled(sig).exit_code(),
        (false, None, Some(code)) => Termination::Exited(code).exit_code(),
        (false, None, None) => exit::FAILURE,
    }
}

/// Records a run that failed before its command started (through `slot`,
/// the final record's reserved temp file, when there is one); returns the
/// error to report.
pub(super) fn record_failure(
    run: &RunDir,
    mut m: Manifest,
    e: Error,
    slot: Option<Reserved<'_>>,
) -> anyhow::Error {
    let code = e.exit_code();
    m.status = Status::Failed;
    m.exit_code = Some(code as i32);
    m.error = Some(e.to_string());
    m.finished_at = Some(manifest::format_time(SystemTime::now()));
    m.lease_until = m.finished_at.clone().unwrap_or_default();
    let written = match slot {
        Some(slot) => manifest::write_reserved(&run.dir, slot, &m, true).map(drop),
        None => manifest::write(&run.dir, &m, true),
    };
    if let Err(w) = written {
        eprintln!("runws: cannot record the failure of run `{}`: {w}", run.id);
    }
    e.into()
}

/// Records and reports a command that could not be started (126, 127, or
/// 125 for a refused sandbox); returns its exit code.
pub(super) fn not_started(run: &RunDir, record: &mut Owner, e: Error, slot: Option<Reserved<'_>>) -> u8 {
    let code = e.exit_code();
    let msg = e.to_string();
    let outcome = Outcome { exit_code: Some(code as i32), signal: None, timed_out: false };
    if let Err(w) = finish(run, record, outcome, Some(msg.clone()), slot, Found::default()) {
        eprintln!("runws: cannot record the failure of run `{}`: {w}", run.id);
    }
    eprintln!("runws: {msg}");
    code
}

/// What was found about a run once its command ended, for its final record.
#[derive(Default)]
pub(super) struct Found {
    /// When the run's lease was found lost, if it was.
    pub lease_lost_at: Option<String>,
    /// Its limits and what it used.
    pub resources: Option<ResourcesRecord>,
    /// What its isolation adds to the record.
    pub note: Option<crate::run::Note>,
}

/// Records how the command ended, unless the run was taken over meanwhile;
/// through `slot` when the final record's temp file was made in advance;
/// with what was `found` about it.
pub(super) fn finish(
    run: &RunDir,
    record: &mut Owner,
    o: Outcome,
    error: Option<String>,
    slot: Option<Reserved<'_>>,
    found: Found,
) -> Result<(), Error> {
    let Found { lease_lost_at, resources, mut note } = found;
    let oom = resources.as_ref().and_then(|r| r.oom_kills).is_some_and(|n| n > 0);
    let change = |m: &mut Manifest| {
        if m.status != Status::Running {
            return Err(Error::TakenOver { run: run.id.clone(), status: m.status.as_str() });
        }
        m.status = if o.timed_out {
            Status::TimedOut
        } else if oom && o.exit_code != Some(0) {
            Status::Oom
        } else if o.signal.is_some() {
            Status::Killed
        } else if o.exit_code == Some(0) {
            Status::Succeeded
        } else {
            Status::Failed
        };
        m.exit_code = if o.timed_out { Some(exit::TIMED_OUT as i32) } else { o.exit_code };
        m.signal = o.signal;
        m.error = error;
        let now = manifest::format_time(SystemTime::now());
        m.lease_until = now.clone();
        m.finished_at = Some(now);
        if let (Some(at), Some(rec)) = (lease_lost_at, m.lease.as_mut()) {
            rec.lost_at = Some(at);
        }
        if let Some(r) = resources {
            m.resources = Some(r);
        }
        if let Some(note) = note.take() {
            note(m);
        }
        Ok(())
    };
    match slot {
        Some(slot) => record.update_reserved(&run.dir, slot, change),
        None => record.update(&run.dir, true, change),
    }
}
