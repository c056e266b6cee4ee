//! The reaper: reclaims what nobody owns, and nothing else.
//!
//! A run is reclaimed only when its lease has run out and, on the same host,
//! its runws process (pid and start time) is gone. Before touching it the
//! reaper takes it over under the manifest lock (status `abandoned`), so a
//! run that was only paused finds, when it wakes, that its guard calls and
//! its final manifest write are refused. Teardown follows the manifest, never
//! a pattern: the recorded process groups (only while every member
//! provably belongs to the run, see [`crate::pgroup`]), claimed worktrees
//! and branches, claimed paths that lie inside the run's own directory, and
//! the scratch directories. Symlinks are never followed and mount points
//! (other file systems, or bind mounts of the same one) are never entered:
//! a mount point is left and reported. The manifest, `inputs/`, `outputs/`,
//! `work/` and `logs/` stay as evidence. Every step is idempotent: two
//! reapers at once, or a reaper killed half-way and run again, end in the
//! same state.

use std::path::{Component, Path};
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::fsx::Dir;
use crate::manifest::{self, Claim, Manifest, ReapRecord, Status};
use crate::pgroup::{self, Procs, RunFacts};
use crate::procinfo;
use crate::workspace::{self, RunDir, SCRATCH};

pub struct Options {
    pub dry_run: bool,
    /// Remove whole finished or abandoned runs older than this.
    pub keep: Option<Duration>,
    /// Between SIGTERM and SIGKILL to a leftover process group.
    pub grace: Duration,
    /// How long to wait for a run's manifest lock before skipping it.
    pub lock_wait: Duration,
    /// Leave claimed branches in place.
    pub keep_branch: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            dry_run: false,
            keep: None,
            grace: Duration::from_secs(2),
            lock_wait: Duration::from_secs(2),
            keep_branch: false,
        }
    }
}

/// What happened to one run.
#[derive(Debug, Serialize)]
pub struct RunReport {
    pub run_id: String,
    /// The status before this reaper looked (or why it could not read it).
    pub status: String,
    /// `skipped`, `reaped`, `removed`, `would-reap`, `would-remove`, `refused` or `failed`.
    pub action: &'static str,
    pub reason: String,
    pub steps: Vec<String>,
}

/// Ends process group `pgid` if every member is provably the run's (see
/// [`crate::pgroup`]): checked now against `/proc`, never on the recorded
/// numbers alone, and signalled one process at a time.
fn end_group(
    pgid: i32,
    start_time: Option<u64>,
    grace: Duration,
    facts: Option<&RunFacts>,
    procs: &Procs,
) -> String {
    pgroup::end(pgid, start_time, grace, facts, procs)
}

/// Ends process group `pgid` if every member is provably the run's (see
/// [`end_group`]), for callers that are not a reap: a lane's reset.
pub(crate) fn end_recorded_group(
    root: &Path,
    run: Option<&RunDir>,
    m: Option<&Manifest>,
    pgid: i32,
    start_time: Option<u64>,
    grace: Duration,
) -> String {
    let facts = match (run, m) {
        (Some(run), Some(m)) => Some(RunFacts::of(&run.dir, m)),
        _ => None,
    };
    end_group(pgid, start_time, grace, facts.as_ref(), &Procs::scan(Some(root)))
}

/// `git -C repo ARGS` for the teardown steps, whose errors are report lines.
fn git(repo: &str, args: &[&str]) -> std::result::Result<(), String> {
    crate::worktree::git(Path::new(repo), args).map(drop).map_err(|e| e.to_string())
}

