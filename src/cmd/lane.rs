//! `runws lane ...`: the promotion lane's command line. The rules live in
//! [`crate::lane`]; this file parses, calls, and reports.
//!
//! `lane run` is a run of the one run pipeline ([`crate::run`]), every
//! option at `runws run`'s default but the job (the lane's name) and the
//! working directory (the lane's `work/`).

use std::ffi::OsString;
use std::io::Write;
use std::path::Path;

use crate::cli::LaneCommand;
use crate::exit;
use crate::lane::card::{RunEntry, State};
use crate::lane::claim::{ClaimRequest, claim};
use crate::lane::kit;
use crate::lane::promote::{self, PromoteRequest};
use crate::lane::review::{self, ReviewOptions};
use crate::lane::{self, Lane, Step, allowed};
use crate::manifest;
use crate::run::Request;
use crate::seal::checkpoint::Source;
use crate::shown;
use crate::workspace::{self, Root, RunDir};

pub fn dispatch(root: Option<&Path>, command: LaneCommand) -> anyhow::Result<u8> {
    let root = workspace::resolve_root(root)?;
    match command {
        LaneCommand::Claim { ticket, claimant, operator, reviewer, resetter, problem, done_when } => {
            let req = ClaimRequest {
                ticket: &ticket,
                claimant: &claimant,
                operator: &operator,
                reviewer: &reviewer,
                resetter: &resetter,
                problem: &problem,
                done_when: &done_when,
            };
            let card = claim(&root, &req)?;
            eprintln!(
                "runws: claimed lane {} in {}; edit replay/prompt.md and replay/eval.sh there",
                card.lane,
                root.lane(&card.lane).display()
            );
            println!("{}", card.lane);
            Ok(exit::OK)
        }
        LaneCommand::Run { lane, capture, timeout, pass, env_file, command } => {
            run(&root, &lane, RunOpts { capture, timeout, pass, env_file }, command)
        }
        LaneCommand::Seal { lane, archive_store } => {
            seal(&root, &lane, crate::archive_store::configured(archive_store.as_deref())?.as_ref())
        }
        LaneCommand::Review { kit, timeout, keep } => {
            review_kit(&root, &kit, &ReviewOptions { timeout, keep })
        }
        LaneCommand::Stamp { lane, verdict, reviewer } => {
            let card = lane::stamp(&root, &lane, &verdict, &reviewer)?;
            println!("lane {}: {verdict} by {}; now {}", card.lane, card.reviewer, card.state.as_str());
            Ok(exit::OK)
        }
        LaneCommand::Promote { lane, repo, branch, worktree } => {
            let req =
                PromoteRequest { repo: &repo, branch: branch.as_deref(), worktree: worktree.as_deref() };
            let p = promote::promote(&root, &lane, &req)?;
            eprintln!(
                "runws: promoted lane {lane}: {} files onto branch `{}` of {}, uncommitted, in the worktree below",
                p.files, p.branch, p.repo
            );
            println!("{}", p.worktree);
            Ok(exit::OK)
        }
        LaneCommand::Reset { lane, resetter, grace } => {
            let card = promote::reset(&root, &lane, &resetter, grace)?;
            for g in card.reset.iter().flat_map(|r| r.groups.iter()) {
                eprintln!("runws: {}", shown::line(g));
            }
            println!(
                "lane {lane}: reset by {}; the kit and the final card stay in {}",
                card.resetter,
                root.kits().display()
            );
            Ok(exit::OK)
        }
        LaneCommand::Show { lane, json } => {
            let card = lane::find_card(&root, &lane)?;
            let mut out = std::io::stdout().lock();
            if json {
                out.write_all(&card.to_json())?;
            } else {
                out.write_all(card.to_markdown().as_bytes())?;
            }
            out.flush()?;
            Ok(exit::OK)
        }
    }
}

struct RunOpts {
    capture: bool,
    timeout: Option<std::time::Duration>,
    pass: Vec<String>,
    env_file: Vec<std::path::PathBuf>,
}

