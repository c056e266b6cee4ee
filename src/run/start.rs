//! Started: the command forked, recorded, let through its gate, watched
//! until it ends; then its end is recorded.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use nix::sys::signalfd::SignalFd;
use nix::sys::termios::Termios;

use super::end::{Found, exit_code, finish, not_started, record_failure};
use super::isolation::Opened;
use super::lease::RunLease;
use super::monitor::{self, StartPing};
use super::prepare::Prepared;
use super::request::Request;
use crate::capture::Capture;
use crate::child::{self, Watch};
use crate::error::Error;
use crate::fsx::PendingSync;
use crate::fsx::Reserved;
use crate::manifest::{self, ChildRecord, Owner, Status};
use crate::ports::Ports;
use crate::procinfo;
use crate::workspace::RunDir;

/// How long a command runs before its first manifest is synced to disk.
const FIRST_SYNC_DELAY: Duration = Duration::from_millis(20);

/// How long a lease renewal waits for the run directory's lock.
const RENEW_LOCK_WAIT: Duration = Duration::from_millis(100);

/// A command that runs: its record is runws's (see [`Owner`]).
pub(super) struct Started<'r> {
    run: &'r RunDir,
    req: Request,
    pid: nix::unistd::Pid,
    /// What was executed: the command, or runws as an isolation's init.
    program: PathBuf,
    record: Owner,
    final_slot: Option<Reserved<'r>>,
    first_sync: PendingSync,
    gate: child::Started,
    capture: Option<Capture>,
    ports: Ports,
    lease: Option<RunLease>,
    signals: SignalFd,
    /// The terminal's modes as runws found them when the command took the
    /// terminal: it may change them (raw mode, echo off) and end without
    /// putting them back.
    terminal: Option<Option<Termios>>,
    /// `--ping`'s start ping, on its way.
    start_ping: Option<StartPing>,
    /// The run's control group, when it has limits.
    group: Option<crate::cgroup::Group>,
    /// What runws's waited-for children had used before the fork.
    used_before: Used,
}

/// A memory limit at or above which the command's process may share
/// runws's memory until its exec. The danger of sharing is the
/// out-of-memory killer, which ends every process using its victim's
/// memory: runws with the child, were the group's limit reached before the
/// child has memory of its own. Until then the child (the group's only
/// member) makes direct system calls on its own stack, which runws
/// allocated and which count towards runws's group, not the run's; what an
/// exec charges to the run's group before the child leaves runws's memory
/// is the new memory's tables and the copied arguments and environment,
/// bounded by the kernel at three quarters of 8 MiB (`_STK_LIM`) for the
/// strings, far below this.
const EXEC_CANNOT_REACH: u64 = 64 << 20;

/// How a run that got as far as its fork ended: see [`super::Finished`].
pub(super) struct Ended {
    pub code: u8,
    pub started: bool,
    pub interrupted: Option<i32>,
}

/// What starting gave: a command that runs, or one that never ran (its exit
/// code, recorded).
pub(super) enum Begun<'r> {
    Running(Box<Started<'r>>),
    NotRun(u8),
}