/// Removes a claimed path, only if it lies inside the run directory, walking
/// to it one component at a time without following symlinks.
fn remove_claimed_path(run: &RunDir, claim: &Claim) -> std::result::Result<String, String> {
    let path = Path::new(&claim.value);
    let Ok(rel) = path.strip_prefix(run.path()) else {
        return Err(format!("kept `{}`: outside the run directory", claim.value));
    };
    let mut parts = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(p) => parts.push(p.to_str().ok_or("not UTF-8")?.to_string()),
            _ => return Err(format!("kept `{}`: not a plain path inside the run", claim.value)),
        }
    }
    let Some(last) = parts.pop() else {
        return Err(format!("kept `{}`: that is the run directory itself", claim.value));
    };
    if parts.is_empty() && matches!(last.as_str(), "manifest.json" | "inputs" | "outputs" | "logs") {
        return Err(format!("kept `{}`: evidence is never removed by a claim", claim.value));
    }
    let mut dir = run.sub(".").map_err(|e| e.to_string())?;
    for p in &parts {
        dir = match dir.sub(p) {
            Ok(d) => d,
            Err(Error::Symlink { .. }) => {
                return Err(format!("kept `{}`: a symlink is on the way", claim.value));
            }
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                return Ok(format!("path `{}`: already gone", claim.value));
            }
            Err(e) => return Err(e.to_string()),
        };
    }
    match dir.remove_tree(&last) {
        Ok(0) => Ok(format!("path `{}`: already gone", claim.value)),
        Ok(_) => Ok(format!("removed path `{}`", claim.value)),
        Err(e) => Err(e.to_string()),
    }
}

/// Undoes everything the manifest records; returns the steps and whether
/// all succeeded.
fn teardown(run: &RunDir, m: &Manifest, opts: &Options, procs: &Procs) -> (Vec<String>, bool) {
    let mut steps = Vec::new();
    let mut ok = true;
    let same_host = m.host == procinfo::hostname();
    let facts = RunFacts::of(&run.dir, m);
    if let Some(child) = &m.child {
        if same_host {
            let s = end_group(child.pgid, Some(child.start_time), opts.grace, Some(&facts), procs);
            ok &= !s.contains("still alive after SIGKILL");
            steps.push(s);
        } else {
            steps
                .push(format!("process group {}: on host `{}`, not signalled from here", child.pgid, m.host));
        }
    }
    for c in &m.claims {
        let result = match c.kind.as_str() {
            "pgid" if same_host => match c.value.parse::<i32>() {
                Ok(pgid) => Ok(end_group(pgid, c.start_time, opts.grace, Some(&facts), procs)),
                Err(_) => Err(format!("claimed pgid `{}` is not a number", c.value)),
            },
            "pgid" => Ok(format!("process group {}: on another host, not signalled", c.value)),
            "worktree" => {
                let repo = c.repo.as_deref().unwrap_or(".");
                if !Path::new(&c.value).exists() {
                    let _ = git(repo, &["worktree", "prune"]);
                    Ok(format!("worktree `{}`: already gone", c.value))
                } else {
                    git(repo, &["worktree", "remove", "--force", "--force", &c.value])
                        .map(|()| format!("removed worktree `{}`", c.value))
                        .map_err(|e| format!("cannot remove worktree `{}`: {e}", c.value))
                }
            }
            "branch" if opts.keep_branch => Ok(format!("kept branch `{}` (--keep-branch)", c.value)),
            "branch" => {
                let repo = c.repo.as_deref().unwrap_or(".");
                let exists =
                    git(repo, &["rev-parse", "--verify", "--quiet", &format!("refs/heads/{}", c.value)])
                        .is_ok();
                if !exists {
                    Ok(format!("branch `{}`: already gone", c.value))
                } else {
                    git(repo, &["branch", "-D", &c.value])
                        .map(|()| format!("deleted branch `{}`", c.value))
                        .map_err(|e| format!("cannot delete branch `{}`: {e}", c.value))
                }
            }
            "path" => remove_claimed_path(run, c),
            other => Err(format!("unknown claim kind `{other}`")),
        };
        match result {
            Ok(s) => steps.push(s),
            Err(s) => {
                // A path outside the run is kept on purpose, not a failure.
                ok &= s.starts_with("kept ");
                steps.push(s);
            }
        }
    }
    let mut removed = Vec::new();
    let mut mounts = Vec::new();
    for name in SCRATCH {
        match run.dir.remove_tree_keeping_mounts(name) {
            Ok(r) if !r.mounts_left.is_empty() => mounts.extend(r.mounts_left),
            Ok(r) if r.entries == 0 => {}
            Ok(_) => removed.push(name),
            Err(e) => {
                ok = false;
                steps.push(format!("cannot remove {name}: {e}"));
            }
        }
    }
    if !removed.is_empty() {
        steps.push(format!("removed scratch {}", removed.join(", ")));
    }
    // Left on purpose, as a path outside the run is: what is mounted there
    // is not the run's to remove (once unmounted, `--keep` removes the run).
    for m in mounts {
        steps.push(format!("left mount point `{}` and the directories leading to it", m.display()));
    }
    // The final record's temp file of a runws that never finished.
    if let Err(e) = run.dir.unlink(workspace::FINAL_TEMP) {
        ok = false;
        steps.push(format!("cannot remove {}: {e}", workspace::FINAL_TEMP));
    }
    (steps, ok)
}

