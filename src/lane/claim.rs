//! `lane claim`: a new lane, complete or not at all.
//!
//! The lane is built in a hidden staging directory beside its final place
//! (templates, a git repository with its base commit, the card) and renamed
//! into place without replacing anything, so a crash or a concurrent claim
//! of the same lane never leaves a half-made lane under the real name.

use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{RenameFlags, renameat2};

use super::card::{self, Card, Replay, State};
use super::{CARD_JSON, CARD_MD, check_person, check_text, check_ticket, git_clean, git_out, initials, now};
use crate::error::{Error, IoContext, Result};
use crate::fsx::Dir;
use crate::workspace::Root;

/// What `lane claim` was given.
#[derive(Debug, Clone)]
pub struct ClaimRequest<'a> {
    pub ticket: &'a str,
    pub claimant: &'a str,
    pub operator: &'a str,
    pub reviewer: &'a str,
    pub resetter: &'a str,
    pub problem: &'a str,
    pub done_when: &'a str,
}

/// Claims a lane; returns its card.
pub fn claim(root: &Root, req: &ClaimRequest<'_>) -> Result<Card> {
    check_ticket(req.ticket)?;
    let claimant = check_person("claimant", req.claimant)?;
    let operator = check_person("operator", req.operator)?;
    let reviewer = check_person("reviewer", req.reviewer)?;
    let resetter = check_person("resetter", req.resetter)?;
    let problem = check_text("problem", req.problem)?;
    let done_when = check_text("done-when", req.done_when)?;
    let name = format!("lane-{}-{}", req.ticket, initials(&[&claimant, &operator, &reviewer, &resetter]));

    let lanes_path = root.lanes();
    crate::fsx::create_private_dirs(&lanes_path).ctx("cannot create", &lanes_path)?;
    let lanes = Dir::open(&lanes_path)?;
    if lanes.lstat(&name)?.is_some() {
        return Err(Error::LaneRefused(format!(
            "lane `{name}` exists already; see `runws lane show {name}`"
        )));
    }
    let kept = root.kits().join(format!("{name}.card.json"));
    if kept.exists() {
        return Err(Error::LaneRefused(format!(
            "lane `{name}` was claimed and reset before; its kit and card are kept in `{}`",
            root.kits().display()
        )));
    }

    let staging = tempfile::Builder::new()
        .prefix(&format!(".{name}.claim-"))
        .tempdir_in(&lanes_path)
        .ctx("cannot create a staging directory in", &lanes_path)?;
    // A lane directory is as readable as a run directory; tempfile made it private.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(staging.path(), std::fs::Permissions::from_mode(0o755))
        .ctx("cannot set permissions of", staging.path())?;
    let dir = Dir::open(staging.path())?;
    for sub in ["replay", "work", "logs"] {
        dir.mkdir(sub, 0o755).ctx("cannot create", dir.join(sub))?;
    }
    let mut ticket_text = format!("{}\n", req.ticket);
    if !problem.is_empty() {
        ticket_text.push('\n');
        ticket_text.push_str(&problem);
        ticket_text.push('\n');
    }
    dir.write_atomic("TICKET", ticket_text.as_bytes(), 0o644, false)?;
    let prompt = prompt_template(req.ticket, &problem, &done_when);
    let eval = eval_template(req.ticket, &done_when);
    let replay = dir.sub("replay")?;
    replay.write_atomic("prompt.md", prompt.as_bytes(), 0o644, false)?;
    replay.write_atomic("eval.sh", eval.as_bytes(), 0o755, false)?;
    // write_atomic's mode passes through the umask; eval.sh must be executable.
    std::fs::set_permissions(replay.join("eval.sh"), std::fs::Permissions::from_mode(0o755))
        .ctx("cannot set permissions of", replay.join("eval.sh"))?;

    let base_commit = init_repo(&dir.join("work"), &name, &operator)?;
    let mut card = Card {
        schema: card::SCHEMA,
        lane: name.clone(),
        ticket: req.ticket.to_string(),
        claimant,
        operator,
        reviewer,
        resetter,
        claimed_at: now(),
        problem,
        done_when,
        state: State::Claimed,
        base_commit,
        template_sha256: vec![super::sha256_hex(prompt.as_bytes()), super::sha256_hex(eval.as_bytes())],
        replay: Replay { prompt: "replay/prompt.md".into(), runs: Vec::new() },
        eval: "replay/eval.sh, run from work/".into(),
        checker: None,
        kit: None,
        review: None,
        stamp: None,
        promotion: None,
        reset: None,
        history: Vec::new(),
        extra: Default::default(),
    };
    card.event("claim", format!("claimed by {}", card.claimant));
    super::write_card(&dir, CARD_JSON, CARD_MD, &card)?;
    dir.sync()?;
    drop(dir);

    let staged = staging.path().file_name().unwrap_or_default().to_owned();
    match renameat2(
        lanes.borrow(),
        staged.as_os_str(),
        lanes.borrow(),
        name.as_str(),
        RenameFlags::RENAME_NOREPLACE,
    ) {
        Ok(()) => {
            let _ = staging.keep();
        }
        Err(Errno::EEXIST | Errno::ENOTEMPTY) => {
            return Err(Error::LaneRefused(format!("lane `{name}` was claimed by someone else meanwhile")));
        }
        Err(e) => return Err(Error::io("cannot rename into", lanes.join(&name), e.into())),
    }
    lanes.sync()?;
    Ok(card)
}

