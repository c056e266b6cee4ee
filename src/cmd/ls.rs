//! `runws ls`, `runws show` and `runws cat`: reading runs back.

use std::ffi::OsStr;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::error::Error;
use crate::exit;
use crate::fsx::Dir;
use crate::manifest::{self, Manifest, Source, Status};
use crate::runindex;
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
    /// How the run's seal ended: `sealed`, `quarantined`, `not saved`, or
    /// absent when it was never sealed.
    seal: Option<String>,
    /// Its limits and what it used (see `run --memory`), when recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    resources: Option<manifest::ResourcesRecord>,
}

/// The seal state of a run, as `ls` and `show` name it (`None`: never
/// sealed). A source a newer runws records is shown as it is written.
fn seal_state(m: &Manifest) -> Option<String> {
    m.checkpoint.as_ref().map(|c| match &c.source {
        Source::Receipt => "sealed".to_string(),
        Source::Quarantine => "quarantined".to_string(),
        Source::None => "not saved".to_string(),
        Source::Other(other) => other.clone(),
    })
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

/// What `ls` lists: which runs, how many, in what order.
#[derive(Default)]
pub struct Filter<'a> {
    /// Only runs of this job.
    pub job: Option<&'a str>,
    /// Only runs started this long ago or since.
    pub since: Option<Duration>,
    /// At most this many runs: the newest.
    pub limit: Option<usize>,
    /// Newest first instead of oldest first.
    pub newest_first: bool,
}

/// The row of run `id` when the filter keeps it; `None` when its directory
/// is gone or the filter drops it. Only this run's manifest is read.
fn row(
    runs: &Dir,
    e: &runindex::Entry,
    f: &Filter,
    now: SystemTime,
    cutoff: Option<SystemTime>,
) -> Option<Row> {
    // The index's job and start only choose what to read; the manifest
    // decides.
    if let (Some(want), Some(have)) = (f.job, e.job.as_deref())
        && want != have
    {
        return None;
    }
    if let (Some(cutoff), Some(ms)) = (cutoff, e.started_ms)
        && (UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))) < cutoff
    {
        return None;
    }
    runs.lstat(&e.id).ok()??;
    Some(match runs.sub(&e.id).and_then(|d| manifest::read(&d)) {
        Ok(m) => {
            if f.job.is_some_and(|j| j != m.job) {
                return None;
            }
            if let Some(cutoff) = cutoff
                && manifest::parse_time(&m.started_at).is_none_or(|t| t < cutoff)
            {
                return None;
            }
            Row {
                status: shown_status(&m, now),
                seal: seal_state(&m),
                resources: m.resources,
                run_id: m.run_id,
                job: Some(m.job),
                started_at: Some(m.started_at),
                finished_at: m.finished_at,
                exit_code: m.exit_code,
                error: m.error,
            }
        }
        Err(e_read) => {
            if f.job.is_some() || f.since.is_some() {
                return None;
            }
            let status = match e_read {
                Error::ManifestMissing { .. } => "incomplete",
                _ => "unreadable",
            };
            Row {
                run_id: e.id.clone(),
                job: None,
                status: status.into(),
                started_at: None,
                finished_at: None,
                exit_code: None,
                error: Some(e_read.to_string()),
                seal: None,
                resources: None,
            }
        }
    })
}

/// Calls `each` with the rows `f` keeps, in its order, reading only the
/// manifests of the runs it keeps (the runs themselves come from the index,
/// see [`runindex`]).
fn for_each_row(
    root: &Root,
    f: &Filter,
    mut each: impl FnMut(Row) -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    let runs = match root.runs_dir(false) {
        Ok(d) => d,
        Err(_) => return Ok(()),
    };
    let now = SystemTime::now();
    let cutoff = f.since.map(|d| now.checked_sub(d).unwrap_or(UNIX_EPOCH));
    // With --limit, the newest runs are read from the index's end while its
    // stamp holds. Every other listing reads the whole index anyway: it is
    // checked against the names in runs/ first (one getdents pass), so no
    // index, forged or stale, hides a run from it.
    if f.limit.is_some() {
        let mut newest = runindex::Newest::open(root, &runs)?;
        let mut kept = Vec::new();
        let mut count = 0;
        let limit = f.limit.unwrap_or(usize::MAX);
        while count < limit
            && let Some(e) = newest.next_entry()?
        {
            let Some(r) = row(&runs, &e, f, now, cutoff) else { continue };
            count += 1;
            if f.newest_first {
                if !each(r)? {
                    return Ok(());
                }
            } else {
                kept.push(r);
            }
        }
        if !f.newest_first {
            for r in kept.into_iter().rev() {
                if !each(r)? {
                    break;
                }
            }
        }
        return Ok(());
    }
    let mut all = runindex::verified(root, &runs)?;
    if f.newest_first {
        all.reverse();
    }
    for e in all {
        if let Some(r) = row(&runs, &e, f, now, cutoff)
            && !each(r)?
        {
            break;
        }
    }
    Ok(())
}

