//! `runws seal`, `scan`, `verify`, `restore`: the checkpoint's command line.

use std::io::Write;
use std::path::Path;

use crate::cli::SealArgs;
use crate::error::Error;
use crate::exit;
use crate::restore;
use crate::seal::archive::Format;
use crate::seal::checkpoint::{self, Checkpoint, SealOptions, Source};
use crate::seal::scan;
use crate::workspace::{self, RunDir};

pub fn options(a: &SealArgs) -> crate::error::Result<SealOptions> {
    let to = a.to.as_deref().map(crate::archive_store::Place::parse).transpose()?;
    Ok(SealOptions {
        to,
        store: crate::archive_store::configured(a.archive_store.as_deref())?,
        format: Format::named(&a.format).unwrap_or(crate::seal::DEFAULT_FORMAT),
        include: a.include.clone(),
        max_bytes: a.max_bytes,
        max_files: a.max_files,
        deadline: a.deadline,
        allow_unscanned: a.allow_unscanned,
    })
}

/// Seals a run and reports it; returns the exit code the checkpoint means.
/// With a PostgreSQL store the fleet view learns where the archive went.
pub fn seal_run(run: &RunDir, opts: &SealOptions, store: Option<&str>) -> anyhow::Result<u8> {
    let cp = checkpoint::seal(run, opts)?;
    if let Some(archive) = &cp.archive {
        crate::fleet::note_archive(store, run, archive);
    }
    Ok(report(&run.id, &cp))
}

