//! The checkpoint of a finished run: seal it, or quarantine it, or say
//! loudly that nothing was saved.
//!
//! A seal packs the run's evidence once, showing every byte to the secret
//! scanner in the same read. The archive is written under a staging name
//! and only takes its real name when the pack succeeded and the scan found
//! nothing, so an archive holding a secret never appears in the ordinary
//! location. When the seal fails (a finding, an I/O error, a budget, the
//! deadline) the work is not thrown away: the same evidence is packed
//! without the scan (the never-packed names are still left out) under
//! `quarantine/`, in what is left of the deadline. The manifest records the
//! checkpoint with the precedence receipt, then quarantine, then nothing;
//! a run with nothing saved is held from `reap --keep`.
//!
//! The same stage, scan, publish or quarantine sequence seals a promotion
//! lane's kit ([`seal_tree`]): one code path, so a kit is held to exactly
//! the rules a run's evidence is.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;

use super::archive::{self, Format, Inspector, NoInspection, PackOptions, PackReport};
use super::scan::{Allowance, DeepScan, Finding, LIMITS, Scanner, Unscanned};
pub use super::target::{Subject, Target};
use crate::archive_store::Place;
use crate::error::{Error, IoContext, Result};
use crate::fsx::{self, Dir};
use crate::manifest::{self, Status};
use crate::workspace::{QUARANTINE, RunDir};

/// What the user asked the seal to do.
#[derive(Debug, Clone)]
pub struct SealOptions {
    /// Where archives go (default: the archive store's `<job>`, else
    /// `ROOT/archive/<job>`).
    pub to: Option<Place>,
    /// The archive store (`--archive-store`, `RUNWS_ARCHIVE_STORE`): a run
    /// of job J seals to its `J`.
    pub store: Option<Place>,
    pub format: Format,
    /// Scratch directories to pack as well (`home`, `cache`).
    pub include: Vec<String>,
    pub max_bytes: u64,
    pub max_files: u64,
    pub deadline: Duration,
    /// Seal even when a compressed file or archive member could not be
    /// scanned; without it, that sends the run to quarantine.
    pub allow_unscanned: bool,
}

impl Default for SealOptions {
    fn default() -> SealOptions {
        SealOptions {
            to: None,
            store: None,
            format: super::DEFAULT_FORMAT,
            include: Vec::new(),
            max_bytes: super::DEFAULT_MAX_BYTES,
            max_files: super::DEFAULT_MAX_FILES,
            deadline: super::DEFAULT_DEADLINE,
            allow_unscanned: false,
        }
    }
}

/// How the checkpoint ended: also the manifest's `checkpoint` record.
pub use crate::manifest::{Checkpoint, Source};

/// The scanner as the pack's inspector: one streaming scan per file, which
/// also looks inside compressed files and archives.
struct ScanInspector<'s> {
    scanner: &'s Scanner,
    allowance: &'s Allowance,
    current: Option<DeepScan<'s>>,
    findings: Vec<Finding>,
    unscanned: Vec<Unscanned>,
}

impl Inspector for ScanInspector<'_> {
    fn begin_file(&mut self, rel: &str) {
        self.current = Some(DeepScan::new(self.scanner, &LIMITS, self.allowance, rel));
    }
    fn chunk(&mut self, data: &[u8]) {
        if let Some(f) = self.current.as_mut() {
            f.feed(data);
        }
    }
    fn end_file(&mut self) {
        if let Some(f) = self.current.take() {
            let (found, unscanned) = f.finish();
            self.findings.extend(found);
            self.unscanned.extend(unscanned);
        }
    }
}

#[derive(Serialize)]
struct Receipt<'a> {
    schema: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    run_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    job: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lane: Option<&'a str>,
    source: &'a str,
    archive: String,
    archive_sha256: &'a str,
    archive_bytes: u64,
    format: &'static str,
    files: u64,
    bytes: u64,
    scan: ScanResult<'a>,
    excluded: &'a [String],
    reason: Option<&'a str>,
    sealed_at: String,
}