fn run(root: &Root, name: &str, opts: RunOpts, command: Vec<OsString>) -> anyhow::Result<u8> {
    let lane = Lane::open(root, name)?;
    let run_id = workspace::new_run_id()?;
    let argv: Vec<String> = command.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    lane.update(|card| {
        allowed(name, card.state, Step::Run)?;
        card.replay.runs.push(RunEntry {
            run_id: run_id.clone(),
            argv: argv.clone(),
            started_at: lane::now(),
            finished_at: None,
            exit_code: None,
            pgid: None,
            start_time: None,
        });
        card.state = State::Working;
        card.event("run", format!("run {run_id} started by {}", card.operator));
        Ok(())
    })?;

    let mut req = Request::new(command);
    req.root = Some(root.to_path_buf());
    req.run_id = Some(run_id.clone());
    req.job = Some(name.to_string());
    req.cwd = Some(lane.path().join("work"));
    req.capture = opts.capture;
    req.timeout = opts.timeout;
    req.pass = opts.pass;
    req.env_file = opts.env_file;
    let result = crate::run::run(req).map(|f| f.code);

    // What the run's own manifest says is authoritative; the card copies it.
    let m = RunDir::open(root, &run_id).ok().and_then(|d| manifest::read(&d.dir).ok());
    let code = match &result {
        Ok(c) => Some(*c as i32),
        Err(e) => Some(crate::error::exit_code_of(e) as i32),
    };
    let recorded = lane.update(|card| {
        if let Some(e) = card.replay.runs.iter_mut().find(|r| r.run_id == run_id) {
            e.finished_at = Some(lane::now());
            e.exit_code = m.as_ref().and_then(|m| m.exit_code).or(code);
            if let Some(c) = m.as_ref().and_then(|m| m.child.as_ref()) {
                e.pgid = Some(c.pgid);
                e.start_time = Some(c.start_time);
            }
        }
        card.event("run", format!("run {run_id} ended"));
        Ok(())
    });
    if let Err(e) = recorded {
        eprintln!("runws: warning: cannot record the end of run {run_id} on lane {name}'s card: {e}");
    }
    if opts.capture
        && let Err(e) = copy_logs(root, &lane, &run_id)
    {
        eprintln!("runws: warning: cannot copy the logs of run {run_id} into lane {name}: {e}");
    }
    result
}

/// The run's captured output, into the lane's logs/ so it travels in the kit.
fn copy_logs(root: &Root, lane: &Lane, run_id: &str) -> crate::error::Result<()> {
    let run = RunDir::open(root, run_id)?;
    let from = run.sub("logs")?;
    let to = lane.dir.sub("logs")?;
    for stream in ["stdout", "stderr"] {
        let Some(mut f) = from.open_read(format!("{stream}.log"))? else { continue };
        to.write_atomic_with(&format!("{run_id}.{stream}.log"), 0o644, true, |out| {
            std::io::copy(&mut f, out).map(|_| ())
        })?;
    }
    Ok(())
}

fn seal(root: &Root, name: &str, store: Option<&crate::archive_store::Place>) -> anyhow::Result<u8> {
    let lane = Lane::open(root, name)?;
    let report = kit::seal(&lane, store)?;
    if let Some(checker) = &report.card.checker {
        for r in &checker.removed {
            eprintln!("runws: removed {} from lane {name}", shown::line(r));
        }
        for w in &checker.warnings {
            eprintln!("runws: warning: {}", shown::line(w));
        }
    }
    for f in &report.checkpoint.findings {
        eprintln!("runws: secret found: {}", shown::line(f));
    }
    let cp = &report.checkpoint;
    match (&cp.source, &cp.archive) {
        (Source::Receipt, Some(path)) => {
            let stored = report.card.kit.as_ref().and_then(|k| k.stored.as_deref());
            eprintln!(
                "runws: sealed lane {name} into {} (sha256:{}){}; review it with `runws lane review`",
                path.display(),
                cp.archive_sha256.as_deref().unwrap_or_default(),
                stored.map(|u| format!(", stored as {}", shown::line(u))).unwrap_or_default()
            );
            println!("{}", path.display());
            Ok(exit::OK)
        }
        (Source::Quarantine, Some(path)) => {
            eprintln!(
                "runws: seal of lane {name} failed ({}); saved unscanned to quarantine: {}; this kit is never reviewed",
                cp.reason.as_deref().unwrap_or("unknown"),
                path.display()
            );
            Ok(exit::QUARANTINED)
        }
        _ => {
            eprintln!("runws: NOTHING SAVED for lane {name}: {}", cp.reason.as_deref().unwrap_or("unknown"));
            Ok(exit::NOTHING_SAVED)
        }
    }
}

fn review_kit(root: &Root, kit_path: &Path, opts: &ReviewOptions) -> anyhow::Result<u8> {
    let report = review::review(root, kit_path, opts)?;
    let r = &report.review;
    let mut out = std::io::stdout().lock();
    writeln!(out, "lane {}: diff stat of work/ against the base commit:", report.lane)?;
    writeln!(out, "{}", if r.diff_stat.is_empty() { "(no changes)" } else { &r.diff_stat })?;
    writeln!(
        out,
        "review {}: replay/eval.sh exited {} in run {} (kit sha256:{})",
        r.result, r.eval_exit_code, r.run_id, r.kit_sha256
    )?;
    if let Some(p) = &report.restored {
        writeln!(out, "restored copy kept in {}", p.display())?;
    }
    out.flush()?;
    Ok(if r.result == "pass" { exit::OK } else { exit::REVIEW_FAILED })
}
