//! Absurd values on the command line, and untrusted text in human output.

use crate::harness::*;

/// Every duration option of every subcommand: (the words before the value,
/// the words after it). Each takes at most 1000000000s.
const DURATIONS: &[(&[&str], &[&str])] = &[
    (&["run", "--timeout"], &["--", "true"]),
    (&["run", "--timeout", "1s", "--kill-after"], &["--", "true"]),
    (&["run", "--lease-ttl"], &["--", "true"]),
    (&["run", "--lease", "k", "--wait"], &["--", "true"]),
    (&["run", "--deadline"], &["--", "true"]),
    (&["audit", "--timeout"], &["--", "true"]),
    (&["audit", "--lease-ttl"], &["--", "true"]),
    (&["reap", "--keep"], &[]),
    (&["reap", "--grace"], &[]),
    (&["seal", "--deadline"], &["last"]),
    (&["lease", "acquire", "k", "--ttl"], &[]),
    (&["lease", "acquire", "k", "--wait"], &[]),
    (&["lease", "renew", "k", "--holder", "h", "--ttl"], &[]),
    (&["lane", "run", "lane-x", "--timeout"], &["--", "true"]),
    (&["lane", "review", "kit.tar.zst", "--timeout"], &[]),
    (&["lane", "reset", "lane-x", "--resetter", "r", "--grace"], &[]),
];

/// Every size option: at most 1PiB.
const SIZES: &[(&[&str], &[&str])] =
    &[(&["run", "--max-bytes"], &["--", "true"]), (&["seal", "--max-bytes"], &["last"])];

fn line(before: &[&str], value: &str, after: &[&str]) -> Vec<String> {
    before.iter().copied().chain([value]).chain(after.iter().copied()).map(String::from).collect()
}

/// Huge, overflowing and negative values are refused with one line that
/// names the option (exit 125), never a panic.
#[test]
fn every_duration_and_size_has_a_maximum_and_a_one_line_refusal() {
    let env = Env::new();
    let durations = [
        "100000000000000s",
        "1000000001",
        "99999999999999999999999",
        "18446744073709551616ms",
        "-1",
        "1e400",
    ];
    let sizes = ["1025TiB", "99999999999999999999999", "18446744073709551616", "-1", "1e400"];
    for (table, values) in [(DURATIONS, &durations[..]), (SIZES, &sizes[..])] {
        for (before, after) in table {
            let option = before.last().unwrap();
            for value in values {
                let words = line(before, value, after);
                let args: Vec<&str> = words.iter().map(String::as_str).collect();
                let out = env.run(&args);
                assert!(!out.stderr.contains("panicked"), "{args:?} panicked:\n{}", out.stderr);
                out.code(125).one_line_error();
                assert!(
                    out.stderr.contains(option),
                    "{args:?}: the refusal does not name {option}:\n{}",
                    out.stderr
                );
            }
        }
    }
}

/// The largest duration is taken, and a run holding it works.
#[test]
fn the_longest_duration_is_taken() {
    let env = Env::new();
    env.run(&[
        "run",
        "--run-id",
        "long",
        "--lease-ttl",
        "1000000000",
        "--timeout",
        "1000000000s",
        "--",
        "true",
    ])
    .ok();
    let m = env.manifest("long");
    assert_eq!(m["lease_ttl_ms"], 1_000_000_000_000u64);
    assert_eq!(m["status"], "succeeded");
}

/// `--timeout 0` is no timeout (as for `timeout(1)`): the command runs to
/// its end. A lease of 0 is refused.
#[test]
fn a_timeout_of_zero_is_no_timeout() {
    let env = Env::new();
    for zero in ["0", "0s", "0ms"] {
        let id = format!("z{}", zero.len());
        env.run(&["run", "--run-id", &id, "--timeout", zero, "--", "sh", "-c", "sleep 0.3; echo done"])
            .ok()
            .stdout_has("done");
        let m = env.manifest(&id);
        assert_eq!(m["status"], "succeeded", "{m}");
        assert!(m["timeout_ms"].is_null(), "{m}");
    }
    env.run(&["run", "--lease-ttl", "0", "--", "true"]).code(125).one_line_error().stderr_has("--lease-ttl");
}

/// A run names an output and its own command line with control characters,
/// and forges its start time: `show` and `ls` print each escaped, so no
/// line of theirs is the run's.
#[test]
fn show_and_ls_escape_what_the_run_wrote() {
    let env = Env::new();
    let forged = "\nstatus:    succeeded\n\x1b[2K";
    let script = r#"printf x | runws put "$1" || exit 9
python3 - <<'EOF'
import json, os
p = os.path.join(os.environ["RUNWS_DIR"], "manifest.json")
m = json.load(open(p))
m["started_at"] = m["started_at"] + "\nforged-run  sh  succeeded  2026  0"
open(p + ".new", "w").write(json.dumps(m))
os.rename(p + ".new", p)
EOF
exit 1"#;
    let name = format!("out{forged}");
    env.run(&["run", "--run-id", "esc", "--", "sh", "-c", script, "sh", &name]).code(1);
    // runws puts back its own started_at at the end; a process left behind
    // could still forge it afterwards.
    let path = env.run_dir("esc").join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    m["started_at"] = format!("{}\nforged-run  sh  succeeded", m["started_at"].as_str().unwrap()).into();
    m["error"] = "boom\nstatus:    succeeded".into();
    std::fs::write(&path, serde_json::to_vec(&m).unwrap()).unwrap();

    let show = env.run(&["show", "esc"]);
    show.ok();
    let statuses: Vec<&str> = show.stdout.lines().filter(|l| l.starts_with("status:")).collect();
    assert_eq!(statuses, ["status:    failed"], "{}", show.stdout);
    assert!(!show.stdout.contains('\x1b'), "{}", show.stdout);
    show.stdout_has(r"out\nstatus:    succeeded\n\e[2K").stdout_has(r"boom\nstatus:");
    let ls = env.run(&["ls"]);
    ls.ok();
    assert_eq!(ls.stdout.lines().count(), 2, "{}", ls.stdout);
    assert!(!ls.stdout.lines().any(|l| l.starts_with("forged-run")), "{}", ls.stdout);
    // JSON stays JSON: the raw values, escaped by JSON itself.
    let json: serde_json::Value = serde_json::from_str(&env.run(&["show", "esc", "--json"]).stdout).unwrap();
    assert_eq!(json["outputs"][0]["name"], name.as_str());
}
