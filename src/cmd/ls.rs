//! `runws ls` and `runws show`: reading runs back.

use std::path::Path;
use std::time::SystemTime;

use serde::Serialize;

use crate::error::Error;
use crate::exit;
use crate::manifest::{self, Manifest, Status};
use crate::shown;
use crate::workspace::{self, Root, RunDir};

/// One line of `ls`: the manifest's summary, or why it cannot be read.
#[derive(Serialize)]
struct Row {
    run_id: String,
    job: Option<String>,
    status: String,
    started_at: Option<String>,
    finished_at: Option<String>,
    exit_code: Option<i32>,
    error: Option<String>,
}

/// The status a reader should see: a `running` run whose lease ran out
/// without renewal is `stale` (its runws is gone or stuck).
pub fn shown_status(m: &Manifest, now: SystemTime) -> String {
    if m.status == Status::Running && !m.lease_valid_at(now) {
        "stale".to_string()
    } else {
        m.status.as_str().to_string()
    }
}

fn rows(root: &Root, job: Option<&str>) -> Result<Vec<Row>, Error> {
    let runs = match root.runs_dir(false) {
        Ok(d) => d,
        Err(_) => return Ok(Vec::new()),
    };
    let now = SystemTime::now();
    let mut rows = Vec::new();
    for id in runs.entries()? {
        if workspace::check_run_id(&id).is_err() {
            continue;
        }
        let row = match runs.sub(&id).and_then(|d| manifest::read(&d)) {
            Ok(m) => {
                if job.is_some_and(|j| j != m.job) {
                    continue;
                }
                Row {
                    status: shown_status(&m, now),
                    run_id: m.run_id,
                    job: Some(m.job),
                    started_at: Some(m.started_at),
                    finished_at: m.finished_at,
                    exit_code: m.exit_code,
                    error: m.error,
                }
            }
            Err(e) => {
                if job.is_some() {
                    continue;
                }
                let status = match e {
                    Error::ManifestMissing { .. } => "incomplete",
                    _ => "unreadable",
                };
                Row {
                    run_id: id,
                    job: None,
                    status: status.into(),
                    started_at: None,
                    finished_at: None,
                    exit_code: None,
                    error: Some(e.to_string()),
                }
            }
        };
        rows.push(row);
    }
    rows.sort_by(|a, b| a.started_at.cmp(&b.started_at).then_with(|| a.run_id.cmp(&b.run_id)));
    Ok(rows)
}

pub fn ls(root: Option<&Path>, job: Option<&str>, json: bool) -> anyhow::Result<u8> {
    let root = workspace::resolve_root(root)?;
    root.must_exist()?;
    let rows = rows(&root, job)?;
    let mut out = std::io::stdout().lock();
    use std::io::Write;
    if json {
        serde_json::to_writer_pretty(&mut out, &rows)?;
        writeln!(out)?;
        return Ok(exit::OK);
    }
    writeln!(out, "{:<36}  {:<20}  {:<10}  {:<24}  EXIT", "RUN", "JOB", "STATUS", "STARTED")?;
    // Every field but the status and the exit code came from a manifest
    // the run could write: escaped, so that it cannot forge a line.
    for r in rows {
        writeln!(
            out,
            "{:<36}  {:<20}  {:<10}  {:<24}  {}",
            shown::text(&r.run_id),
            shown::text(r.job.as_deref().unwrap_or("-")),
            r.status,
            shown::text(r.started_at.as_deref().unwrap_or("-")),
            r.exit_code.map(|c| c.to_string()).unwrap_or_else(|| "-".into())
        )?;
    }
    Ok(exit::OK)
}

/// The most recently started run.
pub fn last_run(root: &Root) -> Result<String, Error> {
    rows(root, None)?
        .into_iter()
        .rfind(|r| r.started_at.is_some())
        .map(|r| r.run_id)
        .ok_or_else(|| Error::Other(format!("no runs under `{}`", root.display())))
}

pub fn show(root: Option<&Path>, run: &str, json: bool) -> anyhow::Result<u8> {
    let root = workspace::resolve_root(root)?;
    root.must_exist()?;
    let id = if run == "last" { last_run(&root)? } else { run.to_string() };
    let rd = RunDir::open(&root, &id)?;
    let m = manifest::read(&rd.dir)?;
    print_manifest(&m, rd.path(), json)?;
    Ok(exit::OK)
}

/// One run, as JSON or as a human summary.
pub fn print_manifest(m: &Manifest, dir: &Path, json: bool) -> std::io::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, m)?;
        writeln!(out)?;
        return out.flush();
    }
    // Every string of the record is the run's to write (outside a
    // sandbox): each is escaped, so none can forge a line of this summary.
    let t = shown::text;
    let now = SystemTime::now();
    writeln!(out, "run:       {}", t(&m.run_id))?;
    writeln!(out, "job:       {}", t(&m.job))?;
    writeln!(out, "dir:       {}", shown::os(dir.as_os_str()))?;
    let argv: Vec<String> = m.argv.iter().map(|a| t(a)).collect();
    writeln!(out, "command:   {}", argv.join(" "))?;
    writeln!(out, "status:    {}", shown_status(m, now))?;
    if let Some(code) = m.exit_code {
        writeln!(out, "exit:      {code}")?;
    }
    if let Some(sig) = m.signal {
        writeln!(out, "signal:    {sig}")?;
    }
    if let Some(e) = &m.error {
        writeln!(out, "error:     {}", t(e))?;
    }
    writeln!(out, "started:   {}", t(&m.started_at))?;
    if let Some(f) = &m.finished_at {
        writeln!(out, "finished:  {}", t(f))?;
    }
    for p in &m.ports {
        writeln!(out, "port:      {}={} ({})", t(&p.var), p.port, t(&p.host))?;
    }
    writeln!(out, "inputs:    {} ({})", m.inputs.len(), t(&m.input_fingerprint))?;
    for o in &m.outputs {
        writeln!(out, "output:    {} ({} bytes, sha256:{})", o.name.shown(), o.bytes, t(&o.sha256))?;
    }
    if let Some(cut) = &m.truncated {
        let lists: Vec<String> = cut.iter().map(|(k, n)| format!("{} ({n})", t(k))).collect();
        writeln!(out, "truncated: {} (the disk was full)", lists.join(", "))?;
    }
    out.flush()
}