fn report(run_id: &str, cp: &Checkpoint) -> u8 {
    for f in &cp.findings {
        eprintln!("runws: secret found: {}", crate::shown::line(&f.to_string()));
    }
    for u in &cp.not_scanned {
        eprintln!("runws: {u}");
    }
    match cp.source {
        Source::Receipt => {
            if let (Some(a), Some(sha)) = (&cp.archive, &cp.archive_sha256) {
                eprintln!("runws: sealed run {run_id} into {} (sha256:{sha})", crate::shown::path(a));
            }
            exit::OK
        }
        Source::Quarantine => {
            eprintln!(
                "runws: seal of run {run_id} failed ({}); saved unscanned to quarantine: {}",
                cp.reason.as_deref().unwrap_or("unknown"),
                cp.archive.as_ref().map(|a| crate::shown::path(a)).unwrap_or_default()
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

pub fn seal(
    root: Option<&Path>,
    store: Option<&str>,
    run: &str,
    args: &SealArgs,
    json: bool,
) -> anyhow::Result<u8> {
    let root = workspace::resolve_root(root)?;
    let id = if run == "last" { super::ls::last_run(&root, None)? } else { run.to_string() };
    let rd = RunDir::open(&root, &id)?;
    if !json {
        return seal_run(&rd, &options(args)?, store);
    }
    let cp = checkpoint::seal(&rd, &options(args)?)?;
    if let Some(archive) = &cp.archive {
        crate::fleet::note_archive(store, &rd, archive);
    }
    let code = report(&rd.id, &cp);
    let mut object = serde_json::Map::new();
    object.insert("run_id".into(), rd.id.clone().into());
    // The checkpoint as the manifest records it: source (`receipt`,
    // `quarantine`, `none`), archive, archive_sha256, receipt, reason,
    // findings, not_scanned, at.
    if let serde_json::Value::Object(fields) = serde_json::to_value(&cp)? {
        object.extend(fields);
    }
    super::print_json(serde_json::Value::Object(object))?;
    Ok(code)
}

/// `e` with a path under `local` (the downloaded archive, its checksum
/// file) named from `url` instead.
fn shown_as(e: Error, local: &Path, url: &Path) -> Error {
    let swap = |p: std::path::PathBuf| match p.strip_prefix(local) {
        Ok(rest) if rest.as_os_str().is_empty() => url.to_path_buf(),
        _ => match p.to_str().zip(local.to_str()).and_then(|(p, l)| p.strip_prefix(l)) {
            // `<archive>.sha256`
            Some(suffix) => std::path::PathBuf::from(format!("{}{suffix}", url.display())),
            None => p,
        },
    };
    match e {
        Error::Io { op, path, source } => Error::Io { op, path: swap(path), source },
        Error::Integrity { path, expected, found } => Error::Integrity { path: swap(path), expected, found },
        Error::ChecksumFile { path, why } => Error::ChecksumFile { path: swap(path), why },
        Error::ArchiveFormat { path } => Error::ArchiveFormat { path: swap(path) },
        Error::SpecialFile { path } => Error::SpecialFile { path: swap(path) },
        Error::Symlink { path } => Error::Symlink { path: swap(path) },
        other => other,
    }
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

pub fn verify(archive: &Path, json: bool) -> anyhow::Result<u8> {
    let sha = match crate::archive_store::remote(archive) {
        Some(url) => restore::fetch::verify(url)?,
        None => restore::verify(archive)?,
    };
    if json {
        super::print_json(serde_json::json!({
            "archive": archive.to_string_lossy(),
            "sha256": sha,
            "ok": true,
        }))?;
    } else {
        println!("ok {} sha256:{sha}", crate::shown::path(archive));
    }
    Ok(exit::OK)
}

/// Restores `archive` into `to`. Nothing appears under `to` before the
/// whole archive is extracted and scanned; then an archive from an ordinary
/// location that holds a secret is refused and `to` stays as it was, and
/// one from quarantine is placed with its findings listed.
pub fn restore(
    root: Option<&Path>,
    archive: &Path,
    to: &Path,
    limits: restore::Limits,
    json: bool,
) -> anyhow::Result<u8> {
    let root = crate::workspace::resolve_root(root)?;
    // From a bucket: downloaded and verified first, then restored as a
    // local archive (see `restore::fetch`).
    let fetched = match crate::archive_store::remote(archive) {
        Some(url) => Some(restore::fetch::fetch(
            url,
            &root.uploads(),
            crate::archive_store::compressed_most(limits.max_bytes),
        )?),
        None => None,
    };
    let local = fetched.as_ref().map_or(archive, |f| f.archive.as_path());
    let staged = restore::stage(local, to, Some(&root), limits).map_err(|e| match &fetched {
        // The downloaded copy is gone by now: the error names the URL.
        Some(f) => shown_as(e, &f.archive, archive),
        None => e,
    })?;
    let findings = staged.report().findings.clone();
    let unscanned = staged.report().unscanned.clone();
    let print = |report: &restore::RestoreReport| -> std::io::Result<()> {
        if !json {
            return Ok(());
        }
        super::print_json(serde_json::json!({
            "archive": archive.to_string_lossy(),
            "to": to.to_string_lossy(),
            "files": report.files,
            "bytes": report.bytes,
            "from_quarantine": report.from_quarantine,
            "findings": findings,
            "unscanned": unscanned,
        }))
    };
    for f in &findings {
        eprintln!("runws: secret found: {}", crate::shown::line(&f.to_string()));
    }
    // What the scan could not open (an archive sealed with
    // `--allow-unscanned` says so in its receipt): warned, not refused.
    for u in &staged.report().unscanned {
        eprintln!("runws: warning: {u}");
    }
    if !staged.report().from_quarantine {
        if !findings.is_empty() {
            // Dropping the staged restore removes it; `to` was never touched.
            drop(staged);
            return Err(Error::SecretsFound {
                what: format!("archive `{}`", crate::shown::path(archive)),
                count: findings.len(),
            }
            .into());
        }
        let report = staged.place()?;
        print(&report)?;
        eprintln!(
            "runws: restored {} files ({} bytes) into {}; scan clean",
            report.files,
            report.bytes,
            crate::shown::path(to)
        );
        return Ok(exit::OK);
    }
    let report = staged.place()?;
    print(&report)?;
    let scan = match findings.len() {
        0 => "the scan found nothing".to_string(),
        n => format!(
            "the scan found {n} secret(s), listed above; restored anyway, as quarantine is where they are kept"
        ),
    };
    eprintln!(
        "runws: restored {} files ({} bytes) from a quarantine archive into {}; {scan}",
        report.files,
        report.bytes,
        crate::shown::path(to)
    );
    Ok(exit::OK)
}
