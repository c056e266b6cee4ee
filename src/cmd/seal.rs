//! `runws seal`, `scan`, `verify`, `restore`: the checkpoint's command line.

use std::io::Write;
use std::path::Path;

use crate::cli::SealArgs;
use crate::error::Error;
use crate::exit;
use crate::restore;
use crate::seal::archive::Format;
use crate::seal::checkpoint::{self, Checkpoint, SealOptions};
use crate::seal::scan;
use crate::workspace::{self, RunDir};

pub fn options(a: &SealArgs) -> SealOptions {
    SealOptions {
        to: a.to.clone(),
        format: if a.format == "gz" { Format::Gz } else { Format::Zst },
        include: a.include.clone(),
        max_bytes: a.max_bytes,
        max_files: a.max_files,
        deadline: a.deadline,
        allow_unscanned: a.allow_unscanned,
    }
}

/// Seals a run and reports it; returns the exit code the checkpoint means.
pub fn seal_run(run: &RunDir, opts: &SealOptions) -> anyhow::Result<u8> {
    let cp = checkpoint::seal(run, opts)?;
    Ok(report(&run.id, &cp))
}

fn report(run_id: &str, cp: &Checkpoint) -> u8 {
    for f in &cp.findings {
        eprintln!("runws: secret found: {f}");
    }
    for u in &cp.not_scanned {
        eprintln!("runws: {u}");
    }
    match cp.source {
        "receipt" => {
            if let (Some(a), Some(sha)) = (&cp.archive, &cp.archive_sha256) {
                eprintln!("runws: sealed run {run_id} into {} (sha256:{sha})", a.display());
            }
            exit::OK
        }
        "quarantine" => {
            eprintln!(
                "runws: seal of run {run_id} failed ({}); saved unscanned to quarantine: {}",
                cp.reason.as_deref().unwrap_or("unknown"),
                cp.archive.as_ref().map(|a| a.display().to_string()).unwrap_or_default()
            );
            exit::QUARANTINED
        }
        _ => {
            eprintln!(
                "runws: NOTHING SAVED for run {run_id}: {}; the run is held from `reap --keep`",
                cp.reason.as_deref().unwrap_or("unknown")
            );
            exit::NOTHING_SAVED
        }
    }
}

pub fn seal(root: Option<&Path>, run: &str, args: &SealArgs) -> anyhow::Result<u8> {
    let root = workspace::resolve_root(root)?;
    let id = if run == "last" { super::ls::last_run(&root)? } else { run.to_string() };
    let rd = RunDir::open(&root, &id)?;
    seal_run(&rd, &options(args))
}

pub fn scan(paths: &[std::path::PathBuf], json: bool, rules: bool) -> anyhow::Result<u8> {
    if rules {
        let mut out = std::io::stdout().lock();
        for p in scan::ripgrep_patterns() {
            writeln!(out, "{p}")?;
        }
        return Ok(exit::OK);
    }
    let report = scan::scan_paths(paths)?;
    let findings = &report.findings;
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, findings)?;
        writeln!(out)?;
    } else {
        for f in findings {
            writeln!(out, "{f}")?;
        }
    }
    out.flush()?;
    for u in &report.unscanned {
        eprintln!("runws: {u}");
    }
    Ok(if !findings.is_empty() {
        exit::SECRETS_FOUND
    } else if !report.unscanned.is_empty() {
        exit::NOT_SCANNED
    } else {
        exit::OK
    })
}

pub fn verify(archive: &Path) -> anyhow::Result<u8> {
    let sha = restore::verify(archive)?;
    println!("ok {} sha256:{sha}", archive.display());
    Ok(exit::OK)
}

pub fn restore(archive: &Path, to: &Path) -> anyhow::Result<u8> {
    let report = restore::restore(archive, to)?;
    if report.from_quarantine {
        eprintln!(
            "runws: restored {} files from a quarantine archive into {}; it was not scanned for secrets (its location says quarantine)",
            report.files,
            to.display()
        );
        return Ok(exit::OK);
    }
    let scan::Report { findings, unscanned } = scan::scan_paths(&[to.to_path_buf()])?;
    // Sealed archives went through the same scan; one sealed with
    // `--allow-unscanned` says so in its receipt. Restore warns.
    for u in &unscanned {
        eprintln!("runws: warning: {u}");
    }
    if !findings.is_empty() {
        // Refused: leave the target empty, as a refused archive always does.
        let cleanup = empty_dir(to);
        for f in &findings {
            eprintln!("runws: secret found: {f}");
        }
        if let Err(e) = cleanup {
            eprintln!("runws: cannot empty {} after the refusal: {e}", to.display());
        }
        return Err(Error::SecretsFound {
            what: format!("archive `{}`", archive.display()),
            count: findings.len(),
        }
        .into());
    }
    eprintln!(
        "runws: restored {} files ({} bytes) into {}; scan clean",
        report.files,
        report.bytes,
        to.display()
    );
    Ok(exit::OK)
}

/// Removes everything inside `dir`, never following symlinks.
fn empty_dir(dir: &Path) -> crate::error::Result<()> {
    let d = crate::fsx::Dir::open(dir)?;
    for (name, _) in d.entries_raw()? {
        d.remove_tree(&name)?;
    }
    Ok(())
}