pub fn ls(root: Option<&Path>, f: &Filter, json: bool, json_lines: bool) -> anyhow::Result<u8> {
    let root = workspace::resolve_root(root)?;
    root.must_exist()?;
    use std::io::Write;
    // Printed as the rows come, a buffer at a time.
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if json_lines {
        for_each_row(&root, f, |r| {
            serde_json::to_writer(&mut out, &r)?;
            writeln!(out)?;
            Ok(true)
        })?;
        out.flush()?;
        return Ok(exit::OK);
    }
    if json {
        // One array, as serde_json's pretty printer writes it, a row at a time.
        let mut first = true;
        for_each_row(&root, f, |r| {
            out.write_all(if first { b"[\n" } else { b",\n" })?;
            first = false;
            let text = serde_json::to_string_pretty(&r)?;
            for (i, line) in text.lines().enumerate() {
                if i > 0 {
                    out.write_all(b"\n")?;
                }
                write!(out, "  {line}")?;
            }
            Ok(true)
        })?;
        out.write_all(if first { b"[]\n" } else { b"\n]\n" })?;
        out.flush()?;
        return Ok(exit::OK);
    }
    writeln!(out, "{:<36}  {:<20}  {:<10}  {:<24}  {:<4}  SEAL", "RUN", "JOB", "STATUS", "STARTED", "EXIT")?;
    // Every field but the status and the exit code came from a manifest
    // the run could write: escaped, so that it cannot forge a line.
    for_each_row(&root, f, |r| {
        writeln!(
            out,
            "{:<36}  {:<20}  {:<10}  {:<24}  {:<4}  {}",
            shown::text(&r.run_id),
            shown::text(r.job.as_deref().unwrap_or("-")),
            r.status,
            shown::text(r.started_at.as_deref().unwrap_or("-")),
            r.exit_code.map(|c| c.to_string()).unwrap_or_else(|| "-".into()),
            shown::text(r.seal.as_deref().unwrap_or("-"))
        )?;
        Ok(true)
    })?;
    out.flush()?;
    Ok(exit::OK)
}

/// The most recently started run (of job `job`, when given) whose manifest
/// can be read: the newest in the index, read from its end.
pub fn last_run(root: &Root, job: Option<&str>) -> Result<String, Error> {
    let mut found = None;
    if let Ok(runs) = root.runs_dir(false) {
        let f = Filter { job, ..Filter::default() };
        let now = SystemTime::now();
        let mut newest = runindex::Newest::open(root, &runs)?;
        while let Some(e) = newest.next_entry()? {
            if let Some(r) = row(&runs, &e, &f, now, None)
                && r.started_at.is_some()
            {
                found = Some(e.id);
                break;
            }
        }
    }
    found.ok_or_else(|| match job {
        Some(j) => Error::Other(format!("no runs of job `{}` under `{}`", shown::text(j), root.display())),
        None => Error::Other(format!("no runs under `{}`", root.display())),
    })
}

/// The most candidates an ambiguous prefix lists.
const MAX_CANDIDATES: usize = 10;

/// The run `run` names: `last` (of `job`, when given), a run id, or a
/// prefix of exactly one run id.
pub fn resolve_run(root: &Root, run: &str, job: Option<&str>) -> Result<String, Error> {
    if run == "last" {
        return last_run(root, job);
    }
    let runs = match root.runs_dir(false) {
        Ok(d) => d,
        Err(_) => return Err(Error::NoSuchRun { run: run.to_string(), root: root.to_path_buf() }),
    };
    if workspace::check_run_id(run).is_ok() && runs.lstat(run)?.is_some() {
        return Ok(run.to_string());
    }
    let mut found: Vec<String> = if run.is_empty() {
        Vec::new()
    } else {
        runs.entries()?
            .into_iter()
            .filter(|id| id.starts_with(run) && workspace::check_run_id(id).is_ok())
            .collect()
    };
    found.sort();
    match found.len() {
        0 => Err(Error::NoSuchRun { run: run.to_string(), root: root.to_path_buf() }),
        1 => Ok(found.remove(0)),
        n => {
            let mut listed: Vec<String> =
                found.iter().take(MAX_CANDIDATES).map(|id| shown::text(id)).collect();
            if n > MAX_CANDIDATES {
                listed.push(format!("and {} more", n - MAX_CANDIDATES));
            }
            Err(Error::Usage(format!(
                "run id prefix `{}` is ambiguous: {n} runs match: {}",
                shown::text(run),
                listed.join(", ")
            )))
        }
    }
}