/// `git init` with an empty base commit and a repository-local identity
/// for the operator; returns the base commit.
fn init_repo(work: &Path, lane: &str, operator: &str) -> Result<String> {
    let email = format!("{lane}@runws.invalid");
    let mut c = git_clean(work);
    c.args(["-c", "init.defaultBranch=main", "init", "-q"]);
    git_out(c, "create the lane's repository")?;
    for (k, v) in [("user.name", operator), ("user.email", email.as_str())] {
        let mut c = git_clean(work);
        c.args(["config", k, v]);
        git_out(c, "set the lane repository's identity")?;
    }
    let mut c = git_clean(work);
    c.args(["commit", "-q", "--allow-empty", "-m"]).arg(format!("{lane}: base (empty)"));
    git_out(c, "make the base commit")?;
    let mut c = git_clean(work);
    c.args(["rev-parse", "HEAD"]);
    git_out(c, "read the base commit")
}

/// Free text as shell comment lines.
fn comment(text: &str) -> String {
    if text.is_empty() {
        return "#   (not given at claim)\n".into();
    }
    text.lines().map(|l| format!("#   {l}\n")).collect()
}

fn prompt_template(ticket: &str, problem: &str, done_when: &str) -> String {
    let or_none = |s: &str| if s.is_empty() { "(not given at claim)".to_string() } else { s.to_string() };
    format!(
        "# {ticket}: replay prompt\n\n\
         <!-- EDIT ME: the instructions that, given to an operator again, redo this\n\
         work from an empty work/ directory. A reviewer reads this first. -->\n\n\
         ## Problem\n\n{}\n\n## Done when\n\n{}\n",
        or_none(problem),
        or_none(done_when)
    )
}

fn eval_template(ticket: &str, done_when: &str) -> String {
    format!(
        "#!/bin/sh\n\
         # replay/eval.sh for {ticket}. EDIT ME.\n\
         #\n\
         # `runws lane review` runs this from the restored work/ directory, inside\n\
         # a clean `runws run` (an environment built from empty, its own HOME).\n\
         # Exit 0 means the work is done; any other status fails the review.\n\
         # Replace the lines below with the checks that prove it is done when:\n\
         {}\
         set -eu\n\
         echo 'replay/eval.sh is the unedited template: it only shows the state of work/' >&2\n\
         git status --short\n\
         exit 0\n",
        comment(done_when)
    )
}
