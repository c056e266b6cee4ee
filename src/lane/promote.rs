//! The end of a lane: `promote` puts the approved work on a new branch of
//! the real repository; `reset` ends what the lane left running and
//! removes the lane, keeping its kit and a copy of its card.
//!
//! A promotion copies the approved kit's `work/`, restored from the kit
//! and checked against the sha256 the stamp approved, never the live lane
//! directory. It creates the branch from the repository's `HEAD` in a new
//! `git worktree`, so the user's own checkout is never touched, and leaves
//! the files there uncommitted: committing and pushing stay the user's
//! decision. Entries named `.git` are never copied; every write goes
//! through [`Dir`], so a symlink in the branch is replaced, never written
//! through. git runs in the user's repository as [`crate::git`] runs it: a
//! hook or filter a run planted there does not run (nor does the user's own
//! global configuration apply: a Git LFS file is checked out as its
//! pointer).
//!
//! A reset signals only the process groups the lane's runs recorded, and
//! only while each is still the group that was recorded (leader pid and
//! start time); it removes the lane with [`Dir::remove_tree`], which never
//! follows a symlink.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::stat::SFlag;

use super::card::{Card, Promotion, Reset, State};
use super::{CARD_JSON, Lane, Step, allowed, check_named, git_out, now, restore_scanned};
use crate::error::{Error, IoContext, Result};
use crate::fsx::walk::{Visit, Walk};
use crate::fsx::{Dir, kind};
use crate::manifest;
use crate::procinfo;
use crate::workspace::{Root, RunDir};

pub struct PromoteRequest<'a> {
    pub repo: &'a Path,
    pub branch: Option<&'a str>,
    pub worktree: Option<&'a Path>,
}

/// git in the user's repository, which a run may have written: nothing
/// there runs (see [`crate::git`]).
fn git_user(repo: &Path) -> Command {
    crate::git::command(repo)
}

pub fn promote(root: &Root, name: &str, req: &PromoteRequest<'_>) -> Result<Promotion> {
    let lane = Lane::open(root, name)?;
    let _lock = lane.lock()?;
    let mut card = lane.read()?;
    allowed(name, card.state, Step::Promote)?;
    let (Some(stamp), Some(kit)) = (card.stamp.clone(), card.kit.clone()) else {
        return Err(Error::LaneRefused(format!("lane `{name}` has no approved kit on its card")));
    };
    let kit_path = PathBuf::from(&kit.path);
    let sha = crate::restore::verify(&kit_path)?;
    if sha != stamp.kit_sha256 {
        return Err(Error::LaneRefused(format!(
            "lane `{name}`: kit `{}` changed after it was approved (approved sha256 {}, now {sha})",
            kit.path, stamp.kit_sha256
        )));
    }

    let mut c = git_user(req.repo);
    c.args(["rev-parse", "--show-toplevel"]);
    let top = PathBuf::from(git_out(c, "find the repository")?);
    let branch = req.branch.map_or_else(|| format!("lane/{}", card.ticket), str::to_string);
    let mut c = git_user(&top);
    c.args(["check-ref-format", "--branch", &branch]);
    git_out(c, &format!("accept `{branch}` as a branch name"))?;
    let mut c = git_user(&top);
    c.args(["rev-parse", "--verify", "--quiet"]).arg(format!("refs/heads/{branch}"));
    if c.stdout(Stdio::null()).status().is_ok_and(|s| s.success()) {
        return Err(Error::LaneRefused(format!(
            "branch `{branch}` exists already in `{}`; choose another with --branch",
            top.display()
        )));
    }
    let worktree = match req.worktree {
        Some(w) => std::path::absolute(w).ctx("cannot resolve", w)?,
        None => root.lane_worktree(name),
    };
    if std::fs::symlink_metadata(&worktree).is_ok() {
        return Err(Error::LaneRefused(format!(
            "`{}` exists already; choose another with --worktree",
            worktree.display()
        )));
    }
    if let Some(parent) = worktree.parent() {
        crate::fsx::create_private_dirs(parent).ctx("cannot create", parent)?;
    }

    // The approved bytes, restored and rescanned, are what gets copied.
    let (_tmp, restored) = restore_scanned(root, &kit_path, "promote-")?;

    let mut c = crate::git::converting(&top)?;
    c.args(["worktree", "add", "-q", "-b", &branch]).arg(&worktree).arg("HEAD");
    git_out(c, &format!("create branch `{branch}` in a new worktree"))?;
    let mut files = 0;
    if let Err(e) = copy_tree(&Dir::open(restored.join("work"))?, &Dir::open(&worktree)?, &mut files) {
        // Undo only what this promotion just made, so it can be tried again.
        let mut c = git_user(&top);
        c.args(["worktree", "remove", "--force"]).arg(&worktree);
        let _ = git_out(c, "remove the new worktree");
        let mut c = git_user(&top);
        c.args(["branch", "-D", &branch]);
        let _ = git_out(c, "remove the new branch");
        return Err(e);
    }

    let promotion = Promotion {
        repo: top.display().to_string(),
        branch,
        worktree: worktree.display().to_string(),
        files,
        kit_sha256: sha,
        at: now(),
    };
    card.promotion = Some(promotion.clone());
    card.state = State::Promoted;
    card.event(
        "promote",
        format!("{files} files onto branch `{}` in `{}`", promotion.branch, promotion.worktree),
    );
    lane.write(&card)?;
    Ok(promotion)
}