#[derive(Serialize)]
struct ScanResult<'a> {
    /// `clean`; `partial` when sealed with `--allow-unscanned` and something
    /// could not be scanned; `skipped` for a quarantine.
    result: &'static str,
    rules: usize,
    findings: Vec<String>,
    /// Compressed files and archive members not scanned, and why.
    not_scanned: &'a [Unscanned],
}

fn format_name(f: Format) -> &'static str {
    match f {
        Format::Zst => "zst",
        Format::Gz => "gz",
    }
}

/// The evidence a seal packs, then the scratch directories asked for.
fn include_list(extra: &[String]) -> Result<Vec<String>> {
    let mut names: Vec<String> =
        ["manifest.json", "inputs", "outputs", "work", "logs"].iter().map(|s| s.to_string()).collect();
    for e in extra {
        match e.as_str() {
            "home" | "cache" => {
                if !names.contains(e) {
                    names.push(e.clone());
                }
            }
            other => return Err(Error::Usage(format!("--include takes home or cache, not `{other}`"))),
        }
    }
    Ok(names)
}

/// Seals `run`: an archive in the ordinary location when the pack succeeds
/// and the scan is clean; otherwise a quarantine archive; otherwise nothing.
/// The manifest records which.
pub fn seal(run: &RunDir, opts: &SealOptions) -> Result<Checkpoint> {
    let started = Instant::now();
    let deadline = started + opts.deadline;
    // A final record still in its temp file is moved into place first, so
    // the archive holds it as manifest.json.
    let m = manifest::settle(&run.dir, std::time::Duration::from_secs(2))?;
    if m.status == Status::Running {
        return Err(Error::Usage(format!(
            "run `{}` is still running; seal it after it ends (or use `runws run --seal`)",
            run.id
        )));
    }
    let dest = match (&opts.to, &opts.store) {
        (Some(to), _) => to.clone(),
        (None, Some(store)) => store.for_job(&m.job)?,
        (None, None) => Place::Local(run.root.job_archive(&m.job)),
    };
    let scratch = run.root.uploads();
    let pack_opts = PackOptions {
        format: opts.format,
        max_bytes: opts.max_bytes,
        max_files: opts.max_files,
        deadline: Some(deadline),
        include: include_list(&opts.include)?,
        durable: true,
    };
    let target = Target {
        src: run.path(),
        dest: &dest,
        scratch: &scratch,
        stem: &run.id,
        subject: Subject::Run { run_id: &run.id, job: &m.job },
    };
    let cp = seal_tree(&target, &pack_opts, Vec::new(), opts.allow_unscanned)?;
    record(run, cp)
}

/// Seals `target.src` into `<dest>/<stem>.<ext>` when the pack succeeds
/// and neither the scan of every packed byte nor `prior` (findings the
/// caller made before packing) found anything, and the scan could look
/// inside every compressed file and archive (unless `allow_unscanned`);
/// otherwise into `<dest>/quarantine/`, unscanned; otherwise nothing,
/// said in the returned checkpoint. An error means nothing was attempted:
/// the archive name is taken or the directory cannot be made.
pub fn seal_tree(
    target: &Target<'_>,
    pack_opts: &PackOptions,
    prior: Vec<Finding>,
    allow_unscanned: bool,
) -> Result<Checkpoint> {
    match target.dest {
        Place::Local(dir) => seal_local(target, dir, pack_opts, prior, allow_unscanned),
        Place::S3(place) => super::remote::seal(target, place, pack_opts, prior, allow_unscanned, seal_local),
    }
}

