//! The reaper: reclaims what nobody owns, and nothing else.
//!
//! A run is reclaimed only when its lease has run out and, on the same host,
//! its runws process (pid and start time) is gone. Before touching it the
//! reaper takes it over under the manifest lock (status `abandoned`), so a
//! run that was only paused finds, when it wakes, that its guard calls and
//! its final manifest write are refused. Teardown follows the manifest, never
//! a pattern: the recorded process groups (only while every member
//! provably belongs to the run, see [`crate::pgroup`]), claimed worktrees
//! and branches the run provably owns, claimed paths that lie inside the
//! run's own directory, and the scratch directories. Symlinks are never
//! followed and mount points (other file systems, or bind mounts of the same
//! one) are never entered: a mount point is left and reported. The
//! manifest, `inputs/`, `outputs/`, `work/` and `logs/` stay as evidence.
//! Every step is idempotent: two reapers at once, or a reaper killed
//! half-way and run again, end in the same state.
//!
//! A plain run can edit its own manifest, so every claim is checked again
//! here, whatever was checked when it was made. A worktree is removed only
//! when it lies inside the run's directory (no symlink on the way) and its
//! repository lists it ([`worktree::owned`]); runws removes its files
//! itself, then has git forget it. A branch is deleted only when its name
//! is the run's ([`worktree::branch_is_the_runs`]), no live run claims it,
//! no worktree has it checked out, and every commit on it is on another ref
//! too (or `--drop-unmerged`); it is deleted only if it still points where
//! it was checked. Anything else is kept and the step says why. Every git
//! goes through [`crate::git`]. A run removed for its age (`--keep`) is
//! torn down first, and kept when that fails.

use std::path::{Component, Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::fsx::Dir;
use crate::git;
use crate::manifest::{self, Claim, ClaimKind, Manifest, ReapRecord, Status};
use crate::pgroup::{self, Procs, RunFacts};
use crate::procinfo;
use crate::shown;
use crate::workspace::{self, Root, RunDir, SCRATCH};
use crate::worktree::{self, NotOwned, Owned};

/// The wait between SIGTERM and SIGKILL to a leftover process group,
/// unless `--grace` says otherwise.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(2);
/// [`DEFAULT_GRACE`] as `--help` shows it.
pub const DEFAULT_GRACE_SHOWN: &str = "2s";

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
    /// Delete a claimed branch even when its commits are on no other ref.
    pub drop_unmerged: bool,
    /// Where a run whose seal recorded nothing may have its archive all
    /// the same (`--archive-store`, `RUNWS_ARCHIVE_STORE`).
    pub archive_store: Option<crate::archive_store::Place>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            dry_run: false,
            keep: None,
            grace: DEFAULT_GRACE,
            lock_wait: Duration::from_secs(2),
            keep_branch: false,
            drop_unmerged: false,
            archive_store: None,
        }
    }
}

/// What happened to one run.
#[derive(Debug, Serialize)]
pub struct RunReport {
    pub run_id: String,
    /// The status before this reaper looked (or why it could not read it).
    pub status: String,
    pub action: Action,
    pub reason: Reason,
    pub steps: Vec<Step>,
}

/// What a reaper did with one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// Left alone: live, already reaped, or not readable.
    Skipped,
    /// Torn down (scratch, claims, process groups).
    Reaped,
    /// Removed whole: past its retention, or left by a runws killed before
    /// it wrote the first record.
    Removed,
    /// `--dry-run`: would be torn down.
    WouldReap,
    /// `--dry-run`: would be removed whole.
    WouldRemove,
    /// Its lease ran out, but its runws is alive.
    Refused,
    /// Could not be torn down completely.
    Failed,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Skipped => "skipped",
            Action::Reaped => "reaped",
            Action::Removed => "removed",
            Action::WouldReap => "would-reap",
            Action::WouldRemove => "would-remove",
            Action::Refused => "refused",
            Action::Failed => "failed",
        }
    }
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
) -> pgroup::GroupEnd {
    pgroup::end(pgid, start_time, grace, facts, procs)
}

/// Ends process group `pgid` if every member is provably the run's (see
/// [`end_group`]), for callers that are not a reap: a lane's reset.
pub(crate) fn end_recorded_group(
    root: &Root,
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
    end_group(pgid, start_time, grace, facts.as_ref(), &Procs::scan(Some(root))).message
}

/// How one teardown step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// Done now, or found done already.
    Done,
    /// Left in place on purpose: not the run's to remove, or unmerged work.
    Kept,
    /// Could not be done: the teardown is incomplete.
    Failed,
    /// `--dry-run`: what a reap would do now.
    WouldDo,
}

/// What a step of a teardown is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    /// A claimed path, as the run wrote it.
    Path(String),
    /// A claimed worktree, as the run wrote it.
    Worktree(String),
    /// A claimed branch, as the run wrote it.
    Branch(String),
    /// A process group.
    Group(i32),
    /// The scratch directories removed.
    Scratch(Vec<&'static str>),
    /// One entry of the run directory: a scratch directory, a temp file.
    Entry(&'static str),
    /// The run directory, whole.
    RunDir,
    /// The record of the teardown in the manifest.
    Record,
}

/// Why a step left something in place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeptWhy {
    OutsideRun,
    NotUtf8,
    NotPlainInside,
    IsRunDir,
    Evidence,
    SymlinkOnTheWay,
    NoRepository,
    /// Not the run's worktree, as [`worktree::owned`] says.
    NotOwned(String),
    /// `--keep-branch`.
    KeepBranch,
    NotABranchName,
    /// Its name is not one runws gives the run.
    NotTheRunsName {
        run_id: String,
    },
    ClaimedByLive {
        run: String,
    },
    CheckedOut {
        worktree: String,
    },
    Unmerged {
        commit: String,
    },
}