fn reaper_id() -> String {
    format!("{}:{}", procinfo::hostname(), std::process::id())
}

fn older_than(t: Option<&str>, keep: Duration, now: SystemTime) -> bool {
    t.and_then(manifest::parse_time).is_some_and(|t| now.duration_since(t).is_ok_and(|age| age >= keep))
}

/// Why a running run may not be reclaimed yet; `None` when it may.
fn still_owned(m: &Manifest, now: SystemTime) -> Option<String> {
    if m.lease_valid_at(now) {
        return Some(format!("live: lease until {}", m.lease_until));
    }
    if m.host == procinfo::hostname() && procinfo::is_same_process(m.runws.pid, m.runws.start_time) {
        return Some(format!(
            "lease expired at {} but its runws process {} is alive",
            m.lease_until, m.runws.pid
        ));
    }
    None
}

fn report(run_id: &str, status: &str, action: &'static str, reason: impl Into<String>) -> RunReport {
    RunReport {
        run_id: run_id.to_string(),
        status: status.to_string(),
        action,
        reason: reason.into(),
        steps: Vec::new(),
    }
}

/// Reaps every run under `root`.
pub fn reap(root: &Path, opts: &Options) -> Result<Vec<RunReport>> {
    let runs = match workspace::runs_dir(root, false) {
        Ok(d) => d,
        Err(_) => return Ok(Vec::new()),
    };
    let mut ids: Vec<String> =
        runs.entries()?.into_iter().filter(|id| workspace::check_run_id(id).is_ok()).collect();
    ids.sort();
    let procs = Procs::scan(Some(root));
    // Runs are independent: reap them on every core, keeping the order.
    let workers = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).clamp(1, 8);
    let chunk = ids.len().div_ceil(workers).max(1);
    let reports: Vec<RunReport> = std::thread::scope(|scope| {
        let handles: Vec<_> = ids
            .chunks(chunk)
            .map(|part| {
                let (runs, procs) = (&runs, &procs);
                scope.spawn(move || {
                    part.iter().map(|id| reap_one(root, runs, id, opts, procs)).collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
    });
    if !opts.dry_run {
        // Manifests above were renamed into place unsynced: one sync of the
        // file system makes all of them (and the removals) durable at once.
        nix::unistd::syncfs(runs.borrow()).map_err(|e| Error::io("cannot sync", runs.path(), e.into()))?;
    }
    Ok(reports)
}

fn reap_one(root: &Path, runs: &Dir, id: &str, opts: &Options, procs: &Procs) -> RunReport {
    let now = SystemTime::now();
    let run = match RunDir::open(root, id) {
        Ok(r) => r,
        Err(e) => return report(id, "unreadable", "skipped", e.to_string()),
    };
    let m = match manifest::read(&run.dir) {
        Ok(m) => m,
        Err(e) => return report(id, "unreadable", "skipped", format!("{e}; nothing proves who owns it")),
    };
    let status = m.status.as_str();

    // Whole runs past their retention.
    if let Some(keep) = opts.keep {
        let finished = match m.status {
            Status::Running => false,
            Status::Abandoned => m.reap.as_ref().is_some_and(|r| r.completed),
            _ => true,
        };
        let since = if m.status == Status::Abandoned {
            m.reap.as_ref().map(|r| r.reaped_at.as_str())
        } else {
            m.finished_at.as_deref()
        };
        if finished && !held(&m) && older_than(since, keep, now) {
            if opts.dry_run {
                return report(
                    id,
                    status,
                    "would-remove",
                    format!("finished before the last {}", humantime::format_duration(keep)),
                );
            }
            drop(run);
            return match runs.remove_tree(id) {
                Ok(_) => report(id, status, "removed", "past its retention"),
                Err(e) => report(id, status, "failed", e.to_string()),
            };
        }
    }

    let needs_teardown = match m.status {
        Status::Running => {
            if let Some(why) = still_owned(&m, now) {
                let action = if why.starts_with("live") { "skipped" } else { "refused" };
                return report(id, status, action, why);
            }
            true
        }
        _ => !m.reap.as_ref().is_some_and(|r| r.completed),
    };
    if !needs_teardown {
        return report(id, status, "skipped", "already reaped");
    }
    if opts.dry_run {
        return report(id, status, "would-reap", "nobody owns it");
    }

    // Take the run over: under the lock, re-check that nobody owns it.
    let Ok(Some(lock)) = run.dir.lock_within(opts.lock_wait) else {
        return report(id, status, "skipped", "its manifest is locked (a stopped process holds it)");
    };
    let taken = (|| -> Result<std::result::Result<Manifest, String>> {
        let mut m = manifest::read_settled(&run.dir, &lock)?;
        if m.status == Status::Running {
            if let Some(why) = still_owned(&m, SystemTime::now()) {
                return Ok(Err(why));
            }
            m.status = Status::Abandoned;
            m.reap = Some(ReapRecord {
                reaped_at: manifest::format_time(SystemTime::now()),
                reaped_by: reaper_id(),
                was: Status::Running,
                completed: false,
                actions: Vec::new(),
            });
            run.dir.write_atomic_unsynced(crate::workspace::MANIFEST, &m.to_json(), 0o644)?;
        } else if m.reap.is_none() {
            m.reap = Some(ReapRecord {
                reaped_at: manifest::format_time(SystemTime::now()),
                reaped_by: reaper_id(),
                was: m.status,
                completed: false,
                actions: Vec::new(),
            });
            run.dir.write_atomic_unsynced(crate::workspace::MANIFEST, &m.to_json(), 0o644)?;
        }
        Ok(Ok(m))
    })();
    drop(lock);
    let m = match taken {
        Ok(Ok(m)) => m,
        Ok(Err(why)) => return report(id, status, "refused", why),
        Err(e) => return report(id, status, "failed", e.to_string()),
    };

    let (steps, ok) = teardown(&run, &m, opts, procs);
    let recorded = manifest::update_unsynced(&run.dir, |m| {
        if let Some(r) = m.reap.as_mut() {
            r.completed = ok;
            r.actions.extend(steps.iter().cloned());
        }
        Ok(())
    });
    let mut r = report(
        id,
        status,
        if ok { "reaped" } else { "failed" },
        if status == "running" {
            "lease expired and its runws process is gone"
        } else {
            "finished; scratch reclaimed"
        },
    );
    r.steps = steps;
    if let Err(e) = recorded {
        r.action = "failed";
        r.steps.push(format!("cannot record the teardown: {e}"));
    }
    r
}

/// A run whose seal failed to save anything is held until its retention
/// ends by its own record, never removed by `--keep`.
fn held(m: &Manifest) -> bool {
    m.extra.get("held").and_then(|v| v.as_bool()).unwrap_or(false)
}