/// [`seal_tree`] into the directory `dir`.
fn seal_local(
    target: &Target<'_>,
    dir: &Path,
    pack_opts: &PackOptions,
    prior: Vec<Finding>,
    allow_unscanned: bool,
) -> Result<Checkpoint> {
    crate::fsx::create_private_dirs(dir).ctx("cannot create", dir)?;
    let ext = pack_opts.format.extension();
    let name = format!("{}.{ext}", target.stem);
    let final_path = dir.join(&name);
    if final_path.exists() {
        return Err(Error::Usage(format!(
            "`{}` already exists: {}",
            final_path.display(),
            target.sealed_already()
        )));
    }

    // The seal proper: staged, scanned, renamed into place only when clean.
    let scanner = Scanner::new();
    let staging = dir.join(format!(".{name}.sealing"));
    let _ = std::fs::remove_file(&staging);
    let allowance = Allowance::new(&LIMITS);
    let mut inspector = ScanInspector {
        scanner: &scanner,
        allowance: &allowance,
        current: None,
        findings: prior,
        unscanned: Vec::new(),
    };
    let failure = if inspector.findings.is_empty() {
        match archive::pack(target.src, &staging, pack_opts, &mut inspector) {
            Ok(report)
                if inspector.findings.is_empty() && (allow_unscanned || inspector.unscanned.is_empty()) =>
            {
                let unscanned = &inspector.unscanned;
                match publish(dir, &staging, &final_path, &report, target, unscanned, pack_opts) {
                    Ok(cp) => return Ok(cp),
                    Err(e) => e.to_string(),
                }
            }
            Ok(_) if inspector.findings.is_empty() => {
                let _ = std::fs::remove_file(&staging);
                format!(
                    "the secret scan could not look inside {} compressed file(s) or archive member(s) \
                     (seal with --allow-unscanned to accept that)",
                    inspector.unscanned.len()
                )
            }
            Ok(_) => {
                let _ = std::fs::remove_file(&staging);
                format!("the secret scan found {} secret(s)", inspector.findings.len())
            }
            Err(e) => e.to_string(),
        }
    } else {
        // Known before packing: no need to pack twice.
        format!("the secret scan found {} secret(s)", inspector.findings.len())
    };
    let findings: Vec<String> = inspector.findings.iter().map(|f| f.to_string()).collect();
    let not_scanned: Vec<String> = inspector.unscanned.iter().map(|u| u.to_string()).collect();

    // The quarantine: the same evidence, unscanned, in what time is left.
    let qdir = dir.join(QUARANTINE);
    let quarantined = (|| -> Result<Checkpoint> {
        crate::fsx::create_private_dirs(&qdir).ctx("cannot create", &qdir)?;
        if pack_opts.deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(Error::Other(
                "no time left before the deadline; raise `--deadline` to allow more time".into(),
            ));
        }
        // An earlier quarantine is kept: a new one gets a new name.
        let mut qpath = qdir.join(&name);
        let mut n = 1;
        while qpath.exists() {
            qpath = qdir.join(format!("{}.{n}.{ext}", target.stem));
            n += 1;
        }
        let report = archive::pack(target.src, &qpath, pack_opts, &mut NoInspection)?;
        let receipt = receipt_path(&qpath);
        let scan = ScanResult {
            result: "skipped",
            rules: 0,
            findings: findings.clone(),
            not_scanned: &inspector.unscanned,
        };
        write_receipt(&receipt, &report, target, &Source::Quarantine, Some(&failure), scan, pack_opts)?;
        archive::write_sha256_file(&qpath, &report.archive_sha256)?;
        Ok(Checkpoint {
            source: Source::Quarantine,
            archive: Some(qpath.clone()),
            archive_sha256: Some(report.archive_sha256),
            receipt: Some(receipt),
            reason: Some(failure.clone()),
            findings: findings.clone(),
            not_scanned: not_scanned.clone(),
            at: manifest::format_time(SystemTime::now()),
            extra: Default::default(),
        })
    })();
    Ok(quarantined.unwrap_or_else(|qe| Checkpoint {
        source: Source::None,
        archive: None,
        archive_sha256: None,
        receipt: None,
        reason: Some(format!("{failure}; the quarantine failed too: {qe}")),
        findings,
        not_scanned,
        at: manifest::format_time(SystemTime::now()),
        extra: Default::default(),
    }))
}

fn scanner_rules() -> usize {
    Scanner::rules().len()
}

