//! One run, from request to final record: the pipeline `runws run`,
//! `runws audit`, `lane run` and `lane review` all call.
//!
//! ```text
//! Request ──check──> Checked ──lease, run directory──> Prepared ──fork, gate──> Started ──watch──> exit code
//!  (what was asked)   (nothing made yet)   (record, inputs, ports, env, spec)   (command runs)  (end recorded)
//! ```
//!
//! Order matters. Everything that can be checked without touching disk (the
//! run id, grants, env files) is checked first, so a bad request creates
//! nothing. A lease named by the request is taken next, like `flock -n`:
//! held elsewhere, the run stops before anything exists. Then the run
//! directory is created exclusively; from there on a failure is recorded in
//! the run's manifest before it is returned (exit 125, or 126/127 when the
//! command cannot run).
//!
//! The request's [`Isolation`] is called at named points: while the command
//! is prepared (it may replace what is executed), once the gate is open,
//! once the command runs, and once it has ended.

pub mod defaults;
mod end;
mod isolation;
mod lease;
mod monitor;
mod prepare;
mod request;
mod start;
mod status;

pub use isolation::{Isolation, Note, Opened, Plain, Preparing};
pub use lease::RunLease;
pub use request::{Request, Stdin, limits_available};

use std::path::PathBuf;

use crate::workspace::RunDir;
use start::{Begun, Ended};

/// A run that has ended, its end recorded.
#[derive(Debug)]
pub struct Finished {
    pub run: RunDir,
    /// The exit status runws reports for it: the command's, 124 for a
    /// timeout, 125-127 when it never ran.
    pub code: u8,
    /// False when the command never ran (a refused sandbox, a program that
    /// could not be executed): nothing of it to seal.
    pub started: bool,
    /// The first signal this process received while the command ran, and
    /// passed on to it (^C, a `kill` of runws).
    pub interrupted: Option<i32>,
    /// Where runws was started, and where the command ran.
    pub invoked_from: PathBuf,
    pub cwd: PathBuf,
}

/// Runs `req`: creates the run, builds its world, starts the command,
/// watches it and records how it ended. An error is a run that failed before
/// its command started (recorded in its manifest once its directory exists).
pub fn run(mut req: Request) -> anyhow::Result<Finished> {
    // Taken first, so that nothing runws opens can take its number.
    let status_fd = status::claim(req.json_status_fd.take())?;
    let mut checked = req.check()?;
    let lease = match &checked.req.lease {
        Some(key) => Some(RunLease::acquire(
            &checked.root,
            checked.req.store.as_deref(),
            key,
            &checked.id,
            checked.req.lease_ttl,
            checked.req.wait,
        )?),
        None => None,
    };
    checked.req.isolation.early(&checked.root);
    // Held to the end of the run, whichever way it ends.
    let (_supervisor, signals) = prepare::Supervisor::start()?;
    let mut run = RunDir::create(&checked.root, &checked.id)?;
    let creating = run.creating.take();
    let invoked_from = checked.invoked_from.clone();
    let ended = (|| {
        let prepared = prepare::prepare(&run, creating, checked, lease, signals)?;
        let cwd = prepared.cwd.clone();
        Ok::<_, anyhow::Error>((
            match prepared.start()? {
                Begun::Running(started) => started.watch()?,
                Begun::NotRun(code) => Ended { code, started: false, interrupted: None },
            },
            cwd,
        ))
    })();
    // Whichever way the run ended, once its end is recorded.
    if let Some(out) = status_fd {
        status::write(out, &run);
    }
    let (ended, cwd) = ended?;
    Ok(Finished {
        run,
        code: ended.code,
        started: ended.started,
        interrupted: ended.interrupted,
        invoked_from,
        cwd,
    })
}