/// Copies `src` into `dst`, replacing files and links, skipping `.git`.
fn copy_tree(src: &Dir, dst: &Dir, files: &mut u64) -> Result<()> {
    // The copies of the directories the walk is in, below `dst`: the last
    // holds the entries being copied.
    let mut made: Vec<Dir> = Vec::new();
    Walk::new().run(src, |e| {
        let name = super::kit::utf8_name(e)?;
        made.truncate(e.depth - 1);
        let to = made.last().unwrap_or(dst);
        let Some(st) = e.stat.filter(|_| name != ".git") else { return Ok(Visit::Skip) };
        let mode = st.st_mode & 0o777;
        match kind(&st) {
            SFlag::S_IFDIR => {
                to.mkdir_if_missing(name, mode | 0o700)?;
                let sub = to.sub(name)?;
                made.push(sub);
                return Ok(Visit::Descend);
            }
            SFlag::S_IFREG => {
                let Some(mut from) = e.dir.open_read(name)? else { return Ok(Visit::Skip) };
                to.write_atomic_with(name, mode, false, |to| {
                    io::copy(&mut from, to)?;
                    to.set_permissions(std::fs::Permissions::from_mode(mode))
                })?;
                *files += 1;
            }
            SFlag::S_IFLNK => {
                let target =
                    nix::fcntl::readlinkat(e.dir.borrow(), name).ctx("cannot read link", e.path())?;
                if to.lstat(name)?.is_some_and(|st| kind(&st) == SFlag::S_IFDIR) {
                    return Err(Error::Other(format!(
                        "cannot put a link over the directory `{}`",
                        to.join(name).display()
                    )));
                }
                to.unlink(name)?;
                to.symlink(Path::new(&target), name)?;
                *files += 1;
            }
            // A restore never makes anything else.
            _ => return Err(Error::SpecialFile { path: e.path() }),
        }
        Ok(Visit::Skip)
    })
}

/// Ends the lane: its recorded process groups, then the lane directory.
/// The kit stays; the final card is kept beside it.
pub fn reset(root: &Root, name: &str, resetter: &str, grace: Duration) -> Result<Card> {
    let lane = Lane::open(root, name)?;
    let _lock = lane.lock()?;
    let mut card = lane.read()?;
    check_named(name, Step::Reset, "resetter", &card.resetter, resetter)?;
    // A reset that recorded itself but could not remove everything may finish.
    if card.state != State::Reset {
        allowed(name, card.state, Step::Reset)?;
        let groups = end_groups(root, &card, grace);
        card.reset = Some(Reset { by: card.resetter.clone(), at: now(), groups });
        card.state = State::Reset;
        card.event("reset", format!("reset by {}", card.resetter));
        lane.write(&card)?;
    }
    let kits = root.kits();
    crate::fsx::create_private_dirs(&kits).ctx("cannot create", &kits)?;
    super::write_card(&Dir::open(&kits)?, &format!("{name}.{CARD_JSON}"), &format!("{name}.card.md"), &card)?;
    Dir::open(root.lanes())?.remove_tree(name)?;
    Ok(card)
}

/// Ends each run's leftover process group, if every member is provably
/// the run's (see [`crate::pgroup`]).
fn end_groups(root: &Root, card: &Card, grace: Duration) -> Vec<String> {
    let host = procinfo::hostname();
    let mut steps = Vec::new();
    for r in &card.replay.runs {
        let run = RunDir::open(root, &r.run_id).ok();
        let recorded = run.as_ref().and_then(|d| manifest::read(&d.dir).ok());
        if let Some(m) = &recorded
            && m.host != host
        {
            steps.push(format!("run {}: ran on host `{}`; nothing signalled", r.run_id, m.host));
            continue;
        }
        let child = recorded.as_ref().and_then(|m| m.child.as_ref()).map(|c| (c.pgid, c.start_time));
        match child.or(r.pgid.zip(r.start_time)) {
            Some((pgid, start)) => steps.push(format!(
                "run {}: {}",
                r.run_id,
                crate::reap::end_recorded_group(
                    root,
                    run.as_ref(),
                    recorded.as_ref(),
                    pgid,
                    Some(start),
                    grace
                )
            )),
            None => steps.push(format!("run {}: no process group recorded", r.run_id)),
        }
    }
    steps
}
