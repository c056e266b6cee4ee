//! The reaper reclaims only what nobody owns, follows the manifest, and
//! never leaves the run directory.

use std::time::Duration;

use crate::harness::*;

/// runws is killed with SIGKILL while its command (and a process group the
/// command claimed) live on: once the lease expires, reap ends both groups,
/// removes scratch, keeps evidence, and marks the run abandoned.
#[test]
fn a_run_whose_runws_was_killed_is_reaped_after_its_lease_expires() {
    let env = Env::new();
    let up = env.path("up");
    let script = format!(
        r#"printf kept | runws put result
           setsid sh -c 'echo $$ > "$RUNWS_DIR/work/other.pid"; exec sleep 60' &
           while [ ! -s "$RUNWS_DIR/work/other.pid" ]; do sleep 0.01; done
           runws claim pgid "$(cat "$RUNWS_DIR/work/other.pid")"
           echo $$ > "$RUNWS_DIR/work/child.pid"; touch '{up}'; sleep 60"#,
        up = up.display()
    );
    let mut runws = env
        .cmd(&["run", "--run-id", "dead", "--lease-ttl", "0.5", "--", "sh", "-c", &script])
        .spawn()
        .unwrap();
    wait_for(&up);
    runws.kill().unwrap();
    runws.wait().unwrap();
    let dir = env.run_dir("dead");
    let child: i32 = std::fs::read_to_string(dir.join("work/child.pid")).unwrap().trim().parse().unwrap();
    let other: i32 = std::fs::read_to_string(dir.join("work/other.pid")).unwrap().trim().parse().unwrap();
    assert!(alive(child) && alive(other));
    // The final record's temp file, made while the command ran, is left.
    assert!(dir.join(".manifest.json.final").is_file());
    // While the lease is valid, nothing happens.
    let out = env.run(&["reap", "--json"]);
    out.ok();
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v[0]["action"], "skipped", "{}", out.stdout);
    assert!(alive(child));
    std::thread::sleep(Duration::from_millis(700));
    let out = env.run(&["reap", "--grace", "1s"]);
    out.ok().stdout_has("reaped").stdout_has("dead");
    assert!(!alive(child), "the command survived the reap");
    assert!(!alive(other), "the claimed process group survived the reap");
    for s in ["home", "tmp", "cache", "run", "bin"] {
        assert!(!dir.join(s).exists(), "{s} was kept");
    }
    for e in ["manifest.json", "inputs", "outputs", "work", "logs"] {
        assert!(dir.join(e).exists(), "{e} was removed");
    }
    assert!(!dir.join(".manifest.json.final").exists(), "the dead runws's temp file was kept");
    assert_eq!(std::fs::read(dir.join("outputs/result.dead")).unwrap(), b"kept");
    let m = env.manifest("dead");
    assert_eq!(m["status"], "abandoned");
    assert_eq!(m["reap"]["completed"], true);
    assert_eq!(m["reap"]["was"], "running");
    // Idempotent: a second reap changes nothing.
    let before = std::fs::read(dir.join("manifest.json")).unwrap();
    env.run(&["reap"]).ok();
    assert_eq!(std::fs::read(dir.join("manifest.json")).unwrap(), before);
}

/// A process may name itself anything (its `comm` is the first bytes of the
/// file it executed): a name that is not UTF-8 must not hide the run's
/// command from the reaper, which then left it running after the reap.
#[test]
fn a_command_named_with_bytes_that_are_not_utf8_is_still_reaped() {
    let env = Env::new();
    let up = env.path("up");
    let script = format!(
        r#"n=$(printf 'zz\377\376')
           cp /bin/sleep "$RUNWS_DIR/work/$n"
           echo $$ > "$RUNWS_DIR/work/child.pid"; touch '{up}'
           exec "$RUNWS_DIR/work/$n" 60"#,
        up = up.display()
    );
    let mut runws = env
        .cmd(&["run", "--run-id", "odd", "--lease-ttl", "0.5", "--", "sh", "-c", &script])
        .spawn()
        .unwrap();
    wait_for(&up);
    let dir = env.run_dir("odd");
    let child: i32 = std::fs::read_to_string(dir.join("work/child.pid")).unwrap().trim().parse().unwrap();
    // The exec has happened once the name shows.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !std::fs::read(format!("/proc/{child}/comm")).is_ok_and(|c| c.starts_with(b"zz\xff")) {
        assert!(std::time::Instant::now() < deadline, "the command never took its name");
        std::thread::sleep(Duration::from_millis(10));
    }
    runws.kill().unwrap();
    runws.wait().unwrap();
    assert!(alive(child));
    std::thread::sleep(Duration::from_millis(700));
    let out = env.run(&["reap", "--grace", "1s"]);
    out.ok().stdout_has("reaped").stdout_has("odd");
    assert!(!alive(child), "the command survived the reap");
    assert_eq!(env.manifest("odd")["status"], "abandoned");
}

