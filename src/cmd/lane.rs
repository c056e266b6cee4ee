//! `runws lane ...`: the promotion lane's command line. The rules live in
//! [`crate::lane`]; this file parses, calls, and reports.
//!
//! `lane run` goes through exactly the code path of `runws run`: its
//! arguments are parsed by the same definition, so every default and check
//! is the same, with the run's cwd set to the lane's `work/`.

use std::ffi::OsString;
use std::io::Write;
use std::path::Path;

use clap::{Args, FromArgMatches};

use crate::cli::{LaneCommand, RunArgs};
use crate::error::Error;
use crate::exit;
use crate::lane::card::{RunEntry, State};
use crate::lane::claim::{ClaimRequest, claim};
use crate::lane::kit;
use crate::lane::promote::{self, PromoteRequest};
use crate::lane::review::{self, ReviewOptions};
use crate::lane::{self, Lane, Step, allowed};
use crate::manifest;
use crate::seal::checkpoint::Source;
use crate::shown;
use crate::workspace::{self, RunDir};

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
                root.join("lanes").join(&card.lane).display()
            );
            println!("{}", card.lane);
            Ok(exit::OK)
        }
        LaneCommand::Run { lane, capture, timeout, pass, env_file, command } => {
            run(&root, &lane, RunOpts { capture, timeout, pass, env_file }, command)
        }
        LaneCommand::Seal { lane } => seal(&root, &lane),
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
                lane::kit_dir(&root).display()
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

fn run(root: &Path, name: &str, opts: RunOpts, command: Vec<OsString>) -> anyhow::Result<u8> {
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

    let mut args: Vec<OsString> = vec!["run".into(), "--run-id".into(), run_id.clone().into()];
    args.extend(["--job".into(), name.into(), "--cwd".into(), lane.path().join("work").into_os_string()]);
    if opts.capture {
        args.push("--capture".into());
    }
    if let Some(t) = opts.timeout {
        args.extend(["--timeout".into(), format!("{}ms", t.as_millis()).into()]);
    }
    for k in opts.pass {
        args.extend(["--pass".into(), k.into()]);
    }
    for f in opts.env_file {
        args.extend(["--env-file".into(), f.into_os_string()]);
    }
    args.push("--".into());
    args.extend(command);
    let matches = RunArgs::augment_args(clap::Command::new("run"))
        .try_get_matches_from(args)
        .map_err(|e| Error::Usage(e.to_string().lines().next().unwrap_or("invalid usage").to_string()))?;
    let run_args = RunArgs::from_arg_matches(&matches).map_err(|e| Error::Usage(e.to_string()))?;
    let result = super::run::run(run_args, Some(root), None);

    // What the run's own manifest says is authoritative; the card copies it.
    let m = RunDir::open(root, &run_id).ok().and_then(|d| manifest::read(&d.dir).ok());
    let code = match &result {
        Ok(c) => Some(*c as i32),
        Err(e) => Some(super::exit_code(e) as i32),
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
fn copy_logs(root: &Path, lane: &Lane, run_id: &str) -> crate::error::Result<()> {
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

fn seal(root: &Path, name: &str) -> anyhow::Result<u8> {
    let lane = Lane::open(root, name)?;
    let report = kit::seal(&lane)?;
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
            eprintln!(
                "runws: sealed lane {name} into {} (sha256:{}); review it with `runws lane review`",
                path.display(),
                cp.archive_sha256.as_deref().unwrap_or_default()
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

fn review_kit(root: &Path, kit_path: &Path, opts: &ReviewOptions) -> anyhow::Result<u8> {
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