/// One step of a teardown (or of a dry run's plan): what was done, as a
/// value the reaper decides on; [`Step::outcome`] and [`Step::message`]
/// render it, the latter as a person reads it (`--json` shows both).
#[derive(Debug, Clone)]
pub enum Step {
    /// Removed (deleted, for a branch) now.
    Removed(Item),
    /// Found gone already.
    AlreadyGone(Item),
    /// `--dry-run`: would be removed (from that repository, for a
    /// worktree or branch).
    WouldRemove(Item, Option<PathBuf>),
    /// Left in place on purpose.
    Kept(Item, KeptWhy),
    /// A mount point left, with the directories leading to it.
    MountLeft(PathBuf),
    /// Could not be done, and why.
    Failed(Item, String),
    /// A process group on another host (named when known): not signalled.
    OnAnotherHost { pgid: String, host: Option<String> },
    /// A claimed process group that is not a number.
    NotAGroup(String),
    /// A claim of a kind this runws does not know.
    UnknownKind(String),
    /// A process group the reaper ended, or did not, as [`pgroup`] reports it.
    Group(pgroup::Ended, String),
    /// A leftover temp file, as [`crate::leftovers`] reports it.
    Leftover(Outcome, String),
    /// The run's control group, left by a runws that was killed: the
    /// processes in it killed (how many), and it removed.
    ControlGroup(u64),
}

impl Step {
    pub fn outcome(&self) -> Outcome {
        match self {
            Step::Removed(_) | Step::AlreadyGone(_) | Step::OnAnotherHost { .. } | Step::ControlGroup(_) => {
                Outcome::Done
            }
            Step::WouldRemove(..) => Outcome::WouldDo,
            Step::Kept(..) | Step::MountLeft(_) => Outcome::Kept,
            Step::Failed(..) | Step::NotAGroup(_) | Step::UnknownKind(_) => Outcome::Failed,
            Step::Group(pgroup::Ended::Survived, _) => Outcome::Failed,
            Step::Group(..) => Outcome::Done,
            Step::Leftover(outcome, _) => *outcome,
        }
    }

    /// The step as a person reads it: every message of a reap is made here
    /// (a process group's and a leftover's by the module that acted).
    pub fn message(&self) -> String {
        match self {
            Step::Removed(Item::Scratch(names)) => format!("removed scratch {}", names.join(", ")),
            Step::Removed(Item::Branch(name)) => format!("deleted branch `{}`", shown::text(name)),
            Step::Removed(item) => format!("removed {}", named(item)),
            Step::AlreadyGone(item) => format!("{}: already gone", named(item)),
            Step::WouldRemove(Item::Scratch(names), _) => {
                format!("would remove scratch {}", names.join(", "))
            }
            Step::WouldRemove(Item::Group(pgid), _) => {
                format!("would end process group {pgid} if every member is still provably the run's")
            }
            Step::WouldRemove(item, repo) => {
                let verb = if matches!(item, Item::Branch(_)) { "delete" } else { "remove" };
                match repo {
                    Some(repo) => format!("would {verb} {} of `{}`", named(item), repo.display()),
                    None => format!("would {verb} {}", named(item)),
                }
            }
            Step::Kept(Item::Branch(name), KeptWhy::KeepBranch) => {
                format!("kept branch `{}` (--keep-branch)", shown::text(name))
            }
            Step::Kept(Item::Path(value), why) => format!("kept `{}`: {}", shown::text(value), kept_why(why)),
            Step::Kept(item, why) => format!("kept {}: {}", named(item), kept_why(why)),
            Step::MountLeft(p) => {
                format!("left mount point `{}` and the directories leading to it", p.display())
            }
            Step::Failed(Item::Record, e) => format!("cannot record the teardown: {e}"),
            Step::Failed(Item::Branch(name), e) => {
                format!("cannot delete branch `{}`: {e}", shown::text(name))
            }
            Step::Failed(item, e) => format!("cannot remove {}: {e}", named(item)),
            Step::OnAnotherHost { pgid, host: Some(host) } => {
                format!("process group {pgid}: on host `{host}`, not signalled from here")
            }
            Step::OnAnotherHost { pgid, host: None } => {
                format!("process group {pgid}: on another host, not signalled")
            }
            Step::NotAGroup(value) => format!("claimed pgid `{value}` is not a number"),
            Step::UnknownKind(kind) => format!("unknown claim kind `{kind}`"),
            Step::Group(_, message) | Step::Leftover(_, message) => message.clone(),
            Step::ControlGroup(n) => {
                format!("killed {n} process(es) left in the run's control group, and removed it")
            }
        }
    }
}

/// An item as a step's message names it. Values the run wrote are shown
/// escaped (see [`crate::shown`]).
fn named(item: &Item) -> String {
    match item {
        Item::Path(v) => format!("path `{}`", shown::text(v)),
        Item::Worktree(v) => format!("worktree `{}`", shown::text(v)),
        Item::Branch(v) => format!("branch `{}`", shown::text(v)),
        Item::Group(pgid) => format!("process group {pgid}"),
        Item::Scratch(names) => format!("scratch {}", names.join(", ")),
        Item::Entry(name) => name.to_string(),
        Item::RunDir => "the run directory".into(),
        Item::Record => "the record of the teardown".into(),
    }
}

fn kept_why(why: &KeptWhy) -> String {
    match why {
        KeptWhy::OutsideRun => "outside the run directory".into(),
        KeptWhy::NotUtf8 => "not UTF-8".into(),
        KeptWhy::NotPlainInside => "not a plain path inside the run".into(),
        KeptWhy::IsRunDir => "that is the run directory itself".into(),
        KeptWhy::Evidence => "evidence is never removed by a claim".into(),
        KeptWhy::SymlinkOnTheWay => "a symlink is on the way".into(),
        KeptWhy::NoRepository => "no absolute repository recorded".into(),
        KeptWhy::NotOwned(why) => why.clone(),
        KeptWhy::KeepBranch => "--keep-branch".into(),
        KeptWhy::NotABranchName => "not a branch name".into(),
        KeptWhy::NotTheRunsName { run_id } => format!(
            "not a name runws gives this run (`runws/{run_id}`, or one carrying its RUNWS_PREFIX `{}` or its run id)",
            crate::workspace::prefix_for(run_id)
        ),
        KeptWhy::ClaimedByLive { run } => format!("claimed by the live run `{run}` too"),
        KeptWhy::CheckedOut { worktree } => format!("the worktree `{worktree}` has it checked out"),
        KeptWhy::Unmerged { commit } => {
            format!("commit {commit} is on no other ref (unmerged work; `reap --drop-unmerged` deletes it)")
        }
    }
}

