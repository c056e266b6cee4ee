//! How a replay's result compares with its original's: each output by its
//! sha256 (same, different, missing, new), the status and the exit code.

use std::collections::BTreeMap;
use std::time::SystemTime;

use crate::manifest::{self, Manifest, OutputComparison, ReplayComparison};
use crate::osname::OsName;
use crate::shown;

/// Compares the replay `r` with its original `o`.
pub fn compare(o: &Manifest, r: &Manifest) -> ReplayComparison {
    let mut names: BTreeMap<&OsName, (Option<&str>, Option<&str>)> = BTreeMap::new();
    for out in &o.outputs {
        names.entry(&out.name).or_default().0 = Some(&out.sha256);
    }
    for out in &r.outputs {
        names.entry(&out.name).or_default().1 = Some(&out.sha256);
    }
    let outputs: Vec<OutputComparison> = names
        .into_iter()
        .map(|(name, (was, now))| OutputComparison {
            name: name.clone(),
            result: match (was, now) {
                (Some(a), Some(b)) if a == b => "same",
                (Some(_), Some(_)) => "different",
                (Some(_), None) => "missing",
                _ => "new",
            }
            .into(),
            original_sha256: was.map(str::to_string),
            replay_sha256: now.map(str::to_string),
        })
        .collect();
    let same =
        outputs.iter().all(|c| c.result == "same") && o.status == r.status && o.exit_code == r.exit_code;
    ReplayComparison {
        same,
        status: (o.status.as_str().into(), r.status.as_str().into()),
        exit_code: (o.exit_code, r.exit_code),
        outputs,
        program_was: o.program.clone().filter(|p| Some(p) != r.program.as_ref()),
        at: manifest::format_time(SystemTime::now()),
        extra: Default::default(),
    }
}

/// The comparison as lines for a person: one for the verdict, one per
/// output that is not the same, one for a status that differs.
pub fn render(of: &str, c: &ReplayComparison) -> Vec<String> {
    let t = shown::text;
    let changed = c.outputs.iter().filter(|o| o.result != "same").count();
    let mut lines = vec![if c.same {
        format!(
            "replay of run {}: same ({} output(s) the same, status {} and exit {} as before)",
            t(of),
            c.outputs.len(),
            t(&c.status.1),
            code(c.exit_code.1)
        )
    } else {
        format!("replay of run {}: DIFFERENT ({changed} of {} output(s) differ)", t(of), c.outputs.len())
    }];
    for o in c.outputs.iter().filter(|o| o.result != "same") {
        let sha = |s: &Option<String>| s.as_deref().map_or("-".to_string(), short);
        lines.push(format!(
            "  output {}: {} (was {}, now {})",
            o.name.shown(),
            o.result,
            sha(&o.original_sha256),
            sha(&o.replay_sha256)
        ));
    }
    if c.status.0 != c.status.1 || c.exit_code.0 != c.exit_code.1 {
        lines.push(format!(
            "  status: was {} (exit {}), now {} (exit {})",
            t(&c.status.0),
            code(c.exit_code.0),
            t(&c.status.1),
            code(c.exit_code.1)
        ));
    }
    if let Some(p) = &c.program_was {
        lines.push(format!("  note: the original executed {}; the replay another program", t(p)));
    }
    lines
}

fn code(c: Option<i32>) -> String {
    c.map_or("-".into(), |c| c.to_string())
}

/// The first 12 hex digits of a sha256, as `git` shortens.
fn short(sha: &str) -> String {
    shown::text(sha.get(..12).unwrap_or(sha))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manifest::OutputRecord;

    fn with(outputs: &[(&str, &str)], status: manifest::Status, code: Option<i32>) -> Manifest {
        let json = serde_json::json!({
            "schema": 1, "run_id": "r", "job": "j", "argv": ["x"], "cwd": "/", "invoked_from": "/",
            "host": "h", "uid": 0, "runws": {"pid": 1, "start_time": 0}, "started_at": "2026-01-01T00:00:00Z",
            "status": "failed", "lease_ttl_ms": 1, "lease_until": "2026-01-01T00:00:00Z", "env": [],
            "ports": [], "inputs": [], "input_fingerprint": "sha256:0", "outputs": []
        });
        let mut m: Manifest = serde_json::from_value(json).unwrap();
        m.status = status;
        m.exit_code = code;
        m.outputs = outputs
            .iter()
            .map(|(n, sha)| OutputRecord {
                name: (*n).into(),
                file: format!("{n}.r").as_str().into(),
                bytes: 1,
                sha256: (*sha).into(),
                written_at: String::new(),
            })
            .collect();
        m
    }

    #[test]
    fn every_output_is_same_different_missing_or_new() {
        use manifest::Status::Succeeded;
        let o = with(&[("a", "1"), ("b", "2"), ("c", "3")], Succeeded, Some(0));
        let r = with(&[("a", "1"), ("b", "9"), ("d", "4")], Succeeded, Some(0));
        let c = compare(&o, &r);
        let results: Vec<(String, &str)> =
            c.outputs.iter().map(|x| (x.name.shown(), x.result.as_str())).collect();
        assert_eq!(
            results,
            [("a".into(), "same"), ("b".into(), "different"), ("c".into(), "missing"), ("d".into(), "new")]
        );
        assert!(!c.same);
        let text = render("o", &c).join("\n");
        assert!(text.contains("DIFFERENT (3 of 4"), "{text}");
        assert!(compare(&o, &o).same);
    }

    #[test]
    fn the_same_outputs_with_another_status_differ() {
        let o = with(&[("a", "1")], manifest::Status::Succeeded, Some(0));
        let r = with(&[("a", "1")], manifest::Status::Failed, Some(1));
        let c = compare(&o, &r);
        assert!(!c.same);
        assert!(render("o", &c).iter().any(|l| l.contains("was succeeded (exit 0), now failed (exit 1)")));
    }
}