/// A paused run is taken over; when it wakes, its guard calls and its final
/// write are refused and the scratch is not recreated. Same host, so the
/// run's `host` is rewritten to stand for a run on another machine sharing
/// the root (on the same host a live runws process blocks the reap, which
/// the next test checks).
#[test]
fn a_paused_run_that_wakes_after_the_reap_finds_itself_reaped() {
    let env = Env::new();
    let up = env.path("up");
    let go = env.path("go");
    let script = format!(
        r#"touch '{up}'; while [ ! -e '{go}' ]; do sleep 0.02; done
           printf late | '{bin}' put late; echo "put=$?" > '{res}'"#,
        bin = BIN,
        up = up.display(),
        go = go.display(),
        res = env.path("result").display()
    );
    let runws = env
        .cmd(&["run", "--run-id", "paused", "--lease-ttl", "0.3", "--", "sh", "-c", &script])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&up);
    let pid = nix::unistd::Pid::from_raw(runws.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    // Same host: refused while the runws process is alive, even stopped.
    env.run(&["reap"]).ok().stdout_has("refused").stdout_has("is alive");
    let mpath = env.run_dir("paused").join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&mpath).unwrap()).unwrap();
    m["host"] = "another-host.example".into();
    std::fs::write(&mpath, serde_json::to_vec_pretty(&m).unwrap()).unwrap();
    env.run(&["reap"]).ok().stdout_has("reaped").stdout_has("another-host.example");
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    std::fs::write(&go, "").unwrap();
    let out = Out::from(runws.wait_with_output().unwrap());
    out.code(125).stderr_has("marked abandoned");
    assert_eq!(std::fs::read_to_string(env.path("result")).unwrap().trim(), "put=5");
    let m = env.manifest("paused");
    assert_eq!(m["status"], "abandoned");
    assert!(m["outputs"].as_array().unwrap().is_empty());
    assert!(!env.run_dir("paused").join("home").exists());
}

#[test]
fn a_live_run_with_a_renewed_lease_is_never_touched() {
    let env = Env::new();
    let up = env.path("up");
    let go = env.path("go");
    // The run lives (renewing its 0.3 s lease) until every reaper is done,
    // however slow the machine: it waits for `go`.
    let script = format!(
        "touch '{}'; i=0; while [ ! -e '{}' ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; \
         test -d \"$HOME\" && test -d \"$TMPDIR\" && printf ok | runws put still-here",
        up.display(),
        go.display()
    );
    let run = env
        .cmd(&["run", "--run-id", "live", "--lease-ttl", "0.3", "--", "sh", "-c", &script])
        .spawn()
        .unwrap();
    wait_for(&up);
    // Reapers hammering the root while the run lives.
    let reapers: Vec<_> = (0..4)
        .map(|_| {
            let c = env.cmd(&["reap"]);
            std::thread::spawn(move || {
                let mut c = c;
                for _ in 0..15 {
                    let out = Out::from(c.output().unwrap());
                    out.ok();
                    assert!(!out.stdout.contains("reaped"), "{}", out.stdout);
                    std::thread::sleep(Duration::from_millis(50));
                }
            })
        })
        .collect();
    for r in reapers {
        r.join().unwrap();
    }
    std::fs::write(&go, "").unwrap();
    Out::from(run.wait_with_output().unwrap()).ok();
    assert_eq!(env.manifest("live")["status"], "succeeded");
    assert_eq!(env.manifest("live")["outputs"][0]["name"], "still-here");
}