/// As `--json` shows a step: its outcome and its message.
impl Serialize for Step {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut step = s.serialize_struct("Step", 2)?;
        step.serialize_field("outcome", &self.outcome())?;
        step.serialize_field("message", &self.message())?;
        step.end()
    }
}

/// Removes a claimed path, only if it lies inside the run directory, walking
/// to it one component at a time without following symlinks.
fn remove_claimed_path(run: &RunDir, claim: &Claim, dry_run: bool) -> Step {
    let item = || Item::Path(claim.value.clone());
    let kept = |why: KeptWhy| Step::Kept(item(), why);
    let path = Path::new(&claim.value);
    let Ok(rel) = path.strip_prefix(run.path()) else {
        return kept(KeptWhy::OutsideRun);
    };
    let mut parts = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(p) => match p.to_str() {
                Some(p) => parts.push(p.to_string()),
                None => return kept(KeptWhy::NotUtf8),
            },
            _ => return kept(KeptWhy::NotPlainInside),
        }
    }
    let Some(last) = parts.pop() else {
        return kept(KeptWhy::IsRunDir);
    };
    if parts.is_empty() && matches!(last.as_str(), "manifest.json" | "inputs" | "outputs" | "logs") {
        return kept(KeptWhy::Evidence);
    }
    let gone = || Step::AlreadyGone(item());
    let failed = |e: Error| Step::Failed(item(), e.to_string());
    let mut dir = match run.sub(".") {
        Ok(d) => d,
        Err(e) => return failed(e),
    };
    for p in &parts {
        dir = match dir.sub(p) {
            Ok(d) => d,
            Err(Error::Symlink { .. }) => return kept(KeptWhy::SymlinkOnTheWay),
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                return gone();
            }
            Err(e) => return failed(e),
        };
    }
    if dry_run {
        return match dir.lstat(&last) {
            Ok(Some(_)) => Step::WouldRemove(item(), None),
            Ok(None) => gone(),
            Err(e) => failed(e),
        };
    }
    match dir.remove_tree(&last) {
        Ok(0) => gone(),
        Ok(_) => Step::Removed(item()),
        Err(e) => failed(e),
    }
}

/// The repository of a worktree or branch claim; none recorded is kept.
fn claim_repo(claim: &Claim, dry_run: bool) -> std::result::Result<&Path, Step> {
    match claim.repo.as_deref() {
        Some(r) if Path::new(r).is_absolute() => {
            // The repository `run --worktree` gave the run (recorded by runws,
            // so never one a claim merely names): before any git of runws's
            // follows what a sandboxed run, whose runws died before it could
            // clean up, left in the parts of `.git` it could write.
            if claim.made_by_runws
                && !dry_run
                && let Ok((_, common)) = git::dirs(Path::new(r))
            {
                for p in git::remove_planted(&common) {
                    eprintln!("runws: warning: removed `{}`: a run left it there", p.display());
                }
            }
            Ok(Path::new(r))
        }
        _ => {
            let item = match claim.kind {
                ClaimKind::Branch => Item::Branch(claim.value.clone()),
                _ => Item::Worktree(claim.value.clone()),
            };
            Err(Step::Kept(item, KeptWhy::NoRepository))
        }
    }
}

/// Removes a claimed worktree, only when [`worktree::owned`] proves it the
/// run's: its files are removed by runws (never following a symlink, never
/// entering another file system), then git forgets it.
fn remove_claimed_worktree(run: &RunDir, claim: &Claim, dry_run: bool, planned: &mut Vec<PathBuf>) -> Step {
    let repo = match claim_repo(claim, dry_run) {
        Ok(r) => r,
        Err(s) => return s,
    };
    let item = || Item::Worktree(claim.value.clone());
    let owned = match worktree::owned(run, &claim.value, repo) {
        Ok(o) => o,
        Err(NotOwned::Refused(why)) => return Step::Kept(item(), KeptWhy::NotOwned(why.to_string())),
        Err(NotOwned::Failed(e)) => return Step::Failed(item(), e.to_string()),
    };
    let listed = match owned {
        Owned::Gone => return Step::AlreadyGone(item()),
        Owned::Present { listed, .. } | Owned::Registered { listed } if dry_run => {
            planned.push(listed);
            return Step::WouldRemove(item(), Some(repo.to_path_buf()));
        }
        Owned::Present { rel, listed } => {
            if let Err(e) = remove_inside(run, &rel) {
                return Step::Failed(item(), e.to_string());
            }
            listed
        }
        Owned::Registered { listed } => listed,
    };
    let Some(listed) = listed.to_str() else {
        return Step::Failed(item(), "not UTF-8".into());
    };
    match git::run(repo, &["worktree", "remove", "--force", "--force", listed]) {
        Ok(_) => Step::Removed(item()),
        Err(e) => Step::Failed(item(), e.to_string()),
    }
}

/// Removes `rel` (components below the run directory) with
/// [`Dir::remove_tree`].
fn remove_inside(run: &RunDir, rel: &[String]) -> Result<()> {
    let Some((last, parents)) = rel.split_last() else { return Ok(()) };
    let mut dir = run.sub(".")?;
    for p in parents {
        dir = dir.sub(p)?;
    }
    dir.remove_tree(last).map(drop)
}

