//! `lane review`: a kit judged from the kit alone.
//!
//! The review verifies the kit against its checksum file, refuses a
//! quarantine kit, restores it into a fresh directory under
//! `ROOT/restores/` and rescans what it restored, as `runws restore` does.
//! It accepts only the lane's current kit, so a review is always of what
//! would be approved. Before running git in the restored repository it
//! replaces `.git/config` with a fixed minimal one, and git runs as
//! [`crate::git`] runs it, turning off every filter of the configuration
//! git really reads (a kit's `.git/commondir` can point elsewhere), so
//! nothing in the kit chooses what git executes (filters, fsmonitor, hooks,
//! external diffs); the diff stat goes through a scratch index, so the
//! restored repository is as the
//! kit holds it when `replay/eval.sh` runs, from `work/`, in a clean run of
//! the run pipeline (an environment built from empty, its own run id, stdin
//! from `/dev/null`). The result is recorded on the lane's card.

use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::stat::SFlag;

use super::card::{Card, Review, State};
use super::{Lane, Step, allowed, git_clean, git_out, now, restore_scanned};
use crate::error::{Error, Result};
use crate::fsx::{Dir, kind};
use crate::run::Finished;
use crate::workspace::Root;

/// What the review was asked to do.
pub struct ReviewOptions {
    pub timeout: Duration,
    /// Keep the restored copy and say where it is.
    pub keep: bool,
}

pub struct ReviewReport {
    pub lane: String,
    pub review: Review,
    pub restored: Option<PathBuf>,
}

const MINIMAL_GIT_CONFIG: &str = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n";

/// Reviews `kit`: restores it, shows its diff, runs its eval in a clean
/// run, and records the result on the lane's card.
pub fn review(root: &Root, kit: &Path, opts: &ReviewOptions) -> Result<ReviewReport> {
    if crate::restore::in_quarantine(kit) {
        return Err(Error::LaneRefused(format!(
            "`{}` is a quarantine kit: it failed the secret scan and is never reviewed",
            kit.display()
        )));
    }
    let sha = crate::restore::verify(kit)?;
    let (tmp, restored) = restore_scanned(root, kit, "review-")?;
    let rdir = Dir::open(&restored)?;
    let kit_card = super::read_card(&rdir, "in the kit")?;
    let ticket = std::fs::read_to_string(restored.join("TICKET")).unwrap_or_default();
    if ticket.lines().next() != Some(kit_card.ticket.as_str()) {
        return Err(Error::LaneRefused(format!("kit `{}`: its TICKET and its card disagree", kit.display())));
    }
    let lane = Lane::open(root, &kit_card.lane)?;
    let base = {
        let card = lane.read()?;
        allowed(&lane.name, card.state, Step::Review)?;
        current_kit(&lane.name, &card, &sha)?;
        card.base_commit
    };

    let work = restored.join("work");
    let wdir = rdir.sub("work")?;
    if wdir.lstat(".git")?.is_none_or(|st| kind(&st) != SFlag::S_IFDIR) {
        return Err(Error::LaneRefused(format!("kit `{}`: work/.git is not a directory", kit.display())));
    }
    wdir.sub(".git")?.write_atomic("config", MINIMAL_GIT_CONFIG.as_bytes(), 0o644, false)?;
    let diff_stat = diff_stat(&work, &base, &tmp.path().join("index"))?;

    let run_id = crate::workspace::new_run_id()?;
    let mut req = crate::run::Request::new(vec![restored.join("replay").join("eval.sh").into_os_string()]);
    req.root = Some(root.to_path_buf());
    req.run_id = Some(run_id.clone());
    req.job = Some(format!("{}-review", lane.name));
    req.ports = 0;
    // Zero is no timeout, in `runws run` as here.
    req.timeout = Some(opts.timeout);
    req.cwd = Some(work.clone());
    req.stdin = crate::run::Stdin::Null;
    let code = match crate::run::run(req) {
        // Interrupted (^C, a `kill` of the review): the eval had the signal
        // too, and its end says nothing of the kit. The review ends by the
        // same signal, recording nothing, as it would have without a run.
        Ok(Finished { interrupted: Some(signo), .. }) => {
            if let Ok(sig) = nix::sys::signal::Signal::try_from(signo) {
                let _ = nix::sys::signal::raise(sig);
            }
            return Err(Error::LaneRefused(format!("the review of `{}` was interrupted", kit.display())));
        }
        Ok(finished) => i32::from(finished.code),
        // As `runws run` reports a run that failed before its command ran.
        Err(e) => {
            eprintln!("runws: {}", crate::error::render(&e));
            i32::from(crate::error::exit_code_of(&e))
        }
    };
    let review = Review {
        result: if code == 0 { "pass".into() } else { "fail".into() },
        kit: kit.display().to_string(),
        kit_sha256: sha.clone(),
        eval_exit_code: code,
        run_id,
        diff_stat,
        at: now(),
    };
    lane.update(|card| {
        allowed(&lane.name, card.state, Step::Review)?;
        current_kit(&lane.name, card, &sha)?;
        card.review = Some(review.clone());
        card.state = State::Reviewed;
        card.event("review", format!("{} (eval exit {code}, run {})", review.result, review.run_id));
        Ok(())
    })?;
    let restored = if opts.keep { Some(tmp.keep().join("kit")) } else { None };
    Ok(ReviewReport { lane: lane.name, review, restored })
}

/// Refuses a kit that is not the lane's current one.
fn current_kit(lane: &str, card: &Card, sha: &str) -> Result<()> {
    match &card.kit {
        Some(k) if k.sha256 == sha => Ok(()),
        Some(k) => Err(Error::LaneRefused(format!(
            "this kit (sha256 {sha}) is not lane `{lane}`'s current kit `{}` (sha256 {})",
            k.path, k.sha256
        ))),
        None => Err(Error::LaneRefused(format!("lane `{lane}` has no kit on its card"))),
    }
}

/// `git diff --stat` of everything in `work` (ignored files too) against
/// `base`, through a scratch index so the restored repository is unchanged.
fn diff_stat(work: &Path, base: &str, index: &Path) -> Result<String> {
    // Adding runs the filters the repository names, wherever its `.git`
    // takes its configuration from: `converting` turns each one off.
    let mut c = crate::git::converting(work)?;
    c.env("GIT_INDEX_FILE", index).args(["add", "-A", "-f", "--", "."]);
    git_out(c, "stage the restored work/ in a scratch index")?;
    let mut c = git_clean(work);
    c.args(["cat-file", "-e"]).arg(format!("{base}^{{commit}}"));
    let (against, note) = if git_out(c, "find the base commit").is_ok() {
        (base.to_string(), "")
    } else {
        // The empty tree: everything shows as added.
        (
            "4b825dc642cb6eb9a060e54bf8d69288fbee4904".to_string(),
            " (the base commit is missing: against nothing)",
        )
    };
    let mut c = git_clean(work);
    c.env("GIT_INDEX_FILE", index).args([
        "diff",
        "--cached",
        "--stat",
        "--no-ext-diff",
        "--no-textconv",
        &against,
    ]);
    let stat = git_out(c, "show the diff stat")?;
    Ok(format!("{stat}{note}"))
}