pub fn show(root: Option<&Path>, run: &str, json: bool) -> anyhow::Result<u8> {
    let root = workspace::resolve_root(root)?;
    root.must_exist()?;
    let id = resolve_run(&root, run, None)?;
    let rd = RunDir::open(&root, &id)?;
    let mut m = manifest::read(&rd.dir)?;
    // A run whose runws was killed: its proxy's log as last written.
    if let Some(net) = m.net.as_mut() {
        *net = crate::egress::log::latest(&rd.dir, net);
    }
    if json {
        print_manifest(&m, rd.path(), json)?;
    } else {
        print_summary(&m, &rd)?;
        print_replays(&root, &m)?;
    }
    Ok(exit::OK)
}

/// `show`'s lines on replays: what this run replayed and how it compared,
/// and the replays of this run, newest first.
fn print_replays(root: &Root, m: &Manifest) -> std::io::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let t = shown::text;
    let verdict = |c: &Option<manifest::ReplayComparison>| match c {
        None => "not compared".to_string(),
        Some(c) if c.same => "same".to_string(),
        Some(c) => {
            let n = c.outputs.iter().filter(|o| o.result != "same").count();
            let status = if c.status.0 != c.status.1 || c.exit_code.0 != c.exit_code.1 {
                ", status differs"
            } else {
                ""
            };
            format!("DIFFERENT ({n} output(s) differ{status})")
        }
    };
    if let Some(of) = &m.replay_of {
        let mut line = format!("replay of: {}", t(&of.run));
        if let Some(a) = &of.archive {
            line.push_str(&format!(" from {}", shown::path(a)));
            if of.from_quarantine {
                line.push_str(" (quarantine)");
            }
        }
        writeln!(out, "{line}: {}", verdict(&m.replay))?;
        for l in m.replay.iter().flat_map(|c| crate::replay::render(&of.run, c).into_iter().skip(1)) {
            writeln!(out, "          {}", l.trim_start())?;
        }
    }
    // A replay starts after its original ended, so after the original's
    // line in the index: the runs newer than it are all that is read.
    let Ok(runs) = root.runs_dir(false) else { return out.flush() };
    let Ok(mut newest) = runindex::Newest::open(root, &runs) else { return out.flush() };
    while let Ok(Some(e)) = newest.next_entry() {
        if e.id == m.run_id {
            break;
        }
        if e.job.as_deref().is_some_and(|j| j != m.job) {
            continue;
        }
        if let Ok(r) = runs.sub(&e.id).and_then(|d| manifest::read(&d))
            && r.replay_of.as_ref().is_some_and(|of| of.run == m.run_id)
        {
            writeln!(out, "replayed:  {} {}", t(&r.run_id), verdict(&r.replay))?;
        }
    }
    out.flush()
}

/// `runws cat`: output `name` of a finished run, on stdout, only once its
/// bytes were read into a private copy whose sha256 is the recorded one.
pub fn cat(root: Option<&Path>, run: &str, name: &OsStr, job: Option<&str>) -> anyhow::Result<u8> {
    let root = workspace::resolve_root(root)?;
    let id = resolve_run(&root, run, job)?;
    let rd = RunDir::open(&root, &id)?;
    let m = manifest::read(&rd.dir)?;
    if m.status == Status::Running {
        return Err(Error::Other(format!(
            "run `{id}` is still running: its outputs may change (inside the run, use `runws get`)"
        ))
        .into());
    }
    let (copy, _, path) = crate::guard::verified_output(&rd, &m, name, crate::spool::IN_MEMORY)?;
    let mut out = std::io::stdout().lock();
    copy.copy_to(&mut out).map_err(|e| Error::io("cannot copy output", &path, e))?;
    use std::io::Write;
    out.flush().map_err(|e| Error::io("cannot copy output", &path, e))?;
    Ok(exit::OK)
}