/// Deletes a claimed branch, only when it is the run's by its name, no
/// live run claims it, no worktree has it checked out, and (unless
/// `--drop-unmerged`) every commit on it is on another ref too.
/// In a dry run, `planned` holds the worktrees the run would have removed
/// by then.
fn delete_claimed_branch(
    m: &Manifest,
    claim: &Claim,
    opts: &Options,
    live: &LiveClaims,
    planned: &[PathBuf],
) -> Step {
    let name = &claim.value;
    let item = || Item::Branch(name.clone());
    let kept = |why: KeptWhy| Step::Kept(item(), why);
    if opts.keep_branch {
        return kept(KeptWhy::KeepBranch);
    }
    let repo = match claim_repo(claim, opts.dry_run) {
        Ok(r) => r,
        Err(s) => return s,
    };
    if !worktree::plain_branch_name(name) {
        return kept(KeptWhy::NotABranchName);
    }
    if !worktree::branch_is_the_runs(&m.run_id, name) {
        return kept(KeptWhy::NotTheRunsName { run_id: m.run_id.clone() });
    }
    if let Some(other) = live.claimant(&m.run_id, &ClaimKind::Branch, name, &claim.repo) {
        return kept(KeptWhy::ClaimedByLive { run: other });
    }
    let failed = |e: Error| Step::Failed(item(), e.to_string());
    let refname = format!("refs/heads/{name}");
    let tip = match git::run(repo, &["rev-parse", "--verify", "--quiet", &format!("{refname}^{{commit}}")]) {
        Ok(t) if !t.is_empty() => t,
        _ => return Step::AlreadyGone(item()),
    };
    let worktrees = match git::run(repo, &["worktree", "list", "--porcelain"]) {
        Ok(w) => w,
        Err(e) => return failed(e),
    };
    let mut at = "";
    for l in worktrees.lines() {
        if let Some(p) = l.strip_prefix("worktree ") {
            at = p;
        } else if l == format!("branch {refname}") && !planned.iter().any(|p| p == Path::new(at)) {
            return kept(KeptWhy::CheckedOut { worktree: at.to_string() });
        }
    }
    // Every ref but this branch, and the repository's own HEAD; other
    // worktrees' HEADs do not count, as they may go with their worktree.
    let only_here = match git::run(
        repo,
        &[
            "rev-list",
            "-n",
            "1",
            // Before `--all`, which it narrows.
            "--single-worktree",
            &tip,
            "--not",
            &format!("--exclude={refname}"),
            "--all",
        ],
    ) {
        Ok(c) => c,
        Err(e) => return failed(e),
    };
    if !only_here.is_empty() && !opts.drop_unmerged {
        return kept(KeptWhy::Unmerged { commit: only_here[..only_here.len().min(12)].to_string() });
    }
    if opts.dry_run {
        return Step::WouldRemove(item(), Some(repo.to_path_buf()));
    }
    // Deleted only if it still points where it was checked.
    match git::run(repo, &["update-ref", "-d", &refname, &tip]) {
        Ok(_) => Step::Removed(item()),
        Err(e) => failed(e),
    }
}

/// The worktree and branch claims of live runs, read once, when a
/// teardown first needs them.
struct LiveClaims {
    root: Root,
    claims: std::sync::OnceLock<Vec<(String, Claim)>>,
}

impl LiveClaims {
    fn new(root: &Root) -> LiveClaims {
        LiveClaims { root: root.clone(), claims: std::sync::OnceLock::new() }
    }

    /// A live run other than `me` that claims the same thing.
    fn claimant(&self, me: &str, kind: &ClaimKind, value: &str, repo: &Option<String>) -> Option<String> {
        let claims = self.claims.get_or_init(|| {
            let mut out = Vec::new();
            let Ok(runs) = self.root.runs_dir(false) else { return out };
            let now = SystemTime::now();
            for id in runs.entries().unwrap_or_default() {
                let Ok(run) = RunDir::open(&self.root, &id) else { continue };
                let Ok(m) = manifest::read(&run.dir) else { continue };
                if m.status == Status::Running && still_owned(&m, now).is_some() {
                    out.extend(m.claims.into_iter().map(|c| (id.clone(), c)));
                }
            }
            out
        });
        claims
            .iter()
            .find(|(id, c)| id != me && c.kind == *kind && c.value == value && &c.repo == repo)
            .map(|(id, _)| id.clone())
    }
}