fn receipt_path(archive: &Path) -> PathBuf {
    let name = archive.file_name().and_then(|n| n.to_str()).unwrap_or("archive");
    let stem = crate::archive_store::stem(name).unwrap_or(name);
    archive.with_file_name(format!("{stem}.receipt.json"))
}

#[allow(clippy::too_many_arguments)]
fn write_receipt(
    path: &Path,
    report: &PackReport,
    target: &Target<'_>,
    source: &Source,
    reason: Option<&str>,
    scan: ScanResult<'_>,
    opts: &PackOptions,
) -> Result<()> {
    let (run_id, job, lane) = match target.subject {
        Subject::Run { run_id, job } => (Some(run_id), Some(job), None),
        Subject::Lane { lane } => (None, None, Some(lane)),
    };
    let receipt = Receipt {
        schema: 1,
        run_id,
        job,
        lane,
        source: source.as_str(),
        archive: report
            .archive_path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        archive_sha256: &report.archive_sha256,
        archive_bytes: report.archive_bytes,
        format: format_name(opts.format),
        files: report.files,
        bytes: report.bytes,
        scan,
        excluded: &report.excluded,
        reason,
        sealed_at: manifest::format_time(SystemTime::now()),
    };
    let mut bytes = serde_json::to_vec_pretty(&receipt).map_err(|e| Error::Other(e.to_string()))?;
    bytes.push(b'\n');
    let (dir, name) = (
        path.parent().unwrap_or(Path::new(".")),
        path.file_name().and_then(|n| n.to_str()).unwrap_or("receipt.json"),
    );
    Dir::open(dir)?.write_atomic(name, &bytes, 0o644, opts.durable)
}

/// Moves a clean staged archive to its real name, with its checksum file
/// and receipt beside it.
#[allow(clippy::too_many_arguments)]
fn publish(
    dir: &Path,
    staging: &Path,
    final_path: &Path,
    report: &PackReport,
    target: &Target<'_>,
    unscanned: &[Unscanned],
    opts: &PackOptions,
) -> Result<Checkpoint> {
    let d = Dir::open(dir)?;
    let staged = staging.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let name = final_path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    fsx::check_name(name)?;
    d.rename(staged, name)?;
    if opts.durable {
        d.sync()?;
    }
    let mut report = report.clone();
    report.archive_path = final_path.to_path_buf();
    let receipt = receipt_path(final_path);
    let scan = ScanResult {
        result: if unscanned.is_empty() { "clean" } else { "partial" },
        rules: scanner_rules(),
        findings: Vec::new(),
        not_scanned: unscanned,
    };
    let written = write_receipt(&receipt, &report, target, &Source::Receipt, None, scan, opts)
        .and_then(|()| archive::write_sha256_file(final_path, &report.archive_sha256));
    if let Err(e) = written {
        // A seal is never reported on a partial result.
        let _ = d.unlink(name);
        let _ = std::fs::remove_file(&receipt);
        return Err(e);
    }
    Ok(Checkpoint {
        source: Source::Receipt,
        archive: Some(final_path.to_path_buf()),
        archive_sha256: Some(report.archive_sha256.clone()),
        receipt: Some(receipt),
        reason: None,
        findings: Vec::new(),
        not_scanned: unscanned.iter().map(|u| u.to_string()).collect(),
        at: manifest::format_time(SystemTime::now()),
        extra: Default::default(),
    })
}

/// Records the checkpoint in the manifest; a run with nothing saved is held.
fn record(run: &RunDir, cp: Checkpoint) -> Result<Checkpoint> {
    // A path JSON cannot hold fails here, before the manifest is touched.
    serde_json::to_value(&cp).map_err(|e| Error::Other(e.to_string()))?;
    manifest::update(&run.dir, true, |m| {
        // Precedence: a receipt is never replaced by a quarantine or nothing.
        let current = m.checkpoint.as_ref().map_or(0, |c| c.source.rank());
        if current <= cp.source.rank() {
            m.checkpoint = Some(cp.clone());
        }
        m.held = Some(cp.source == Source::None && current == 0);
        Ok(())
    })?;
    Ok(cp)
}
