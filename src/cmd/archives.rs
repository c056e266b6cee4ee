//! `runws archives`: what an archive store holds, by job and run.

use std::io::Write;
use std::path::Path;

use crate::archive_store::{self, Place};
use crate::error::Error;
use crate::exit;
use crate::workspace::{self, RunDir};

pub fn list(
    root: Option<&Path>,
    run: Option<&str>,
    job: Option<&str>,
    store: Option<&str>,
    json: bool,
) -> anyhow::Result<u8> {
    let root = workspace::resolve_root(root)?;
    let place = archive_store::configured(store)?
        .unwrap_or_else(|| Place::Local(root.path().join(workspace::ARCHIVE)));
    let run = match run {
        Some("last") => Some(super::ls::last_run(&root, None)?),
        Some(r) => {
            crate::workspace::check_run_id(r)?;
            Some(r.to_string())
        }
        None => None,
    };
    // A run this ROOT holds names its job, so only that job is listed.
    let job = match (job, &run) {
        (Some(j), _) => Some(j.to_string()),
        (None, Some(r)) => {
            RunDir::open(&root, r).ok().and_then(|d| crate::manifest::read(&d.dir).ok()).map(|m| m.job)
        }
        (None, None) => None,
    };
    let mut found = archive_store::list(&place, true, job.as_deref())?;
    if let Some(r) = &run {
        found.retain(|l| &l.run == r);
    }
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    if json {
        serde_json::to_writer_pretty(&mut out, &found)?;
        writeln!(out)?;
    } else {
        for l in &found {
            let kind = if l.quarantine { "quarantine" } else { "sealed" };
            let when = l.modified.as_deref().unwrap_or("-");
            writeln!(out, "{kind:<10}  {:>12}  {when}  {}", l.bytes, crate::shown::line(&l.archive))?;
        }
    }
    out.flush()?;
    match (&run, found.is_empty()) {
        (Some(r), true) => Err(Error::NoArchive { run: r.clone(), store: shown(&place) }.into()),
        _ => Ok(exit::OK),
    }
}

fn shown(place: &Place) -> String {
    match place {
        Place::Local(d) => crate::shown::path(d),
        Place::S3(p) => p.url(),
    }
}