impl<'r> Prepared<'r> {
    /// Forks the command, records it, then lets it run.
    pub(super) fn start(self) -> anyhow::Result<Begun<'r>> {
        let Prepared {
            run,
            mut req,
            root,
            mut m,
            mut final_slot,
            mut spec,
            cwd: _,
            capture,
            mut ports,
            lease,
            signals,
            creating,
            group,
        } = self;
        let id = run.id.as_str();
        let used_before = Used::now();
        let program = spec.program.clone();
        let terminal = spec.foreground.then(|| nix::sys::termios::tcgetattr(std::io::stdin()).ok());
        // A child in a memory-limited group must not share runws's memory
        // at its gate (see `Spec::own_memory`), unless the limit is one its
        // exec cannot reach (see [`EXEC_CANNOT_REACH`]).
        spec.own_memory = group.is_some() && req.limits.memory.is_some_and(|m| m < EXEC_CANNOT_REACH);
        let joins_itself = group.as_ref().and_then(crate::cgroup::Group::self_admission);
        spec.join_groups = joins_itself.clone().unwrap_or_default();
        // Fork, record the child, then let it exec.
        let bracket = procinfo::Bracket::open();
        let paused = match child::spawn_paused(spec) {
            Ok(p) => p,
            Err(e) => return Err(record_failure(run, m, e, final_slot.take())),
        };
        let pid = paused.pid();
        // In its group before it can start anything: all it starts is too.
        // (On cgroup v1 it joined by itself before its gate.)
        if let Some(g) = &group
            && joins_itself.is_none()
            && let Err(e) = g.admit(pid.as_raw())
        {
            paused.abandon();
            let e = Error::io("cannot put the command into its control group", format!("pid {pid}"), e);
            return Err(record_failure(run, m, e, final_slot.take()));
        }
        let start_time =
            bracket.start_time().or_else(|| procinfo::stat(pid.as_raw()).map(|s| s.start_time)).unwrap_or(0);
        m.child = Some(ChildRecord { pid: pid.as_raw(), pgid: pid.as_raw(), start_time });
        // The record must exist before the command runs; reaching the disk
        // happens while it runs.
        let first_sync = match manifest::write_first(&run.dir, &m) {
            Ok(t) => t,
            Err(e) => {
                paused.abandon();
                // The command never ran: say why in its reserved record.
                return Err(
                    record_failure(run, m, e, final_slot.take()).context(format!("cannot record run `{id}`"))
                );
            }
        };
        // The record names the run now: the creation lock goes. Dropping it
        // unlocks the open file description, so a copy of the descriptor in
        // a child that has not executed yet (a sandbox's init never does)
        // holds nothing.
        drop(creating);
        // From here on every write of runws's puts back the fields it owns:
        // the command may have edited the file (see [`manifest::Owner`]).
        let mut record = Owner::new(m);
        if !req.listen {
            // The command binds these ports itself; the ledger still holds them.
            ports.close_sockets();
        }
        if let Err(e) = req.isolation.before_gate() {
            paused.abandon();
            let code = not_started(run, &mut record, e, final_slot.take());
            monitor::ended(run, &req, &mut record, None, code);
            return Ok(Begun::NotRun(code));
        }
        let gate = match paused.open_gate(&program) {
            Ok(s) => s,
            Err(e) => {
                // A child that confines itself before its gate (a Landlock
                // sandbox) and failed has ended, and said why.
                let e = match req.isolation.started() {
                    Err(why) => why,
                    Ok(_) => e,
                };
                let code = not_started(run, &mut record, e, final_slot.take());
                monitor::ended(run, &req, &mut record, None, code);
                return Ok(Begun::NotRun(code));
            }
        };
        let opened = Opened {
            run,
            root: &root,
            allow_import: &req.allow_import,
            lease: lease.as_ref(),
            store: req.store.as_deref(),
        };
        req.isolation.opened(&opened);
        // While the command starts on another core: the temp file of the
        // final record is made durable now, so that only its bytes remain to
        // write when the command ends.
        if let Some(Err(e)) = final_slot.as_ref().map(Reserved::sync_entry) {
            eprintln!(
                "runws: warning: the final record's temp file of run `{id}` did not reach the disk: {e}"
            );
        }
        match req.isolation.started() {
            Ok(Some(note)) => {
                let r = record.update(&run.dir, false, |m| {
                    note(m);
                    Ok(())
                });
                if let Err(e) = r {
                    eprintln!("runws: warning: cannot record how run `{id}` was isolated: {e}");
                }
            }
            Ok(None) => {}
            Err(e) => {
                let _ = nix::sys::wait::waitpid(pid, None);
                let code = not_started(run, &mut record, e, final_slot.take());
                monitor::ended(run, &req, &mut record, None, code);
                return Ok(Begun::NotRun(code));
            }
        }
        let start_ping = monitor::started(&req, run, &record);
        Ok(Begun::Running(Box::new(Started {
            run,
            req,
            pid,
            program,
            record,
            final_slot,
            first_sync,
            gate,
            capture,
            ports,
            lease,
            signals,
            terminal,
            start_ping,
            group,
            used_before,
        })))
    }
}

