//! The reaper signals only process groups that provably belong to the run
//! it reaps, and never crosses a mount point in the scratch it removes.
//! Outside a sandbox the command can rewrite its own manifest, so several
//! tests forge one as the command (or a process it left behind) could.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::harness::*;

fn start_time(pid: i32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    s.rsplit(')').next().unwrap().split_whitespace().nth(19).unwrap().parse().unwrap()
}

fn read_pid(p: &Path) -> i32 {
    wait_for(p);
    for _ in 0..100 {
        if let Ok(n) = std::fs::read_to_string(p).unwrap_or_default().trim().parse() {
            return n;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("no pid in {}", p.display());
}

/// Rewrites run `id`'s manifest with `change`, as its command could.
fn forge(env: &Env, id: &str, change: impl FnOnce(&mut serde_json::Value)) {
    let path = env.run_dir(id).join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    change(&mut m);
    std::fs::write(&path, serde_json::to_vec_pretty(&m).unwrap()).unwrap();
}

/// A process group of its own whose leader exits at once, leaving one
/// `sleep` in it: `(pgid, sleep's pid)`.
fn group_without_leader() -> (i32, i32) {
    let out = Command::new("setsid")
        .args(["sh", "-c", "sleep 300 </dev/null >/dev/null 2>&1 & echo $$ $!"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let mut it = text.split_whitespace().map(|n| n.parse::<i32>().unwrap());
    let (pgid, member) = (it.next().unwrap(), it.next().unwrap());
    for _ in 0..200 {
        if !alive(pgid) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(!alive(pgid) && alive(member), "the group's leader should be gone, its member alive");
    (pgid, member)
}

fn kill(pid: i32) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
}

fn reap_json(env: &Env) -> Vec<serde_json::Value> {
    let out = env.run(&["reap", "--json", "--grace", "1s"]);
    out.ok();
    serde_json::from_str(&out.stdout).unwrap()
}

fn report_of<'a>(reports: &'a [serde_json::Value], id: &str) -> &'a serde_json::Value {
    reports.iter().find(|r| r["run_id"] == id).unwrap_or_else(|| panic!("no report of {id}: {reports:?}"))
}

/// Run A lives from before run B starts until after: B's processes started
/// within A's lifetime, so only B's liveness tells them apart. A's claim of
/// B's process group is refused; a claim forged into A's manifest is not
/// signalled by the reap that reports B as live.
#[test]
fn a_run_cannot_claim_or_reap_the_process_group_of_another_live_run() {
    let env = Env::new();
    let (a_up, b_up, b_pg) = (env.path("a-up"), env.path("b-up"), env.path("b-pgid"));
    let a_script = format!(
        r#"touch '{a_up}'; while [ ! -e '{b_up}' ]; do sleep 0.01; done
           runws claim pgid "$(cat '{b_pg}')"; echo CLAIM=$?"#,
        a_up = a_up.display(),
        b_up = b_up.display(),
        b_pg = b_pg.display()
    );
    let a = env
        .cmd(&["run", "--run-id", "a", "--", "sh", "-c", &a_script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&a_up);
    let b_script = format!(
        "echo $$ > '{pg}.tmp' && mv '{pg}.tmp' '{pg}'; touch '{up}'; exec sleep 60",
        pg = b_pg.display(),
        up = b_up.display()
    );
    let mut b = env.cmd(&["run", "--run-id", "b", "--", "sh", "-c", &b_script]).spawn().unwrap();
    let b_pgid = read_pid(&b_pg);
    let a_out = Out::from(a.wait_with_output().unwrap());
    a_out.ok().one_line_error().stderr_has("not part of run `a`");
    assert!(a_out.stdout.contains("CLAIM=125"), "the claim of B's group was accepted: {}", a_out.stdout);
    assert!(env.manifest("a").get("claims").is_none(), "a refused claim was recorded");

    // The same claim written into A's manifest by hand.
    forge(&env, "a", |m| {
        m["claims"] = serde_json::json!([{
            "kind": "pgid", "value": b_pgid.to_string(), "start_time": start_time(b_pgid),
            "claimed_at": m["started_at"].clone(),
        }]);
    });
    let reports = reap_json(&env);
    assert!(alive(b_pgid), "reaping run A killed live run B: {reports:#?}");
    assert_eq!(report_of(&reports, "b")["action"], "skipped");
    let steps = report_of(&reports, "a")["steps"].to_string();
    assert!(steps.contains(&format!("process group {b_pgid}")) && steps.contains("not signalled"), "{steps}");
    assert!(steps.contains("another live run"), "{steps}");

    nix::sys::signal::kill(nix::unistd::Pid::from_raw(b.id() as i32), nix::sys::signal::Signal::SIGTERM)
        .unwrap();
    b.wait().unwrap();
}

/// A finished run's recorded group id now names a group whose leader
/// exited (so its start time cannot be compared) and whose member is not
/// the run's: started before the run began, or after it ended. Neither is
/// signalled, nor when the manifest's times are forged as well.
#[test]
fn a_reused_group_id_whose_leader_exited_is_never_signalled() {
    let env = Env::new();
    let (before_pgid, before) = group_without_leader();
    std::thread::sleep(Duration::from_millis(300));
    env.sh("before", "true").ok();
    env.sh("after", "true").ok();
    // Well past the end of run `after`.
    std::thread::sleep(Duration::from_millis(300));
    let (after_pgid, after) = group_without_leader();
    let (forged_pgid, forged) = group_without_leader();
    std::thread::sleep(Duration::from_millis(300));
    env.sh("forged", "true").ok();

    forge(&env, "before", |m| m["child"]["pgid"] = before_pgid.into());
    forge(&env, "after", |m| m["child"]["pgid"] = after_pgid.into());
    // A window that holds every process: the run directory itself still
    // tells when the run began.
    forge(&env, "forged", |m| {
        m["child"]["pgid"] = forged_pgid.into();
        m["runws"]["start_time"] = 0.into();
        m["child"]["start_time"] = 0.into();
        m["started_at"] = "2000-01-01T00:00:00.000Z".into();
    });
    let reports = reap_json(&env);
    let survived = [alive(before), alive(after), alive(forged)];
    for p in [before, after, forged] {
        kill(p);
    }
    assert_eq!(survived, [true, true, true], "a group that is not the run's was signalled: {reports:#?}");
    for (id, pgid) in [("before", before_pgid), ("after", after_pgid), ("forged", forged_pgid)] {
        let r = report_of(&reports, id);
        let steps = r["steps"].to_string();
        assert!(
            steps.contains(&format!("process group {pgid}")) && steps.contains("not signalled"),
            "{id}: {steps}"
        );
    }
}

/// The reaper still ends what is the run's: a command's background process
/// left in its group after the command exited (the leader is gone), and a
/// process it started later.
#[test]
fn a_finished_runs_background_processes_are_still_ended() {
    let env = Env::new();
    let pids = env.path("pids");
    let script = format!(
        r#"(sleep 300 & echo $! >> '{p}'; sleep 1; sleep 301 & echo $! >> '{p}'; wait) </dev/null >/dev/null 2>&1 &
           echo $! >> '{p}'"#,
        p = pids.display()
    );
    env.sh("bg", &script).ok();
    std::thread::sleep(Duration::from_millis(1500));
    let listed: Vec<i32> =
        std::fs::read_to_string(&pids).unwrap().split_whitespace().map(|n| n.parse().unwrap()).collect();
    assert_eq!(listed.len(), 3, "{listed:?}");
    assert!(listed.iter().all(|p| alive(*p)));
    let reports = reap_json(&env);
    let left: Vec<i32> = listed.iter().copied().filter(|p| alive(*p)).collect();
    for p in &left {
        kill(*p);
    }
    assert!(left.is_empty(), "the run's background processes survived: {reports:#?}");
    let steps = report_of(&reports, "bg")["steps"].to_string();
    assert!(steps.contains("ended with SIGTERM"), "{steps}");
}

fn mounted(p: &Path) -> bool {
    let target = p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(target.to_str().unwrap()))
}

struct Unmount(Vec<PathBuf>);

impl Drop for Unmount {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = Command::new("umount").arg("-l").arg(p).status();
        }
    }
}