/// The human summary of `show`: the record, with where its files are.
fn print_summary(m: &Manifest, rd: &RunDir) -> std::io::Result<()> {
    print_manifest(m, rd.path(), false)?;
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let t = shown::text;
    if !m.outputs.is_empty()
        && let Ok(outputs) = rd.sub("outputs")
    {
        for o in &m.outputs {
            writeln!(out, "file:      {}", shown::path(&outputs.join(&o.file)))?;
        }
    }
    if let Ok(logs) = rd.sub("logs") {
        let mut names = logs.entries_raw().unwrap_or_default();
        names.sort();
        for (name, _) in names {
            writeln!(out, "log:       {}", shown::path(&logs.join(&name)))?;
        }
    }
    match &m.checkpoint {
        None => writeln!(out, "seal:      - (not sealed)")?,
        Some(c) => {
            let state = seal_state(m).unwrap_or_default();
            let mut line = format!("seal:      {}", t(&state));
            if let Some(a) = &c.archive {
                line.push_str(&format!(" {}", shown::path(a)));
            }
            if let Some(sha) = &c.archive_sha256 {
                line.push_str(&format!(" (sha256:{})", t(sha)));
            }
            if let Some(why) = &c.reason {
                line.push_str(&format!(": {}", t(why)));
            }
            writeln!(out, "{line}")?;
        }
    }
    if let Some(sb) = &m.sandbox {
        let kind = match sb.kind {
            manifest::sandbox::Kind::Sandbox => "sandbox",
            manifest::sandbox::Kind::Audit => "audit",
        };
        let backend = match (sb.backend, &sb.landlock) {
            (Some(b), Some(l)) => format!(", {} ABI {}", b.as_str(), l.abi),
            (Some(b), None) => format!(", {}", b.as_str()),
            (None, _) => String::new(),
        };
        if sb.missing.is_empty() {
            writeln!(out, "sandbox:   {kind} ({}{backend})", t(&sb.mode))?;
        } else {
            writeln!(
                out,
                "sandbox:   {kind} ({}{backend}), DEGRADED: {} protection(s) missing",
                t(&sb.mode),
                sb.missing.len()
            )?;
            for miss in &sb.missing {
                writeln!(out, "missing:   {}: {}", t(&miss.protection), t(&miss.why))?;
            }
        }
        if let Some(why) = &sb.chosen_because {
            writeln!(out, "backend:   landlock, because {}", t(why))?;
        }
    }
    if let Some(net) = &m.net {
        for line in crate::egress::log::render(net) {
            writeln!(out, "{line}")?;
        }
    }
    out.flush()
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
    if let Some(r) = &m.resources {
        for line in resource_lines(r) {
            writeln!(out, "{line}")?;
        }
    }
    if let Some(cut) = &m.truncated {
        let lists: Vec<String> = cut.iter().map(|(k, n)| format!("{} ({n})", t(k))).collect();
        writeln!(out, "truncated: {} (the disk was full)", lists.join(", "))?;
    }
    out.flush()
}

/// `show`'s lines on a run's limits and what it used.
fn resource_lines(r: &manifest::ResourcesRecord) -> Vec<String> {
    let mib = |b: u64| format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0));
    let mut lines = Vec::new();
    let mut limits = Vec::new();
    if let Some(m) = r.memory_limit {
        limits.push(format!("memory {}", mib(m)));
    }
    if let Some(p) = r.pids_limit {
        limits.push(format!("{p} {}", if p == 1 { "process" } else { "processes" }));
    }
    if let Some(c) = r.cpu_limit {
        limits.push(format!("{c} cores"));
    }
    if !limits.is_empty() {
        let how = match (&r.group, &r.missing) {
            (Some(g), _) => shown::text(g),
            (None, Some(why)) => format!("NOT APPLIED: {}", shown::text(why)),
            (None, None) => "not applied".into(),
        };
        lines.push(format!("limits:    {} ({how})", limits.join(", ")));
    }
    let mut used = Vec::new();
    if let (Some(u), Some(s)) = (r.cpu_user_ms, r.cpu_system_ms) {
        used.push(format!("cpu {u} ms user, {s} ms system"));
    }
    if let Some(p) = r.peak_memory {
        used.push(format!("peak memory {}", mib(p)));
    }
    if let Some(p) = r.peak_pids {
        used.push(format!("peak {p} {}", if p == 1 { "process" } else { "processes" }));
    }
    if let Some(n) = r.oom_kills.filter(|n| *n > 0) {
        used.push(format!("{n} killed out of memory"));
    }
    if let Some(n) = r.killed_left {
        used.push(format!("{n} left behind, killed"));
    }
    if !used.is_empty() {
        lines.push(format!("used:      {}", used.join(", ")));
    }
    lines
}
