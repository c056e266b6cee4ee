//! Reapers racing each other: what another reaper already did is done, not
//! a failure.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use crate::harness::*;

/// A run whose runws is killed while its command (and a background
/// process in its group) lives on, with a lease that is over at once.
fn killed_run(env: &Env, id: &str) {
    let up = env.path(&format!("{id}.up"));
    let script =
        format!("mkdir -p $TMPDIR/x/y && touch $TMPDIR/x/y/f; sleep 60 & touch '{}'; wait", up.display());
    let mut runws =
        env.cmd(&["run", "--run-id", id, "--lease-ttl", "50ms", "--", "sh", "-c", &script]).spawn().unwrap();
    assert!(wait_until(Duration::from_secs(10), || up.exists()), "run `{id}` never started");
    runws.kill().unwrap();
    runws.wait().unwrap();
}

/// Scratch trees wide and deep enough that two reapers meet inside them.
const SCRATCH: &str = "for i in 1 2 3 4 5 6 7 8 9 10 11 12; do \
    mkdir -p $TMPDIR/a$i/b/c $HOME/h$i $XDG_CACHE_HOME/c$i; \
    touch $TMPDIR/a$i/b/c/f $TMPDIR/a$i/g $HOME/h$i/f $XDG_CACHE_HOME/c$i/f; done";

fn assert_no_failure(out: &Out) {
    let v: serde_json::Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}):\n{}\n{}", out.stdout, out.stderr));
    for r in v.as_array().unwrap() {
        assert_ne!(r["action"], "failed", "a reaper failed:\n{}\n{}", out.stdout, out.stderr);
        for s in r["steps"].as_array().unwrap() {
            assert_ne!(s["outcome"], "failed", "a step failed:\n{}\n{}", out.stdout, out.stderr);
            let msg = s["message"].as_str().unwrap();
            assert!(!msg.contains("No such file"), "a step met ENOENT:\n{}", out.stdout);
        }
    }
}

/// Two to four reapers at once on one root, over twenty rounds of runs that
/// leave scratch and live process groups behind (and, every other round,
/// runs old enough to be removed whole): every reaper exits 0 and reports
/// no failure, and in the end everything is reaped.
#[test]
fn concurrent_reapers_report_no_failure_for_what_another_did() {
    let env = Env::new();
    for round in 0..20 {
        let ids: Vec<String> = (0..3).map(|i| format!("r{round}-{i}")).collect();
        let runs: Vec<_> = ids
            .iter()
            .map(|id| {
                env.cmd(&["run", "--run-id", id, "--", "sh", "-c", SCRATCH])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let killed = format!("k{round}");
        killed_run(&env, &killed);
        for r in runs {
            Out::from(r.wait_with_output().unwrap()).ok();
        }
        let dir = env.run_dir(&killed);
        let pid: i32 = env.manifest(&killed)["child"]["pid"].as_i64().unwrap() as i32;
        // The lease (50ms) is over.
        std::thread::sleep(Duration::from_millis(80));
        let keep = round % 2 == 1;
        let reapers = 2 + round % 3;
        let mut args = vec!["reap", "--json", "--grace", "2s"];
        if keep {
            args.extend(["--keep", "0s"]);
        }
        let children: Vec<_> = (0..reapers)
            .map(|_| env.cmd(&args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap())
            .collect();
        let outs: Vec<Out> = children.into_iter().map(|c| Out::from(c.wait_with_output().unwrap())).collect();
        for out in &outs {
            out.ok();
            assert_no_failure(out);
        }
        assert!(
            wait_until(Duration::from_secs(5), || !Path::new(&format!("/proc/{pid}")).exists()
                || std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z"))),
            "round {round}: the killed run's command survived"
        );
        for id in ids.iter().chain([&killed]) {
            let d = env.run_dir(id);
            // A run taken over now may be removed by one of the reapers, or
            // by a later reap, once its abandonment is older than --keep.
            if keep && (id != &killed || !d.exists()) {
                assert!(!d.exists(), "round {round}: `{id}` was not removed");
                continue;
            }
            let m = env.manifest(id);
            assert_eq!(m["reap"]["completed"], true, "round {round}: `{id}` not fully reaped: {m}");
            for s in ["home", "tmp", "cache", "run", "bin"] {
                assert!(!d.join(s).exists(), "round {round}: `{id}` kept {s}");
            }
        }
        if dir.exists() {
            assert_eq!(env.manifest(&killed)["status"], "abandoned");
            assert!(!dir.join(".manifest.json.final").exists());
        }
    }
}