/// A root command bind-mounts a directory from outside the run (on the same
/// file system) into its scratch. The reaper leaves the mount point and
/// says so; the outside files survive, also when `--keep` removes whole runs.
#[test]
fn a_bind_mount_left_in_scratch_is_never_crossed() {
    if !is_root() {
        eprintln!("skipped a_bind_mount_left_in_scratch_is_never_crossed: needs root to mount");
        return;
    }
    let env = Env::new();
    let outside = env.path("outside");
    std::fs::create_dir_all(outside.join("deep")).unwrap();
    std::fs::write(outside.join("precious"), "keep me").unwrap();
    std::fs::write(outside.join("deep/also"), "keep me too").unwrap();
    let script = format!(
        r#"set -e
           mkdir -p "$TMPDIR/x" "$HOME/a/b"
           touch "$TMPDIR/plain" "$HOME/a/b/plain"
           mount --bind '{o}' "$TMPDIR/x"
           mount --bind '{o}/deep' "$HOME/a/b""#,
        o = outside.display()
    );
    let dir = env.run_dir("m");
    let _cleanup = Unmount(vec![dir.join("tmp/x"), dir.join("home/a/b")]);
    env.sh("m", &script).ok();
    assert!(mounted(&dir.join("tmp/x")), "the test's bind mount was not made");
    let reports = reap_json(&env);
    assert_eq!(std::fs::read_to_string(outside.join("precious")).unwrap(), "keep me", "{reports:#?}");
    assert_eq!(std::fs::read_to_string(outside.join("deep/also")).unwrap(), "keep me too");
    let r = report_of(&reports, "m");
    let steps = r["steps"].to_string();
    for left in [dir.join("tmp/x"), dir.join("home/a/b")] {
        assert!(steps.contains(&format!("left mount point `{}`", left.display())), "{steps}");
    }
    // Everything else in the scratch went.
    assert!(!dir.join("tmp/plain").exists() && !dir.join("cache").exists());
    // Whole-run removal fails on the mount instead of entering it.
    let out = env.run(&["reap", "--keep", "0s", "--json"]);
    out.code(125);
    assert_eq!(std::fs::read_to_string(outside.join("precious")).unwrap(), "keep me", "{}", out.stdout);
    assert!(out.stdout.contains("left mount point"), "{}", out.stdout);
    assert!(dir.join("tmp/x").exists());
}