#[test]
fn planted_symlinks_and_hard_trees_never_lead_outside_the_run() {
    let env = Env::new();
    let outside = env.path("outside");
    std::fs::create_dir_all(outside.join("deep")).unwrap();
    std::fs::write(outside.join("deep/precious"), "keep me").unwrap();
    std::fs::write(env.path("outside-file"), "keep me too").unwrap();
    let script = format!(
        r#"
        ln -s '{o}' "$HOME/to-outside-dir"
        ln -s '{o}/deep/precious' "$TMPDIR/to-outside-file"
        ln -s '{o}' "$RUNWS_DIR/work/link-out"
        mkdir -p "$TMPDIR/ro/a/b" && touch "$TMPDIR/ro/a/b/f" && chmod 0500 "$TMPDIR/ro/a/b" "$TMPDIR/ro/a"
        mkdir -p "$TMPDIR/noperm/x" && chmod 000 "$TMPDIR/noperm"
        d="$TMPDIR/deep"; for i in $(seq 1 150); do d="$d/d"; done; mkdir -p "$d"; touch "$d/leaf"
        touch "$TMPDIR/$(printf 'new\nline')"
        runws claim path "$RUNWS_DIR/work/link-out/deep"
        runws claim path "$RUNWS_DIR/work/../../../outside-file"
        runws claim path '{f}'
        runws claim path "$RUNWS_DIR/outputs"
        "#,
        o = outside.display(),
        f = env.path("outside-file").display()
    );
    env.sh("hostile", &script).ok();
    let out = env.run(&["reap", "--json"]);
    out.ok();
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let steps = v[0]["steps"].to_string();
    assert!(steps.contains("a symlink is on the way"), "{steps}");
    assert!(steps.contains("outside the run directory"), "{steps}");
    assert!(steps.contains("not a plain path inside the run"), "{steps}");
    assert!(steps.contains("evidence is never removed"), "{steps}");
    assert_eq!(std::fs::read_to_string(outside.join("deep/precious")).unwrap(), "keep me");
    assert_eq!(std::fs::read_to_string(env.path("outside-file")).unwrap(), "keep me too");
    let dir = env.run_dir("hostile");
    assert!(!dir.join("tmp").exists() && !dir.join("home").exists());
    assert!(dir.join("outputs").is_dir());
    assert_eq!(env.manifest("hostile")["reap"]["completed"], true);
}

#[test]
fn two_reapers_at_once_end_in_the_same_state() {
    let env = Env::new();
    for i in 0..12 {
        env.sh(&format!("r{i}"), "mkdir -p $TMPDIR/a/b/c && touch $TMPDIR/a/b/c/f $HOME/x").ok();
    }
    let a = env.cmd(&["reap", "--json"]).output().unwrap();
    let b = env.cmd(&["reap", "--json"]).output().unwrap();
    let (a, b) = (Out::from(a), Out::from(b));
    a.ok();
    b.ok();
    let c1 = env.cmd(&["reap"]).spawn().unwrap();
    let c2 = env.cmd(&["reap"]).spawn().unwrap();
    Out::from(c1.wait_with_output().unwrap()).ok();
    Out::from(c2.wait_with_output().unwrap()).ok();
    for i in 0..12 {
        let m = env.manifest(&format!("r{i}"));
        assert_eq!(m["status"], "succeeded");
        assert_eq!(m["reap"]["completed"], true);
        assert!(!env.run_dir(&format!("r{i}")).join("tmp").exists());
    }
}

#[test]
fn keep_removes_only_old_finished_runs_and_dry_run_changes_nothing() {
    let env = Env::new();
    env.sh("old", "true").ok();
    let up = env.path("up");
    let live = env
        .cmd(&[
            "run",
            "--run-id",
            "running",
            "--",
            "sh",
            "-c",
            &format!("touch '{}'; sleep 1.5", up.display()),
        ])
        .spawn()
        .unwrap();
    wait_for(&up);
    let before = tree(&env.root);
    env.run(&["reap", "--dry-run", "--keep", "0s"]).ok().stdout_has("would-remove").stdout_has("old");
    assert_eq!(tree(&env.root), before);
    env.run(&["reap", "--keep", "1h"]).ok();
    assert!(env.run_dir("old").exists());
    env.run(&["reap", "--keep", "0s"]).ok().stdout_has("removed");
    assert!(!env.run_dir("old").exists());
    assert!(env.run_dir("running").join("home").exists());
    Out::from(live.wait_with_output().unwrap()).ok();
}

#[test]
fn an_unreadable_manifest_is_never_reaped() {
    let env = Env::new();
    env.sh("broken", "touch $HOME/file").ok();
    std::fs::write(env.run_dir("broken").join("manifest.json"), "{ not json").unwrap();
    env.run(&["reap", "--keep", "0s"]).ok().stdout_has("nothing proves who owns it");
    assert!(env.run_dir("broken").join("home/file").exists());
}

