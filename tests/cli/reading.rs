//! Reading results back from the shell: `cat`, `show` by prefix, the seal
//! state in `ls` and `show`.

use crate::harness::*;

#[test]
fn cat_prints_a_finished_runs_output_only_when_its_bytes_match() {
    let env = Env::new();
    env.sh("r-alpha-1", "printf 'one\\n' | runws put out.txt").ok();
    env.run(&[
        "run",
        "--run-id",
        "r-beta-1",
        "--job",
        "beta",
        "--",
        "sh",
        "-c",
        "printf 'beta\\n' | runws put out.txt",
    ])
    .ok();
    env.sh("r-alpha-2", "printf 'two\\n' | runws put out.txt").ok();

    assert_eq!(env.run(&["cat", "r-alpha-1", "out.txt"]).ok().stdout, "one\n");
    assert_eq!(env.run(&["cat", "last", "out.txt"]).ok().stdout, "two\n");
    assert_eq!(env.run(&["cat", "--job", "beta", "last", "out.txt"]).ok().stdout, "beta\n");
    // A unique prefix names its run.
    assert_eq!(env.run(&["cat", "r-b", "out.txt"]).ok().stdout, "beta\n");

    // Not produced: exit 1, one line.
    env.run(&["cat", "r-alpha-1", "nope.txt"])
        .code(1)
        .one_line_error()
        .stderr_has("has not produced `nope.txt`");
    // Bytes changed after the run: nothing printed, exit 4.
    std::fs::write(env.run_dir("r-alpha-1").join("outputs/out.txt.r-alpha-1"), "forged\n").unwrap();
    let out = env.run(&["cat", "r-alpha-1", "out.txt"]);
    out.code(4).one_line_error();
    assert_eq!(out.stdout, "", "a changed output was printed");
    // A name that is a path, or names another run's file, is refused.
    env.run(&["cat", "r-alpha-2", "../../r-alpha-1/outputs/out.txt.r-alpha-1"]).code(125).one_line_error();
}

#[test]
fn cat_reads_the_manifest_as_untrusted() {
    let env = Env::new();
    env.sh("victim", "printf 'secret\\n' | runws put v.txt").ok();
    // A run that rewrites its own manifest to point its output at another
    // run's file gets an unreadable manifest, not the other run's bytes.
    env.sh(
        "forger",
        "printf 'x' | runws put f.txt && sed -i 's#\"f.txt.forger\"#\"../../victim/outputs/v.txt.victim\"#' \"$RUNWS_DIR/manifest.json\"",
    );
    let out = env.run(&["cat", "forger", "f.txt"]);
    assert_ne!(out.code, Some(0), "{out:?}");
    assert!(!out.stdout.contains("secret"), "another run's output was printed: {out:?}");
}

#[test]
fn cat_refuses_a_run_that_is_still_running() {
    let env = Env::new();
    let marker = env.path("up");
    let gate = env.path("gate");
    let script = format!(
        "printf 'x' | runws put o; touch '{}'; while [ ! -e '{}' ]; do sleep 0.02; done",
        marker.display(),
        gate.display()
    );
    let mut child = env.cmd(&["run", "--run-id", "live", "--", "sh", "-c", &script]).spawn().unwrap();
    assert!(wait_until(std::time::Duration::from_secs(20), || marker.exists()));
    env.run(&["cat", "live", "o"]).code(125).one_line_error().stderr_has("still running");
    std::fs::write(&gate, "").unwrap();
    assert!(child.wait().unwrap().success());
    assert_eq!(env.run(&["cat", "live", "o"]).ok().stdout, "x");
}

#[test]
fn show_takes_a_unique_prefix_and_lists_the_candidates_of_an_ambiguous_one() {
    let env = Env::new();
    env.sh("abc-111", "true").ok();
    env.sh("abc-222", "true").ok();
    env.sh("xyz-333", "true").ok();
    env.run(&["show", "xy"]).ok().stdout_has("run:       xyz-333");
    env.run(&["show", "abc-2"]).ok().stdout_has("run:       abc-222");
    let out = env.run(&["show", "abc"]);
    out.code(125).one_line_error().stderr_has("ambiguous").stderr_has("abc-111").stderr_has("abc-222");
    env.run(&["show", "q"]).code(125).one_line_error().stderr_has("no run `q`");
}

#[test]
fn show_and_ls_say_where_the_files_are_and_how_the_seal_ended() {
    let env = Env::new();
    // A run whose seal quarantined it: `ls` must not look like a plain success.
    let token = format!("{}{}", "ghp_", "R4nd0mT0k3nV4lu3".repeat(3).chars().take(36).collect::<String>());
    let script = format!("echo 'token: {token}' > config.yml; echo hi; printf 'r' | runws put report.txt");
    env.run(&["run", "--run-id", "leaky", "--job", "j", "--capture", "--seal", "--", "sh", "-c", &script])
        .code(80);
    env.run(&["run", "--run-id", "clean", "--job", "j", "--seal", "--", "true"]).ok();
    env.sh("plain", "true").ok();

    let ls = env.run(&["ls"]);
    ls.ok().stdout_has("SEAL");
    let line = |id: &str| ls.stdout.lines().find(|l| l.starts_with(id)).unwrap().to_string();
    assert!(line("leaky").trim_end().ends_with("quarantined"), "{}", ls.stdout);
    assert!(line("clean").trim_end().ends_with("sealed"), "{}", ls.stdout);
    assert!(line("plain").trim_end().ends_with('-'), "{}", ls.stdout);
    let rows: serde_json::Value = serde_json::from_str(&env.run(&["ls", "--json"]).ok().stdout).unwrap();
    let seals: Vec<&serde_json::Value> = rows.as_array().unwrap().iter().map(|r| &r["seal"]).collect();
    assert_eq!(
        seals,
        // Newest first: plain, clean, leaky.
        [&serde_json::Value::Null, &serde_json::json!("sealed"), &serde_json::json!("quarantined")]
    );

    let dir = env.run_dir("leaky");
    let show = env.run(&["show", "leaky"]);
    show.ok()
        .stdout_has(&format!("file:      {}", dir.join("outputs/report.txt.leaky").display()))
        .stdout_has(&format!("log:       {}", dir.join("logs/stdout.log").display()))
        .stdout_has(&format!("log:       {}", dir.join("logs/stderr.log").display()))
        .stdout_has("seal:      quarantined ")
        .stdout_has("quarantine/leaky.tar.zst");
    env.run(&["show", "clean"]).ok().stdout_has("seal:      sealed ").stdout_has("(sha256:");
    env.run(&["show", "plain"]).ok().stdout_has("seal:      - (not sealed)");
}

#[test]
fn show_names_each_protection_a_degraded_sandbox_went_without() {
    let env = Env::new();
    env.sh("degraded", "true").ok();
    // The record `--sandbox=try` writes when a protection failed (made by
    // hand: this machine may have every protection).
    let path = env.run_dir("degraded").join("manifest.json");
    let mut m = env.manifest("degraded");
    m["sandbox"] = serde_json::json!({
        "kind": "sandbox", "mode": "try", "net": "host", "user_namespace": false,
        "missing": [{"protection": "seccomp", "why": "not supported\nstatus: fine"}]
    });
    std::fs::write(&path, serde_json::to_vec(&m).unwrap()).unwrap();
    let out = env.run(&["show", "degraded"]);
    out.ok()
        .stdout_has("sandbox:   sandbox (try), DEGRADED: 1 protection(s) missing")
        .stdout_has("missing:   seccomp: not supported\\nstatus: fine");
}