/// As root, reaping a run of an ordinary user: that user's own leftover
/// process is ended, but a group forged into its manifest whose member
/// runs as another user (root here) is not signalled, though it started
/// while the run lived.
#[test]
fn a_root_reaper_signals_only_processes_of_the_runs_owner() {
    use crate::sandbox::{Retry, Who, runws_as};
    if !is_root() {
        eprintln!("skipped a_root_reaper_signals_only_processes_of_the_runs_owner: needs root");
        return;
    }
    let env = Env::new();
    let (up, go) = (env.path("up"), env.path("go"));
    let script = format!(
        r#"(exec sleep 300) </dev/null >/dev/null 2>&1 & echo $! > "$RUNWS_DIR/work/bg"
           touch '{up}'; while [ ! -e '{go}' ]; do sleep 0.01; done"#,
        up = up.display(),
        go = go.display()
    );
    let mut own = runws_as(&env, Who::Nobody, &["run", "--run-id", "own", "--", "sh", "-c", &script]);
    let own = own.spawn_retrying();
    wait_for(&up);
    std::fs::write(&go, "").unwrap();
    Out::from(own.wait_with_output().unwrap()).ok();
    let bg = read_pid(&env.run_dir("own").join("work/bg"));
    assert!(alive(bg));
    std::fs::remove_file(&go).unwrap();
    std::fs::remove_file(&up).unwrap();
    let forged = runws_as(&env, Who::Nobody, &["run", "--run-id", "forged", "--", "sh", "-c", &script])
        .spawn_retrying();
    wait_for(&up);
    let (late_pgid, late_member) = group_without_leader();
    std::fs::write(&go, "").unwrap();
    Out::from(forged.wait_with_output().unwrap()).ok();
    let forged_bg = read_pid(&env.run_dir("forged").join("work/bg"));
    kill(forged_bg);
    forge(&env, "forged", |m| m["child"]["pgid"] = late_pgid.into());

    let reports = reap_json(&env);
    let survived = (alive(bg), alive(late_member));
    for p in [bg, late_member] {
        kill(p);
    }
    assert_eq!(survived, (false, true), "{reports:#?}");
    let steps = report_of(&reports, "forged")["steps"].to_string();
    assert!(steps.contains("runs as uid 0, not the run's 65534; not signalled"), "{steps}");
    let steps = report_of(&reports, "own")["steps"].to_string();
    assert!(steps.contains("ended with SIGTERM"), "{steps}");
}
