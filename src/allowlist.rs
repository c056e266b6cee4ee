//! `--allow-import`: the runs a run may import from.
//!
//! Each entry is a run id, or `job:NAME` for any succeeded run of job NAME
//! (`import` only ever reads a succeeded run; which one is the id the caller
//! names). A sandboxed run may import only from the runs its list names, and
//! its list is empty unless given: the command cannot reach other runs'
//! files, so the guard's import is its one way out, and runws answers it. A
//! plain run is unrestricted unless `--allow-import` is given, and then held
//! to the list by the guard; there the guard runs in the command's own
//! process, so the list is a convention, as every guard rule is without a
//! sandbox.
//!
//! The list is recorded in the manifest: in the `sandbox` record of a
//! sandboxed run, as `allow_import` at the top of a plain one.

use crate::error::{Error, Result};
use crate::manifest::Manifest;
use crate::workspace;

const JOB: &str = "job:";

/// Checks each entry as `--run-id` and `--job` are checked.
pub fn check(entries: &[String]) -> Result<()> {
    for e in entries {
        let checked = match e.strip_prefix(JOB) {
            Some(job) => workspace::check_job(job),
            None => workspace::check_run_id(e),
        };
        checked.map_err(|why| {
            Error::Usage(format!(
                "invalid --allow-import `{}`: give a run id or job:NAME ({why})",
                e.escape_debug()
            ))
        })?;
    }
    Ok(())
}

/// The list a run's manifest records; `None` when imports are unrestricted
/// (a plain run without `--allow-import`). A sandboxed run's record without
/// a list allows nothing.
pub fn recorded(m: &Manifest) -> Option<Vec<String>> {
    match &m.sandbox {
        Some(sandbox) => Some(sandbox.allow_import.clone().unwrap_or_default()),
        None => m.allow_import.clone(),
    }
}

/// True when `entries` name run `run` by its id.
pub fn names_run(entries: &[String], run: &str) -> bool {
    entries.iter().any(|e| e == run)
}

/// True when `entries` name `job` (as `job:NAME`).
pub fn names_job(entries: &[String], job: &str) -> bool {
    entries.iter().any(|e| e.strip_prefix(JOB) == Some(job))
}

/// True when some entry is a `job:NAME`.
pub fn has_jobs(entries: &[String]) -> bool {
    entries.iter().any(|e| e.starts_with(JOB))
}

/// The list as a refusal shows it.
pub fn describe(entries: &[String]) -> String {
    if entries.is_empty() {
        return "no run is named with --allow-import".into();
    }
    let shown: Vec<String> = entries.iter().map(|e| format!("`{e}`")).collect();
    format!("--allow-import allows only {}", shown.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_run_ids_or_job_names() {
        let ok: Vec<String> = ["r1", "0193-ab", "job:nightly", "job:a.b_c-d"].map(String::from).to_vec();
        check(&ok).unwrap();
        for bad in ["", "../x", "job:", "job:../x", "job:a/b", "-x", "a b", "job:job:x", "/abs"] {
            assert!(check(&[bad.to_string()]).is_err(), "{bad:?} accepted");
        }
        assert!(names_run(&ok, "r1") && !names_run(&ok, "nightly"));
        assert!(names_job(&ok, "nightly") && !names_job(&ok, "r1"));
        assert!(has_jobs(&ok) && !has_jobs(&ok[..2]));
    }
}