/// Undoes everything the manifest records (with `--dry-run`, says what it
/// would undo); returns the steps and whether all succeeded.
fn teardown(
    run: &RunDir,
    m: &Manifest,
    opts: &Options,
    procs: &Procs,
    live: &LiveClaims,
) -> (Vec<Step>, bool) {
    let mut steps = Vec::new();
    let mut planned = Vec::new();
    let same_host = m.host == procinfo::hostname();
    let facts = RunFacts::of(&run.dir, m);
    let group = |pgid: i32, start_time: Option<u64>| {
        if opts.dry_run {
            return if pgid > 1 && procs.group_alive(pgid) {
                Step::WouldRemove(Item::Group(pgid), None)
            } else {
                Step::AlreadyGone(Item::Group(pgid))
            };
        }
        let ended = end_group(pgid, start_time, opts.grace, Some(&facts), procs);
        Step::Group(ended.ended, ended.message)
    };
    // The control group a killed runws left: named from ROOT and the run
    // id alone, so nothing the run wrote chooses what is killed.
    if same_host
        && !opts.dry_run
        && let Some(n) = crate::cgroup::reap(
            run.root.path(),
            &run.id,
            m.resources.as_ref().map(|r| r.group_dirs.as_slice()).unwrap_or_default(),
        )
    {
        steps.push(Step::ControlGroup(n));
    }
    if let Some(child) = &m.child {
        if same_host {
            steps.push(group(child.pgid, Some(child.start_time)));
        } else {
            steps.push(Step::OnAnotherHost { pgid: child.pgid.to_string(), host: Some(m.host.clone()) });
        }
    }
    for c in &m.claims {
        steps.push(match &c.kind {
            ClaimKind::Pgid if same_host => match c.value.parse::<i32>() {
                Ok(pgid) => group(pgid, c.start_time),
                Err(_) => Step::NotAGroup(c.value.clone()),
            },
            ClaimKind::Pgid => Step::OnAnotherHost { pgid: c.value.clone(), host: None },
            ClaimKind::Worktree => remove_claimed_worktree(run, c, opts.dry_run, &mut planned),
            ClaimKind::Branch => delete_claimed_branch(m, c, opts, live, &planned),
            ClaimKind::Path => remove_claimed_path(run, c, opts.dry_run),
            ClaimKind::Unknown(other) => Step::UnknownKind(other.clone()),
        });
    }
    let mut removed = Vec::new();
    let mut mounts = Vec::new();
    for name in SCRATCH {
        if opts.dry_run {
            if run.dir.lstat(name).is_ok_and(|st| st.is_some()) {
                removed.push(name);
            }
            continue;
        }
        match run.dir.remove_tree_keeping_mounts(name) {
            Ok(r) if !r.mounts_left.is_empty() => mounts.extend(r.mounts_left),
            Ok(r) if r.entries == 0 => {}
            Ok(_) => removed.push(name),
            Err(e) => steps.push(Step::Failed(Item::Entry(name), e.to_string())),
        }
    }
    if !removed.is_empty() {
        let scratch = Item::Scratch(removed);
        steps.push(if opts.dry_run { Step::WouldRemove(scratch, None) } else { Step::Removed(scratch) });
    }
    // Left on purpose, as a path outside the run is: what is mounted there
    // is not the run's to remove (once unmounted, `--keep` removes the run).
    steps.extend(mounts.into_iter().map(Step::MountLeft));
    // Temp files of writers that died: runws's manifest writes, `put`,
    // `import`.
    // What the manifest records is evidence, whatever its name.
    let mut found = Vec::new();
    crate::leftovers::temp_files(&run.dir, 0, &Default::default(), opts.dry_run, &mut found);
    let outputs = m.outputs.iter().map(|o| PathBuf::from(&o.file)).collect();
    let inputs = m.inputs.iter().map(|i| PathBuf::from(&i.path)).collect();
    for (sub, depth, recorded) in [("outputs", 0, outputs), ("inputs", 2, inputs)] {
        if let Ok(d) = run.sub(sub) {
            crate::leftovers::temp_files(&d, depth, &recorded, opts.dry_run, &mut found);
        }
    }
    steps.extend(found.into_iter().map(|f| step_of(f, opts.dry_run)));
    // The final record's temp file of a runws that never finished.
    if !opts.dry_run
        && let Err(e) = run.dir.unlink(workspace::FINAL_TEMP)
    {
        steps.push(Step::Failed(Item::Entry(workspace::FINAL_TEMP), e.to_string()));
    }
    let ok = !steps.iter().any(|s| s.outcome() == Outcome::Failed);
    (steps, ok)
}

/// Why a reaper did what it did with one run: a value the reaper and its
/// command line decide on, rendered as a person reads it in one place
/// ([`std::fmt::Display`]; `--json` shows that text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// Nothing to do: torn down before.
    AlreadyReaped,
    /// Another reaper removed it while this one looked.
    GoneMeanwhile,
    /// Its directory could not be opened.
    Unopenable(String),
    /// Its manifest could not be read.
    Unreadable(String),
    /// Its lease is valid until then.
    Live { lease_until: String },
    /// Its lease ran out, but its runws process is alive.
    RunwsAlive { lease_until: String, pid: i32 },
    /// `--dry-run`: nothing holds it.
    NobodyOwnsIt,
    /// Its manifest stayed locked.
    Locked,
    /// Its manifest stayed locked while it was to be removed whole.
    LockedForRemoval,
    /// Taking it over failed.
    TakeOverFailed(String),
    /// Torn down: it was running, and its runws is gone.
    Abandoned,
    /// Torn down: it had finished.
    Finished,
    /// To be removed whole (`--keep`).
    FinishedBefore(Duration),
    /// Removed whole (`--keep`).
    PastRetention,
    /// Past its retention, but kept.
    RetentionButTeardownFailed,
    /// No manifest yet: its runws holds the lock.
    BeingMade,
    /// No manifest when listed, one when locked.
    ManifestAppeared,
    /// No manifest, and nobody holds it.
    NoManifest,
    /// What dead writers left outside run directories.
    Leftovers,
    /// Removed whole (`--keep`): its seal recorded nothing, but the archive
    /// store holds its archive.
    PastRetentionListed(String),
    /// Past its retention and held, and the archive store could not be
    /// asked whether it holds the run's archive: decided by a later reap.
    EvidenceDeferred(String),
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reason::AlreadyReaped => f.write_str("already reaped"),
            Reason::GoneMeanwhile => f.write_str("removed by another reaper meanwhile"),
            Reason::Unopenable(e) => f.write_str(e),
            Reason::Unreadable(e) => write!(f, "{e}; nothing proves who owns it"),
            Reason::Live { lease_until } => write!(f, "live: lease until {lease_until}"),
            Reason::RunwsAlive { lease_until, pid } => {
                write!(f, "lease expired at {lease_until} but its runws process {pid} is alive")
            }
            Reason::NobodyOwnsIt => f.write_str("nobody owns it"),
            Reason::Locked => f.write_str("its manifest is locked (a stopped process holds it)"),
            Reason::LockedForRemoval => {
                f.write_str("its manifest is locked (another reaper may be removing it)")
            }
            Reason::TakeOverFailed(e) => f.write_str(e),
            Reason::Abandoned => f.write_str("lease expired and its runws process is gone"),
            Reason::Finished => f.write_str("finished; scratch reclaimed"),
            Reason::FinishedBefore(keep) => {
                write!(f, "finished before the last {}", humantime::format_duration(*keep))
            }
            Reason::PastRetention => f.write_str("past its retention"),
            Reason::RetentionButTeardownFailed => {
                f.write_str("past its retention, but its teardown failed: the run is kept")
            }
            Reason::BeingMade => f.write_str("being made: its runws holds its lock"),
            Reason::ManifestAppeared => f.write_str("its manifest appeared meanwhile"),
            Reason::NoManifest => f.write_str("no manifest, and the runws that made it is gone"),
            Reason::Leftovers => f.write_str("left by runws processes that died"),
            Reason::PastRetentionListed(url) => {
                write!(
                    f,
                    "past its retention; its seal recorded nothing, but the archive store holds `{url}`"
                )
            }
            Reason::EvidenceDeferred(why) => write!(
                f,
                "held (its seal saved nothing) and the archive store cannot say whether it holds the run's \
                 archive ({why}): kept, for a later reap to decide"
            ),
        }
    }
}