#[test]
fn claimed_worktrees_and_branches_are_removed() {
    let env = Env::new();
    let repo = env.path("repo");
    let git = |args: &[&str]| {
        let s = std::process::Command::new("git").arg("-C").arg(&repo).args(args).output().unwrap();
        assert!(s.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&s.stderr));
    };
    std::fs::create_dir_all(&repo).unwrap();
    git(&["init", "-q", "-b", "main"]);
    git(&[
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@example.invalid",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "init",
    ]);
    let script = format!(
        r#"set -e
           git -C '{r}' worktree add -q -b "runws/$RUN_ID" "$RUNWS_DIR/work/wt"
           runws claim worktree "$RUNWS_DIR/work/wt" --repo '{r}'
           runws claim branch "runws/$RUN_ID" --repo '{r}'"#,
        r = repo.display()
    );
    env.sh("wt", &script).ok();
    assert!(env.run_dir("wt").join("work/wt/.git").exists());
    env.run(&["reap"]).ok().stdout_has("removed worktree").stdout_has("deleted branch");
    assert!(!env.run_dir("wt").join("work/wt").exists());
    let branches = std::process::Command::new("git")
        .arg("-C")
        .arg(&repo)
        .args(["branch", "--list", "runws/*"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&branches.stdout).trim().is_empty());
}

/// The disk as a machine that stopped at the wrong moment leaves it: runws
/// made a run's final record durable in its temp file, but the rename over
/// manifest.json never reached the disk, so manifest.json still holds the
/// first record (running, its runws gone, its lease run out).
fn stop_before_the_final_rename(env: &Env, id: &str, final_temp: Option<&[u8]>) {
    let dir = env.run_dir(id);
    let done = std::fs::read(dir.join("manifest.json")).unwrap();
    let mut first: serde_json::Value = serde_json::from_slice(&done).unwrap();
    first["status"] = "running".into();
    for field in ["finished_at", "exit_code"] {
        first[field] = serde_json::Value::Null;
    }
    std::fs::write(dir.join("manifest.json"), serde_json::to_vec_pretty(&first).unwrap()).unwrap();
    std::fs::write(dir.join(".manifest.json.final"), final_temp.unwrap_or(&done)).unwrap();
}

#[test]
fn a_final_record_left_in_its_temp_file_is_the_runs_record() {
    let env = Env::new();
    env.sh("producer", "printf data | runws put result").ok();
    stop_before_the_final_rename(&env, "producer", None);
    let dir = env.run_dir("producer");

    let shown = env.run(&["show", "producer", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&shown.ok().stdout).unwrap();
    assert_eq!(v["status"], "succeeded", "{}", shown.stdout);
    // A consumer may import from it: its producer did finish successfully.
    env.sh("consumer", "runws import producer result && cat \"$RUNWS_DIR/inputs/producer/result\"")
        .ok()
        .stdout_has("data");
    // The reaper does not call it abandoned; its update writes the record
    // where it belongs and the temp file goes.
    env.run(&["reap"]).ok();
    assert!(!dir.join(".manifest.json.final").exists());
    let m = env.manifest("producer");
    assert_eq!(m["status"], "succeeded", "{m}");
    assert_eq!(m["reap"]["was"], "succeeded", "{m}");
    assert!(!dir.join(".manifest.json.final").exists());
    assert!(!dir.join("home").exists(), "a finished run's scratch is reaped");
}

#[test]
fn a_partial_final_record_is_ignored() {
    let env = Env::new();
    env.sh("cut", "true").ok();
    let done = std::fs::read(env.run_dir("cut").join("manifest.json")).unwrap();
    // Cut anywhere, even just before the closing brace: never a record.
    for len in [0, 1, done.len() / 2, done.len() - 3] {
        stop_before_the_final_rename(&env, "cut", Some(&done[..len]));
        let shown = env.run(&["show", "cut", "--json"]);
        let v: serde_json::Value = serde_json::from_str(&shown.ok().stdout).unwrap();
        assert_ne!(v["status"], "succeeded", "cut at {len}: {}", shown.stdout);
        std::fs::write(env.run_dir("cut").join("manifest.json"), &done).unwrap();
    }
    stop_before_the_final_rename(&env, "cut", Some(&done[..done.len() / 2]));
    env.run(&["reap"]).ok();
    assert_eq!(env.manifest("cut")["status"], "abandoned");
}

#[test]
fn a_seal_moves_a_final_record_left_in_its_temp_file_into_place() {
    let env = Env::new();
    env.sh("s", "true").ok();
    stop_before_the_final_rename(&env, "s", None);
    env.run(&["seal", "s"]).ok();
    let archive = env.root.join("archive/sh/s.tar.zst");
    let out = std::process::Command::new("tar")
        .args(["--zstd", "-xOf"])
        .arg(&archive)
        .arg("manifest.json")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let packed: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(packed["status"], "succeeded");
    assert!(!env.run_dir("s").join(".manifest.json.final").exists());
}
