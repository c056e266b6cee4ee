//! The index of runs (ROOT/runs.index): a hint that `ls` and `show last`
//! read instead of every manifest, rebuilt when missing, corrupt or behind,
//! and never trusted over a manifest.

use std::time::{Duration, Instant};

use crate::harness::*;

fn ids(out: &Out) -> Vec<String> {
    out.stdout
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["run_id"].as_str().unwrap().to_string()
        })
        .collect()
}

fn newest(env: &Env, extra: &[&str]) -> Vec<String> {
    let mut args = vec!["ls", "--json-lines"];
    args.extend_from_slice(extra);
    let out = env.run(&args);
    ids(out.ok())
}

fn last(env: &Env) -> String {
    let out = env.run(&["show", "last", "--json"]);
    let m: serde_json::Value = serde_json::from_str(&out.ok().stdout).unwrap();
    m["run_id"].as_str().unwrap().to_string()
}

fn index(env: &Env) -> std::path::PathBuf {
    env.root.join("runs.index")
}

/// Lists until the index holds a stamp (written once runs/ has not
/// changed for a moment): from then on it is trusted as long as runs/
/// stays as stamped.
fn until_stamped(env: &Env) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        env.run(&["ls", "--limit", "1"]).ok();
        let text = std::fs::read_to_string(index(env)).unwrap_or_default();
        if text.lines().last().is_some_and(|l| l.starts_with("stamp ")) {
            return;
        }
        assert!(Instant::now() < deadline, "no stamp in the index: {text}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn three_runs(env: &Env) {
    env.run(&["run", "--run-id", "a1", "--job", "alpha", "--", "true"]).ok();
    env.run(&["run", "--run-id", "b1", "--job", "beta", "--", "false"]).code(1);
    env.run(&["run", "--run-id", "a2", "--job", "alpha", "--", "true"]).ok();
}

#[test]
fn ls_lists_newest_first_with_limit_job_and_since() {
    let env = Env::new();
    three_runs(&env);
    assert_eq!(newest(&env, &[]), ["a2", "b1", "a1"]);
    assert_eq!(newest(&env, &["--limit", "2"]), ["a2", "b1"]);
    assert_eq!(newest(&env, &["--job", "alpha"]), ["a2", "a1"]);
    assert_eq!(newest(&env, &["--job", "alpha", "--limit", "1"]), ["a2"]);
    assert_eq!(newest(&env, &["--since", "1h"]), ["a2", "b1", "a1"]);
    // The N newest, printed oldest first with --oldest-first; every run
    // oldest first without --limit.
    assert_eq!(ids(env.run(&["ls", "--limit", "2", "--oldest-first", "--json-lines"]).ok()), ["b1", "a2"]);
    assert_eq!(ids(env.run(&["ls", "--oldest-first", "--json-lines"]).ok()), ["a1", "b1", "a2"]);
    // A run that started long ago (its manifest says so) is not since 1h.
    let dir = env.run_dir("a1");
    let m = std::fs::read_to_string(dir.join("manifest.json")).unwrap();
    let started = env.manifest("a1")["started_at"].as_str().unwrap().to_string();
    std::fs::write(dir.join("manifest.json"), m.replace(&started, "2020-01-01T00:00:00.000Z")).unwrap();
    assert_eq!(newest(&env, &["--since", "1h"]), ["a2", "b1"]);
    assert_eq!(last(&env), "a2");
    env.run(&["cat", "--job", "beta", "last", "x"]).code(1);
    let json: serde_json::Value =
        serde_json::from_str(&env.run(&["ls", "--json", "--limit", "0"]).ok().stdout).unwrap();
    assert_eq!(json, serde_json::json!([]));
    env.run(&["ls", "--since", "soon"]).code(125);
}

#[test]
fn a_deleted_index_is_rebuilt_with_the_same_answers() {
    let env = Env::new();
    three_runs(&env);
    let before = newest(&env, &[]);
    let full = env.run(&["ls", "--json"]).ok().stdout.clone();
    std::fs::remove_file(index(&env)).unwrap();
    assert_eq!(newest(&env, &[]), before);
    assert_eq!(last(&env), "a2");
    assert_eq!(env.run(&["ls", "--json"]).ok().stdout, full);
    let text = std::fs::read_to_string(index(&env)).unwrap();
    assert_eq!(text.lines().filter(|l| l.starts_with("run ")).count(), 3, "{text}");
}

