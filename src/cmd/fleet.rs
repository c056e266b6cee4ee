//! `runws ls --fleet` and `runws show` of a run on another host: the
//! fleet view a PostgreSQL store keeps (see [`crate::fleet`]).

use std::io::Write;
use std::path::Path;

use crate::error::Error;
use crate::exit;
use crate::shown;
use crate::store::{FleetQuery, FleetRun};
use crate::workspace;

fn store_url(store: Option<&str>) -> Result<&str, Error> {
    store.filter(|u| crate::fleet::keeps_fleet(Some(u))).ok_or_else(|| {
        Error::Usage(
            "the fleet view needs a PostgreSQL store: give --store postgres://... or set RUNWS_STORE".into(),
        )
    })
}

/// The ROOT whose queue to send first, when there is one.
fn local_root(root: Option<&Path>) -> Option<workspace::Root> {
    workspace::resolve_root(root).ok().filter(|r| r.path().is_dir())
}

/// `ls --fleet`: the fleet's runs, newest first (oldest first on request).
pub fn ls(
    root: Option<&Path>,
    store: Option<&str>,
    q: &FleetQuery,
    oldest_first: bool,
    json: bool,
    json_lines: bool,
) -> anyhow::Result<u8> {
    let url = store_url(store)?;
    let mut runs = crate::fleet::list(local_root(root).as_ref(), url, q)?;
    if oldest_first {
        runs.reverse();
    }
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if json {
        serde_json::to_writer_pretty(&mut out, &runs)?;
        writeln!(out)?;
    } else if json_lines {
        for r in &runs {
            serde_json::to_writer(&mut out, r)?;
            writeln!(out)?;
        }
    } else {
        writeln!(out, "{:<37} {:<19} {:<21} {:<11} {:<25} EXIT", "RUN", "HOST", "JOB", "STATUS", "STARTED")?;
        for r in &runs {
            let t = shown::text;
            let exit = r.exit_code.map(|c| c.to_string()).unwrap_or_else(|| "-".into());
            writeln!(
                out,
                "{:<37} {:<19} {:<21} {:<11} {:<25} {exit}",
                t(&r.run_id),
                t(&r.host),
                t(&r.job),
                t(&r.status),
                t(&r.started_at)
            )?;
        }
    }
    out.flush()?;
    Ok(exit::OK)
}

/// `show RUN` for a run this ROOT does not hold: from the fleet view, when
/// the store keeps one and exactly one host's run has that id (or prefix).
pub fn show(root: Option<&Path>, store: Option<&str>, run: &str, json: bool) -> Option<anyhow::Result<u8>> {
    let url = store.filter(|u| crate::fleet::keeps_fleet(Some(u)))?;
    if workspace::check_run_id(run).is_err() {
        return None;
    }
    let q = FleetQuery { run: Some(run.to_string()), limit: Some(20), ..FleetQuery::default() };
    let found = match crate::fleet::list(local_root(root).as_ref(), url, &q) {
        Ok(f) => f,
        Err(e) => return Some(Err(e.into())),
    };
    // A run whose id is the one given is that run, even when other ids
    // start with it (as `show` of a local run does): otherwise anyone who
    // shares the store could hide a run by recording `<its id>x`.
    let exact: Vec<&FleetRun> = found.iter().filter(|r| r.run_id == run).collect();
    if let [one] = exact.as_slice() {
        return Some(print(one, json).map(|()| exit::OK).map_err(Into::into));
    }
    match found.as_slice() {
        [] => None,
        [one] => Some(print(one, json).map(|()| exit::OK).map_err(Into::into)),
        many => {
            let names: Vec<String> = many
                .iter()
                .map(|r| format!("{} on {}", shown::text(&r.run_id), shown::text(&r.host)))
                .collect();
            Some(Err(Error::Usage(format!(
                "`{}` names more than one run in the fleet view: {}",
                shown::text(run),
                names.join(", ")
            ))
            .into()))
        }
    }
}

fn print(r: &FleetRun, json: bool) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    if json {
        serde_json::to_writer_pretty(&mut out, r)?;
        return writeln!(out);
    }
    let t = shown::text;
    writeln!(out, "run:       {}", t(&r.run_id))?;
    writeln!(out, "host:      {} (from the fleet view; the run's files are on that host)", t(&r.host))?;
    writeln!(out, "root:      {}", t(&r.root))?;
    writeln!(out, "job:       {}", t(&r.job))?;
    writeln!(out, "status:    {}", t(&r.status))?;
    if let Some(c) = r.exit_code {
        writeln!(out, "exit:      {c}")?;
    }
    writeln!(out, "started:   {}", t(&r.started_at))?;
    if let Some(f) = &r.finished_at {
        writeln!(out, "finished:  {}", t(f))?;
    }
    writeln!(out, "inputs:    {}", t(&r.input_fingerprint))?;
    for o in &r.outputs {
        writeln!(out, "output:    {} ({} bytes, sha256:{})", t(&o.name), o.bytes, t(&o.sha256))?;
    }
    Ok(())
}

/// `reap`'s last step with a PostgreSQL store: what waits in ROOT's queue
/// is sent; a store still down leaves it there, and says so.
pub fn flush(root: Option<&Path>, url: &str) {
    let Some(root) = local_root(root) else { return };
    match crate::fleet::flush(&root, url) {
        Ok(0) => {}
        Ok(n) => eprintln!("runws: sent {n} waiting run record(s) to the fleet view"),
        Err(e) => eprintln!("runws: warning: the fleet view's records still wait: {e}"),
    }
}

/// `reap` with a PostgreSQL store: other hosts' running runs whose
/// heartbeat stopped are marked stale in the fleet view, each said on
/// stderr. A store that cannot be reached is a warning: the reap is done.
pub fn mark_stale(url: &str) {
    match crate::fleet::mark_stale(url) {
        Ok(marked) => {
            for (host, run) in marked {
                eprintln!(
                    "runws: run {} on host {}: its heartbeat stopped; marked stale in the fleet view",
                    shown::line(&run),
                    shown::line(&host)
                );
            }
        }
        Err(e) => eprintln!("runws: warning: cannot mark other hosts' expired runs stale: {e}"),
    }
}