impl Started<'_> {
    /// Watches the command until it ends (forwarding signals, enforcing the
    /// timeout, renewing the lease), then records its end; returns the exit
    /// code runws reports.
    pub(super) fn watch(self) -> anyhow::Result<Ended> {
        let Started {
            run,
            mut req,
            pid,
            program,
            mut record,
            mut final_slot,
            first_sync,
            gate,
            capture,
            mut ports,
            mut lease,
            signals,
            terminal,
            start_ping,
            mut group,
            used_before,
        } = self;
        let Request { ref mut isolation, lease_ttl: ttl, timeout, kill_after, .. } = req;
        let id = run.id.as_str();
        let tees = capture.map(|c| c.start());
        let run_dir = &run.dir;
        let mut warned = false;
        let mut renew = || {
            let lost_at = lease.as_mut().and_then(|l| l.renew());
            // Never blocked for long by a lock the command holds (see
            // `Owner::update_within`): a skipped renewal is tried again next time.
            let r = record.update_within(run_dir, RENEW_LOCK_WAIT, |m| {
                if m.status == Status::Running {
                    m.lease_until = manifest::now_plus(ttl);
                }
                if let (Some(at), Some(rec)) = (&lost_at, m.lease.as_mut()) {
                    rec.lost_at = Some(at.clone());
                }
                Ok(())
            });
            if let (Err(e), false) = (r, warned) {
                warned = true;
                eprintln!(
                    "runws: warning: cannot renew the lease of run `{}`: {e}",
                    run_dir.path().display()
                );
            }
        };
        let outcome = child::watch(
            pid,
            Watch {
                signals: &signals,
                timeout,
                kill_after,
                renew_every: ttl / 3,
                // The first record reaches the disk once the command has run
                // a moment; a command that ends sooner is covered by the
                // final, durable record instead.
                once_after: Some((
                    FIRST_SYNC_DELAY,
                    Box::new(|| {
                        if let Err(e) = first_sync.sync() {
                            eprintln!(
                                "runws: warning: the first record of run `{id}` did not reach the disk: {e}"
                            );
                        }
                    }),
                )),
                renew: &mut renew,
                ended: isolation.end_report(),
            },
        );
        if let Some(modes) = terminal {
            restore_foreground(modes.as_ref());
        }
        if let Some(tees) = tees {
            tees.join(Duration::from_secs(2));
        }
        let child::Watched { mut outcome, interrupted } = outcome?;
        if let Some(e) = gate.exec_error(&program) {
            let code = not_started(run, &mut record, e, final_slot.take());
            monitor::ended(run, &req, &mut record, start_ping, code);
            return Ok(Ended { code, started: false, interrupted });
        }
        let note = isolation.ended(run, &mut outcome);
        let resources =
            resources(record.record().resources.clone(), group.take(), pid.as_raw(), &used_before);
        let code = exit_code(&outcome);
        // A lease lost while the command ran is found now at the latest,
        // however quickly the command ended after runws was stopped or starved.
        let lease_lost_at = lease.as_mut().and_then(|l| l.renew());
        finish(
            run,
            &mut record,
            outcome,
            None,
            final_slot.take(),
            Found { lease_lost_at, resources: Some(resources), note },
        )
        .with_context(|| format!("cannot record the end of run `{id}`"))?;
        if record.record().restored.is_some() {
            eprintln!(
                "runws: warning: the manifest of run `{id}` was changed by its command; runws put back what it records itself (see `restored` in the manifest)"
            );
        }
        ports.release();
        drop(lease);
        monitor::ended(run, &req, &mut record, start_ping, code);
        Ok(Ended { code, started: true, interrupted })
    }
}

/// Takes the terminal back after the command's group held it. SIGTTOU is
/// blocked in runws, so this cannot stop runws.
fn restore_foreground(modes: Option<&Termios>) {
    let _ = rustix::termios::tcsetpgrp(std::io::stdin(), rustix::process::getpgrp());
    if let Some(modes) = modes {
        let _ = nix::sys::termios::tcsetattr(std::io::stdin(), nix::sys::termios::SetArg::TCSADRAIN, modes);
    }
}

/// The CPU time of the processes runws waited for (`getrusage(RUSAGE_CHILDREN)`): runws is the command's subreaper, so
/// every process of the run that ended before the command did is counted.
#[derive(Clone, Copy, Default)]
pub(super) struct Used {
    user_ms: u64,
    system_ms: u64,
}

impl Used {
    fn now() -> Used {
        use nix::sys::resource::{UsageWho, getrusage};
        let Ok(u) = getrusage(UsageWho::RUSAGE_CHILDREN) else { return Used::default() };
        let ms = |t: nix::sys::time::TimeVal| (t.tv_sec() as u64) * 1000 + (t.tv_usec() as u64) / 1000;
        Used { user_ms: ms(u.user_time()), system_ms: ms(u.system_time()) }
    }
}

/// The run's `resources` record at its end: its group's use (then the
/// group removed, anything left in it killed first), or, without a group,
/// the use of the processes runws waited for.
fn resources(
    asked: Option<manifest::ResourcesRecord>,
    group: Option<crate::cgroup::Group>,
    child: i32,
    before: &Used,
) -> manifest::ResourcesRecord {
    let mut r = asked.unwrap_or_default();
    let after = Used::now();
    r.cpu_user_ms = Some(after.user_ms.saturating_sub(before.user_ms));
    r.cpu_system_ms = Some(after.system_ms.saturating_sub(before.system_ms));
    if let Some(g) = group {
        let crate::cgroup::Ended { killed: left, usage: u, left: dirs } = g.end(child);
        for d in dirs {
            eprintln!(
                "runws: warning: cannot remove the run's control group `{}`: a process in it outlived the kill",
                crate::shown::path(&d)
            );
        }
        if left > 0 {
            eprintln!("runws: killed {left} process(es) the command left in its control group");
            r.killed_left = Some(left);
        }
        r.peak_memory = u.peak_memory;
        r.peak_pids = u.peak_pids;
        r.oom_kills = u.oom_kills;
        if u.cpu_user_ms.is_some() {
            r.cpu_user_ms = u.cpu_user_ms;
            r.cpu_system_ms = u.cpu_system_ms;
        }
    }
    r
}
