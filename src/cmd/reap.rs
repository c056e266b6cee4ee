//! `runws reap`: the reaper's command line.

use std::io::Write;
use std::path::Path;

use crate::exit;
use crate::reap::{self, Action, Options, Reason};
use crate::shown;
use crate::workspace;

pub fn reap(root: Option<&Path>, opts: &Options, json: bool) -> anyhow::Result<u8> {
    let root = workspace::resolve_root(root)?;
    let reports = reap::reap(&root, opts)?;
    let failed = reports.iter().any(|r| r.action == Action::Failed);
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, &reports)?;
        writeln!(out)?;
    } else {
        for r in &reports {
            // Quiet about runs that needed nothing.
            if r.action == Action::Skipped && r.reason == Reason::AlreadyReaped {
                continue;
            }
            // Each on its own line, whatever a run left in a name.
            let (id, status, reason) =
                (shown::line(&r.run_id), shown::line(&r.status), shown::line(&r.reason.to_string()));
            writeln!(out, "{:<12} {id}  ({status}): {reason}", r.action.as_str())?;
            for s in &r.steps {
                writeln!(out, "             - {}", shown::line(&s.message()))?;
            }
        }
    }
    out.flush()?;
    if failed {
        eprintln!(
            "runws: some runs could not be reaped completely; run `runws reap` again or see the steps above"
        );
        return Ok(exit::FAILURE);
    }
    Ok(exit::OK)
}