impl Serialize for Reason {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A leftover's report line as a step.
fn step_of(f: crate::leftovers::Found, dry_run: bool) -> Step {
    let outcome = match (f.ok, f.acted) {
        (false, _) => Outcome::Failed,
        (true, false) => Outcome::Kept,
        (true, true) if dry_run => Outcome::WouldDo,
        (true, true) => Outcome::Done,
    };
    Step::Leftover(outcome, f.message)
}

fn reaper_id() -> String {
    format!("{}:{}", procinfo::hostname(), std::process::id())
}

fn older_than(t: Option<&str>, keep: Duration, now: SystemTime) -> bool {
    t.and_then(manifest::parse_time).is_some_and(|t| now.duration_since(t).is_ok_and(|age| age >= keep))
}

/// Who still owns a running run ([`Reason::Live`] or
/// [`Reason::RunwsAlive`]); `None` when nobody does.
fn still_owned(m: &Manifest, now: SystemTime) -> Option<Reason> {
    if m.lease_valid_at(now) {
        return Some(Reason::Live { lease_until: m.lease_until.clone() });
    }
    if m.host == procinfo::hostname() && procinfo::is_same_process(m.runws.pid, m.runws.start_time) {
        return Some(Reason::RunwsAlive { lease_until: m.lease_until.clone(), pid: m.runws.pid });
    }
    None
}

/// What a reaper does with a run still owned: a live lease is skipped, a
/// live runws past its lease refused.
fn owned_action(owner: &Reason) -> Action {
    match owner {
        Reason::RunwsAlive { .. } => Action::Refused,
        _ => Action::Skipped,
    }
}

fn report(run_id: &str, status: &str, action: Action, reason: Reason) -> RunReport {
    RunReport { run_id: run_id.to_string(), status: status.to_string(), action, reason, steps: Vec::new() }
}

/// Reaps every run under `root`.
pub fn reap(root: &Root, opts: &Options) -> Result<Vec<RunReport>> {
    let runs = match root.runs_dir(false) {
        Ok(d) => d,
        Err(_) => return Ok(leftover_reports(root, opts)),
    };
    let mut ids: Vec<String> =
        runs.entries()?.into_iter().filter(|id| workspace::check_run_id(id).is_ok()).collect();
    ids.sort();
    let procs = Procs::scan(Some(root));
    let live = LiveClaims::new(root);
    let what = if opts.dry_run { "looking at runs" } else { "reaping" };
    let progress = crate::progress::Progress::start(what.into(), "runs", Some(ids.len() as u64));
    // Runs are independent: reap them on every core, keeping the order.
    let workers = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1).clamp(1, 8);
    let chunk = ids.len().div_ceil(workers).max(1);
    let reports: Vec<RunReport> = std::thread::scope(|scope| {
        let handles: Vec<_> = ids
            .chunks(chunk)
            .map(|part| {
                let (runs, procs, live, progress) = (&runs, &procs, &live, &progress);
                scope.spawn(move || {
                    part.iter()
                        .map(|id| {
                            let report = reap_one(root, runs, id, opts, procs, live);
                            progress.add(1, 0);
                            report
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
    });
    drop(progress);
    let mut reports = reports;
    reports.extend(leftover_reports(root, opts));
    if !opts.dry_run {
        // Manifests above were renamed into place unsynced: one sync of the
        // file system makes all of them (and the removals) durable at once.
        nix::unistd::syncfs(runs.borrow()).map_err(|e| Error::io("cannot sync", runs.path(), e.into()))?;
    }
    Ok(reports)
}

/// The leftovers of dead writers outside run directories: temp files in
/// `ROOT/archive`, `ROOT/quarantine` and `ROOT/store`, and restores' staging
/// directories. One report per place that held any, named `ROOT/<place>`.
fn leftover_reports(root: &Root, opts: &Options) -> Vec<RunReport> {
    let mut out = Vec::new();
    let mut push = |place: &str, found: Vec<crate::leftovers::Found>| {
        if found.is_empty() {
            return;
        }
        let steps: Vec<Step> = found.into_iter().map(|f| step_of(f, opts.dry_run)).collect();
        let action = if steps.iter().any(|s| s.outcome() == Outcome::Failed) {
            Action::Failed
        } else if !steps.iter().any(|s| matches!(s.outcome(), Outcome::Done | Outcome::WouldDo)) {
            Action::Skipped
        } else if opts.dry_run {
            Action::WouldReap
        } else {
            Action::Reaped
        };
        let mut r = report(&format!("ROOT/{place}"), "leftovers", action, Reason::Leftovers);
        r.steps = steps;
        out.push(r);
    };
    let top = Dir::open(root).ok();
    for place in [workspace::ARCHIVE, workspace::QUARANTINE, workspace::STORE] {
        let mut found = Vec::new();
        // The place itself, never a symlink a run put in its place.
        if let Some(dir) = top.as_ref().and_then(|t| t.sub(place).ok()) {
            crate::leftovers::temp_files(&dir, 3, &Default::default(), opts.dry_run, &mut found);
        }
        push(place, found);
    }
    push(workspace::RESTORES, crate::restores::reap(root, opts.dry_run));
    out
}

fn reap_one(
    root: &Root,
    runs: &Dir,
    id: &str,
    opts: &Options,
    procs: &Procs,
    live: &LiveClaims,
) -> RunReport {
    let now = SystemTime::now();
    let run = match RunDir::open(root, id) {
        Ok(r) => r,
        // Listed, then removed by another reaper (`--keep`): nothing to do.
        Err(Error::NoSuchRun { .. }) => return report(id, "gone", Action::Skipped, Reason::GoneMeanwhile),
        Err(e) => return report(id, "unreadable", Action::Skipped, Reason::Unopenable(e.to_string())),
    };
    let m = match manifest::read(&run.dir) {
        Ok(m) => m,
        Err(Error::ManifestMissing { .. }) => return without_manifest(runs, run, opts),
        Err(e) => {
            return report(id, "unreadable", Action::Skipped, Reason::Unreadable(e.to_string()));
        }
    };
    let was = m.status;
    let status = was.as_str();

    // Whole runs past their retention: torn down first, like any other.
    let retention_over = opts.keep.is_some_and(|keep| {
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
        finished && older_than(since, keep, now)
    });
    // A held run's evidence may be in the archive store all the same: the
    // manifest's record comes first (receipt, then quarantine), then what
    // the store lists. A store that does not answer defers the decision.
    let mut listed = None;
    let mut deferred = None;
    let retention_over = retention_over
        && (!held(&m)
            || match &opts.archive_store {
                None => false,
                Some(store) => match crate::archive_store::evidence(store, &m.job, &run.id) {
                    Ok(Some(found)) => {
                        listed = Some(found.archive);
                        true
                    }
                    Ok(None) => false,
                    Err(e) => {
                        deferred = Some(e.to_string());
                        false
                    }
                },
            });
    let listed_reason = |mut r: RunReport| {
        if let (Some(url), Reason::PastRetention | Reason::FinishedBefore(_)) = (&listed, &r.reason) {
            r.reason = Reason::PastRetentionListed(url.clone());
        }
        r
    };
    let remove_whole = |run: RunDir, mut r: RunReport| {
        r.reason = Reason::FinishedBefore(opts.keep.unwrap_or_default());
        if opts.dry_run {
            r.action = Action::WouldRemove;
            r.steps.push(Step::WouldRemove(Item::RunDir, None));
            return r;
        }
        // Under the run's lock, so another reaper's record of its own
        // teardown waits, then finds the manifest gone, instead of writing
        // into a directory being removed.
        let Ok(Some(lock)) = run.dir.lock_within(opts.lock_wait) else {
            r.action = Action::Skipped;
            r.reason = Reason::LockedForRemoval;
            return r;
        };
        if run.dir.is_removed() {
            r.action = Action::Removed;
            r.reason = Reason::GoneMeanwhile;
            return r;
        }
        let removed = runs.remove_tree(id);
        drop(lock);
        drop(run);
        match removed {
            Ok(_) => {
                r.action = Action::Removed;
                r.reason = Reason::PastRetention;
            }
            Err(e) => {
                r.action = Action::Failed;
                r.steps.push(Step::Failed(Item::RunDir, e.to_string()));
            }
        }
        r
    };

    let needs_teardown = match m.status {
        Status::Running => {
            if let Some(owner) = still_owned(&m, now) {
                return report(id, status, owned_action(&owner), owner);
            }
            true
        }
        _ => !m.reap.as_ref().is_some_and(|r| r.completed),
    };
    if !needs_teardown {
        if retention_over {
            return listed_reason(remove_whole(
                run,
                report(id, status, Action::Removed, Reason::PastRetention),
            ));
        }
        if let Some(why) = deferred {
            return report(id, status, Action::Skipped, Reason::EvidenceDeferred(why));
        }
        return report(id, status, Action::Skipped, Reason::AlreadyReaped);
    }
    if opts.dry_run {
        let (steps, _) = teardown(&run, &m, opts, procs, live);
        let mut r = report(id, status, Action::WouldReap, Reason::NobodyOwnsIt);
        r.steps = steps;
        if retention_over {
            return listed_reason(remove_whole(run, r));
        }
        return r;
    }

    // Take the run over: under the lock, re-check that nobody owns it.
    let Ok(Some(lock)) = run.dir.lock_within(opts.lock_wait) else {
        return report(id, status, Action::Skipped, Reason::Locked);
    };
    let taken = manifest::update_locked_unsynced(&run.dir, &lock, |m| {
        let was = m.status;
        if was == Status::Running {
            if let Some(owner) = still_owned(m, SystemTime::now()) {
                return Ok(Err(owner));
            }
            m.status = Status::Abandoned;
        }
        if was == Status::Running || m.reap.is_none() {
            m.reap = Some(ReapRecord {
                reaped_at: manifest::format_time(SystemTime::now()),
                reaped_by: reaper_id(),
                was,
                completed: false,
                actions: Vec::new(),
            });
        }
        Ok(Ok(m.clone()))
    });
    drop(lock);
    let m = match taken {
        Ok(Ok(m)) => m,
        Ok(Err(owner)) => return report(id, status, Action::Refused, owner),
        Err(e) if removed_meanwhile(&run, &e) => {
            return report(id, status, Action::Skipped, Reason::GoneMeanwhile);
        }
        Err(e) => return report(id, status, Action::Failed, Reason::TakeOverFailed(e.to_string())),
    };

    let (steps, ok) = teardown(&run, &m, opts, procs, live);
    let recorded = manifest::update_unsynced(&run.dir, |m| {
        if let Some(r) = m.reap.as_mut() {
            r.completed = ok;
            r.actions.extend(steps.iter().map(Step::message));
        }
        Ok(())
    });
    let mut r = report(
        id,
        status,
        if ok { Action::Reaped } else { Action::Failed },
        if was == Status::Running { Reason::Abandoned } else { Reason::Finished },
    );
    r.steps = steps;
    if let Err(e) = &recorded
        && removed_meanwhile(&run, e)
    {
        // Another reaper finished this teardown and removed the run whole.
        r.action = Action::Removed;
        r.reason = Reason::GoneMeanwhile;
        return r;
    }
    if let Err(e) = recorded {
        r.action = Action::Failed;
        r.steps.push(Step::Failed(Item::Record, e.to_string()));
    }
    if r.action == Action::Reaped && retention_over {
        return listed_reason(remove_whole(run, r));
    }
    if r.action == Action::Failed && retention_over {
        r.reason = Reason::RetentionButTeardownFailed;
    }
    r
}

/// A run directory without a manifest: left by a runws killed before it
/// wrote the first one (while it copied the inputs, say), or by a reaper
/// killed while it removed the run. Removed whole once nothing live holds
/// it: its lock is free (runws holds it from making the directory until
/// the first manifest exists).
fn without_manifest(runs: &Dir, run: RunDir, opts: &Options) -> RunReport {
    let id = run.id.clone();
    let status = "no-manifest";
    let Ok(Some(lock)) = run.dir.lock_within(Duration::ZERO) else {
        return report(&id, status, Action::Skipped, Reason::BeingMade);
    };
    match manifest::read(&run.dir) {
        Err(Error::ManifestMissing { .. }) => {}
        // Written meanwhile: the next reap looks at it.
        _ => return report(&id, status, Action::Skipped, Reason::ManifestAppeared),
    }
    let reason = Reason::NoManifest;
    if opts.dry_run {
        let mut r = report(&id, status, Action::WouldRemove, reason);
        r.steps.push(Step::WouldRemove(Item::RunDir, None));
        return r;
    }
    let removed = runs.remove_tree(&id);
    drop(lock);
    match removed {
        Ok(_) => report(&id, status, Action::Removed, reason),
        Err(e) => {
            let mut r = report(&id, status, Action::Failed, reason);
            r.steps.push(Step::Failed(Item::RunDir, e.to_string()));
            r
        }
    }
}

/// True when `e` came from the run having been removed (or being removed,
/// its manifest gone first) since this reaper read it: only a reaper's
/// `--keep` removes a manifest.
fn removed_meanwhile(run: &RunDir, e: &Error) -> bool {
    matches!(e, Error::ManifestMissing { .. }) || run.dir.is_removed()
}

/// A run whose seal failed to save anything is held until its retention
/// ends by its own record, never removed by `--keep`.
fn held(m: &Manifest) -> bool {
    m.held == Some(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each step renders the outcome and the line earlier versions wrote.
    #[test]
    fn steps_render_their_outcome_and_message() {
        let repo = || Some(PathBuf::from("/src/app"));
        let cases = [
            (Step::Removed(Item::Path("/r/work/x".into())), Outcome::Done, "removed path `/r/work/x`"),
            (Step::Removed(Item::Branch("runws/r".into())), Outcome::Done, "deleted branch `runws/r`"),
            (Step::Removed(Item::Scratch(vec!["home", "tmp"])), Outcome::Done, "removed scratch home, tmp"),
            (Step::AlreadyGone(Item::Group(42)), Outcome::Done, "process group 42: already gone"),
            (
                Step::AlreadyGone(Item::Worktree("/r/repo".into())),
                Outcome::Done,
                "worktree `/r/repo`: already gone",
            ),
            (
                Step::WouldRemove(Item::Worktree("/r/repo".into()), repo()),
                Outcome::WouldDo,
                "would remove worktree `/r/repo` of `/src/app`",
            ),
            (
                Step::WouldRemove(Item::Branch("runws/r".into()), repo()),
                Outcome::WouldDo,
                "would delete branch `runws/r` of `/src/app`",
            ),
            (
                Step::WouldRemove(Item::Group(7), None),
                Outcome::WouldDo,
                "would end process group 7 if every member is still provably the run's",
            ),
            (Step::WouldRemove(Item::RunDir, None), Outcome::WouldDo, "would remove the run directory"),
            (
                Step::Kept(Item::Path("/etc\n".into()), KeptWhy::OutsideRun),
                Outcome::Kept,
                "kept `/etc\\n`: outside the run directory",
            ),
            (
                Step::Kept(Item::Branch("b".into()), KeptWhy::KeepBranch),
                Outcome::Kept,
                "kept branch `b` (--keep-branch)",
            ),
            (
                Step::Kept(Item::Worktree("/w".into()), KeptWhy::NoRepository),
                Outcome::Kept,
                "kept worktree `/w`: no absolute repository recorded",
            ),
            (Step::Failed(Item::Entry("home"), "busy".into()), Outcome::Failed, "cannot remove home: busy"),
            (
                Step::Failed(Item::RunDir, "busy".into()),
                Outcome::Failed,
                "cannot remove the run directory: busy",
            ),
            (Step::Failed(Item::Record, "full".into()), Outcome::Failed, "cannot record the teardown: full"),
            (
                Step::OnAnotherHost { pgid: "9".into(), host: Some("h".into()) },
                Outcome::Done,
                "process group 9: on host `h`, not signalled from here",
            ),
            (Step::NotAGroup("x".into()), Outcome::Failed, "claimed pgid `x` is not a number"),
            (Step::UnknownKind("device".into()), Outcome::Failed, "unknown claim kind `device`"),
            (Step::Group(pgroup::Ended::Survived, "m".into()), Outcome::Failed, "m"),
            (Step::Group(pgroup::Ended::Refused, "m".into()), Outcome::Done, "m"),
        ];
        for (step, outcome, message) in cases {
            assert_eq!((step.outcome(), step.message().as_str()), (outcome, message), "{step:?}");
            let json = serde_json::to_value(&step).unwrap();
            assert_eq!(json["message"], message);
        }
        assert_eq!(serde_json::to_value(Reason::AlreadyReaped).unwrap(), "already reaped");
    }
}