#[test]
fn a_corrupt_index_is_never_trusted() {
    let env = Env::new();
    three_runs(&env);
    until_stamped(&env);
    let good = std::fs::read_to_string(index(&env)).unwrap();
    // Lines that name a path outside runs/, a run that does not exist,
    // and garbage, after the stamp and before it.
    let outside = env.path("x");
    std::fs::create_dir_all(&outside).unwrap();
    for bad in [
        "run ../x alpha 99999999999999\n",
        "run ghost alpha 99999999999999\n",
        "\u{0}\u{1} garbage\n",
        "run a9 alpha 99999999999999 trailing\n",
    ] {
        std::fs::write(index(&env), format!("{good}{bad}")).unwrap();
        assert_eq!(newest(&env, &[]), ["a2", "b1", "a1"], "{bad:?}");
        assert_eq!(last(&env), "a2", "{bad:?}");
        std::fs::write(index(&env), format!("{bad}{good}")).unwrap();
        assert_eq!(newest(&env, &[]), ["a2", "b1", "a1"], "{bad:?}");
    }
    // The index says b1 is of job alpha: its manifest decides.
    std::fs::write(index(&env), good.replace("run b1 beta", "run b1 alpha")).unwrap();
    assert_eq!(newest(&env, &["--job", "alpha"]), ["a2", "a1"]);
    // A status is always the manifest's.
    let rows = env.run(&["ls", "--json-lines"]).ok().stdout.clone();
    assert!(rows.lines().nth(1).unwrap().contains("\"failed\""), "{rows}");
    // An index that is a directory, or a symlink, is not read through.
    std::fs::remove_file(index(&env)).unwrap();
    std::fs::create_dir(index(&env)).unwrap();
    assert_eq!(newest(&env, &[]), ["a2", "b1", "a1"]);
    std::fs::remove_dir(index(&env)).unwrap();
    let elsewhere = env.path("elsewhere");
    std::fs::write(&elsewhere, "run ghost alpha 99999999999999\n").unwrap();
    std::os::unix::fs::symlink(&elsewhere, index(&env)).unwrap();
    assert_eq!(newest(&env, &[]), ["a2", "b1", "a1"]);
    assert_eq!(std::fs::read_to_string(&elsewhere).unwrap(), "run ghost alpha 99999999999999\n");
}

#[test]
fn runs_the_index_does_not_name_are_found() {
    let env = Env::new();
    three_runs(&env);
    until_stamped(&env);
    // A run made elsewhere (as an older runws would, with no index line),
    // moved in by hand.
    let other = Env::new();
    other.run(&["run", "--run-id", "z9", "--job", "alpha", "--", "true"]).ok();
    std::fs::rename(other.run_dir("z9"), env.run_dir("z9")).unwrap();
    assert_eq!(last(&env), "z9");
    assert_eq!(newest(&env, &["--job", "alpha"]), ["z9", "a2", "a1"]);
    // A directory without a manifest is listed as it always was.
    std::fs::create_dir(env.run_dir("bare")).unwrap();
    let rows = env.run(&["ls", "--oldest-first", "--json-lines"]).ok().stdout.clone();
    assert!(rows.lines().next().unwrap().contains("\"incomplete\""), "{rows}");
    assert_eq!(last(&env), "z9");
}

#[test]
fn a_removed_run_is_not_listed() {
    let env = Env::new();
    three_runs(&env);
    until_stamped(&env);
    std::fs::remove_dir_all(env.run_dir("a2")).unwrap();
    assert_eq!(newest(&env, &[]), ["b1", "a1"]);
    assert_eq!(last(&env), "b1");
    let out = env.run(&["reap", "--keep", "0s", "--json"]);
    out.ok();
    assert_eq!(newest(&env, &[]), Vec::<String>::new(), "{}", out.stdout);
    env.run(&["show", "last"]).code(125).stderr_has("no runs under");
}

#[test]
fn concurrent_runs_are_all_listed() {
    let env = Env::new();
    env.run(&["run", "--run-id", "first", "--", "true"]).ok();
    until_stamped(&env);
    let children: Vec<_> = (0..20)
        .map(|i| env.cmd(&["run", "--run-id", &format!("c{i:02}"), "--", "true"]).spawn().unwrap())
        .collect();
    // Rebuilds race the runs being made.
    for _ in 0..5 {
        let _ = std::fs::remove_file(index(&env));
        env.run(&["ls", "--limit", "1"]).ok();
    }
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let mut listed = newest(&env, &[]);
    listed.sort();
    let mut want: Vec<String> = (0..20).map(|i| format!("c{i:02}")).collect();
    want.push("first".into());
    want.sort();
    assert_eq!(listed, want);
}

/// A run whose directory is the only change to `runs/` since the index was
/// stamped carries the stamp forward: the index ends in a stamp again, so
/// the next `show last` reads it from its end instead of checking `runs/`.
/// Two runs in a row do, and a directory made by hand breaks the chain.
#[test]
fn a_new_run_keeps_the_index_current() {
    let env = Env::new();
    three_runs(&env);
    until_stamped(&env);
    for id in ["c1", "c2"] {
        env.run(&["run", "--run-id", id, "--", "true"]).ok();
        let text = std::fs::read_to_string(index(&env)).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[lines.len() - 2].starts_with(&format!("run {id} ")), "{text}");
        assert!(lines[lines.len() - 1].starts_with("stamp "), "{text}");
    }
    assert_eq!(last(&env), "c2");
    // Made by something that does not write the index: no stamp follows
    // the next run's line, and the next reader finds the directory.
    std::fs::create_dir(env.run_dir("by-hand")).unwrap();
    env.run(&["run", "--run-id", "c3", "--", "true"]).ok();
    let text = std::fs::read_to_string(index(&env)).unwrap();
    assert!(text.lines().last().unwrap().starts_with("run c3 "), "{text}");
    let all = ids(env.run(&["ls", "--json-lines"]).ok());
    assert!(all.contains(&"by-hand".to_string()) && all.contains(&"c3".to_string()), "{all:?}");
}
