//! `run --memory/--pids/--cpu`: a control group per run, what exceeding a
//! limit does, processes that left the command's group killed at its end,
//! the use recorded, a refusal where no group can be made, and `reap` of a
//! group a killed runws left.

use std::process::Stdio;
use std::time::Duration;

use crate::harness::*;
use crate::sandbox::{Retry, Who, runws_as, skip};

/// Whether this machine lets the tests make control groups (root, with the
/// controllers mounted); says why not when it does not.
fn groups_here(test: &str) -> bool {
    let env = Env::new();
    let out = env.run(&["run", "--memory", "64M", "--pids", "64", "--cpu", "1", "--", "true"]);
    if out.code != Some(0) {
        eprintln!("skipped {test}: no control group here: {}", out.stderr.trim());
        return false;
    }
    true
}

/// A sleep duration no other process has (`pgrep -f` finds it), about ten minutes.
fn unique_sleep() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("600.{nanos:09}{}", std::process::id() % 1000)
}

fn resources(env: &Env, id: &str) -> serde_json::Value {
    env.manifest(id)["resources"].clone()
}

#[test]
fn exceeding_the_memory_limit_ends_the_run_as_oom() {
    if !groups_here("memory_oom") {
        return;
    }
    let env = Env::new();
    let out = env.run(&[
        "run",
        "--run-id",
        "m",
        "--memory",
        "40M",
        "--",
        "python3",
        "-c",
        "x = bytearray(300 << 20)",
    ]);
    out.code(137);
    let m = env.manifest("m");
    assert_eq!(m["status"], "oom");
    let r = &m["resources"];
    assert_eq!(r["memory_limit"], 40 << 20);
    assert!(r["oom_kills"].as_u64().unwrap() >= 1, "{r}");
    assert!(r["peak_memory"].as_u64().unwrap() <= 41 << 20, "{r}");
    env.run(&["show", "m"]).ok().stdout_has("status:    oom");
    // Under the limit: an ordinary run.
    env.run(&["run", "--run-id", "ok", "--memory", "200M", "--", "python3", "-c", "x = bytearray(20 << 20)"])
        .ok();
    assert_eq!(env.manifest("ok")["status"], "succeeded");
}

#[test]
fn a_fork_bomb_is_contained_at_pids_and_nothing_outlives_the_run() {
    if !groups_here("pids_bomb") {
        return;
    }
    let env = Env::new();
    let tag = unique_sleep();
    // Fifty background sleepers, each tried; at most 16 processes at once.
    let script = format!("for i in $(seq 50); do sleep {tag} 2>/dev/null & done; exit 0");
    // The shell gives up at the first fork refused (exit 2): contained.
    let out = env.run(&["run", "--run-id", "p", "--pids", "16", "--", "sh", "-c", &script]);
    assert!(out.stderr.contains("fork") || out.code == Some(0), "{out:?}");
    let r = resources(&env, "p");
    assert!(r["peak_pids"].as_u64().unwrap() <= 16, "{r}");
    assert!(r["killed_left"].as_u64().unwrap() >= 1, "{r}");
    let left = std::process::Command::new("pgrep").args(["-f", &tag]).output().unwrap();
    assert!(left.stdout.is_empty(), "sleepers outlived the run: {}", String::from_utf8_lossy(&left.stdout));
}

#[test]
fn processes_that_left_the_commands_group_are_killed_at_its_end() {
    if !groups_here("escapees") {
        return;
    }
    let env = Env::new();
    let tag = unique_sleep();
    // setsid and a double fork: out of the command's process group and
    // session, reparented; still in the run's control group.
    let script = format!("setsid sleep {tag} & (sh -c 'sleep {tag} &' &); sleep 0.1");
    env.run(&["run", "--run-id", "e", "--memory", "256M", "--", "sh", "-c", &script]).ok();
    let left = std::process::Command::new("pgrep").args(["-f", &tag]).output().unwrap();
    assert!(left.stdout.is_empty(), "escaped: {}", String::from_utf8_lossy(&left.stdout));
    assert!(resources(&env, "e")["killed_left"].as_u64().unwrap() >= 2);
    // The group is gone.
    for dir in resources(&env, "e")["group_dirs"].as_array().unwrap() {
        assert!(!std::path::Path::new(dir.as_str().unwrap()).exists(), "{dir} is left");
    }
}

#[test]
fn the_cpu_limit_holds_a_busy_loop_to_its_share() {
    if !groups_here("cpu_share") {
        return;
    }
    let env = Env::new();
    env.run(&[
        "run",
        "--run-id",
        "c",
        "--cpu",
        "0.2",
        "--timeout",
        "1s",
        "--",
        "sh",
        "-c",
        "while :; do :; done",
    ])
    .code(124);
    let r = resources(&env, "c");
    let used = r["cpu_user_ms"].as_u64().unwrap() + r["cpu_system_ms"].as_u64().unwrap();
    // 0.2 cores for about a second; unlimited it would be about 1000 ms.
    assert!(used < 500, "used {used} ms of CPU under --cpu 0.2: {r}");
    assert_eq!(r["cpu_limit"], 0.2);
}

#[test]
fn every_run_records_the_cpu_time_of_what_it_ran() {
    let env = Env::new();
    env.sh("u", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done").ok();
    let r = resources(&env, "u");
    assert!(r["cpu_user_ms"].as_u64().unwrap() > 0, "{r}");
    assert!(r.get("group").is_none(), "a run without limits has no group: {r}");
}

#[test]
fn limits_that_cannot_be_applied_refuse_the_run_unless_try() {
    // As an ordinary user (nobody, when the tests run as root) no group can
    // be made here unless a cgroup v2 subtree is delegated.
    let who = if is_root() { Who::Nobody } else { Who::Me };
    if who == Who::Me && groups_here("limits_refused") {
        eprintln!("skipped limits_refused: this user may make control groups");
        return;
    }
    let env = Env::new();
    let out = Out::from(runws_as(&env, who, &["run", "--memory", "64M", "--", "true"]).output().unwrap());
    out.code(125).one_line_error().stderr_has("cannot limit the run").stderr_has("--limits=try");
    assert!(env.run_ids().is_empty(), "a refused run created {:?}", env.run_ids());
    let out = Out::from(
        runws_as(&env, who, &["run", "--run-id", "t", "--limits=try", "--memory", "64M", "--", "true"])
            .output()
            .unwrap(),
    );
    out.ok().stderr_has("running without limits");
    let r = resources(&env, "t");
    assert!(r["missing"].as_str().unwrap().contains("control group"), "{r}");
    assert_eq!(r["memory_limit"], 64 << 20);
    assert!(r.get("group").is_none());
}

#[test]
fn bad_limits_are_usage_errors() {
    let env = Env::new();
    for args in [
        ["run", "--cpu", "0", "--", "true"],
        ["run", "--cpu", "many", "--", "true"],
        ["run", "--pids", "0", "--", "true"],
        ["run", "--memory", "lots", "--", "true"],
    ] {
        env.run(&args).code(125);
    }
    assert!(env.run_ids().is_empty());
}

#[test]
fn reap_kills_and_removes_the_group_a_killed_runws_left() {
    if !groups_here("reap_group") {
        return;
    }
    let env = Env::new();
    let tag = unique_sleep();
    let ready = env.path("ready");
    let script = format!("setsid sleep {tag} & touch {}; sleep 60", ready.display());
    let mut runws = env
        .cmd(&["run", "--run-id", "k", "--lease-ttl", "200ms", "--memory", "128M", "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&ready);
    let dirs: Vec<String> = resources(&env, "k")["group_dirs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap().to_string())
        .collect();
    assert!(!dirs.is_empty());
    runws.kill().unwrap();
    runws.wait().unwrap();
    std::thread::sleep(Duration::from_millis(400));
    let out = env.run(&["reap"]);
    out.ok().stdout_has("left in the run's control group");
    let left = std::process::Command::new("pgrep").args(["-f", &tag]).output().unwrap();
    assert!(left.stdout.is_empty(), "left: {}", String::from_utf8_lossy(&left.stdout));
    for d in dirs {
        assert!(!std::path::Path::new(&d).exists(), "{d} is left");
    }
}

#[test]
fn a_sandboxed_run_is_limited_too() {
    if !groups_here("sandbox_limits") || skip(Who::Me, "sandbox_limits") {
        return;
    }
    let env = Env::new();
    let out = Out::from(
        runws_as(
            &env,
            Who::Me,
            &[
                "run",
                "--run-id",
                "s",
                "--sandbox",
                "--memory",
                "40M",
                "--",
                "python3",
                "-c",
                "x = bytearray(300 << 20)",
            ],
        )
        .output_retrying(),
    );
    out.code(137);
    assert_eq!(env.manifest("s")["status"], "oom");
}

/// A sandbox's own init, still ending once it reported the command's end,
/// is not something the command left behind: nothing is said or recorded
/// as killed for a command that left nothing (it was, every time, before).
#[test]
fn a_sandboxed_run_that_leaves_nothing_reports_nothing_killed() {
    if !groups_here("sandbox_nothing_left") || skip(Who::Me, "sandbox_nothing_left") {
        return;
    }
    let env = Env::new();
    for i in 0..5 {
        let id = format!("n{i}");
        let out = Out::from(
            runws_as(&env, Who::Me, &["run", "--run-id", &id, "--sandbox", "--memory", "1GiB", "--", "true"])
                .output_retrying(),
        );
        out.ok();
        assert!(!out.stderr.contains("killed"), "{i}: {}", out.stderr);
        assert!(env.manifest(&id)["resources"].get("killed_left").is_none_or(|v| v.is_null()), "{i}");
    }
}

#[test]
fn a_replay_runs_under_the_limits_the_original_ran_under() {
    if !groups_here("replay_limits") {
        return;
    }
    let env = Env::new();
    env.run(&[
        "run",
        "--run-id",
        "m",
        "--memory",
        "40M",
        "--pids",
        "16",
        "--",
        "python3",
        "-c",
        "x = bytearray(300 << 20)",
    ])
    .code(137);
    // Let loose, the job would take 300M and succeed: a result that differs
    // only because the replay dropped the limits, and a machine it could fill.
    let before = env.run_ids();
    env.run(&["replay", "m", "--expect", "same"]).ok().stderr_has("replay of run m: same");
    let r = env.run_ids().into_iter().find(|id| !before.contains(id)).unwrap();
    let m = env.manifest(&r);
    assert_eq!(m["status"], "oom");
    assert_eq!(m["resources"]["memory_limit"], 40 << 20);
    assert_eq!(m["resources"]["pids_limit"], 16);
    assert!(m["resources"]["group"].is_string(), "{}", m["resources"]);
}

#[test]
fn processes_moved_into_a_group_inside_the_runs_or_out_of_one_hierarchy_are_killed_too() {
    if !groups_here("nested_groups") {
        return;
    }
    let env = Env::new();
    let tag = unique_sleep();
    // The command may write to its own group's directories: one sleeper in
    // a group it makes inside each of them (where the group's cgroup.procs
    // does not list it), and on cgroup v1, one moved out of the first
    // hierarchy's group only (still in the others').
    let script = format!(
        r#"
import json, os, subprocess
dirs = json.load(open(os.environ["RUNWS_DIR"] + "/manifest.json"))["resources"]["group_dirs"]
quiet = dict(start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
p = subprocess.Popen(["sleep", "{tag}"], **quiet)
for d in dirs:
    os.mkdir(d + "/inner")
    open(d + "/inner/cgroup.procs", "w").write(str(p.pid))
if len(dirs) > 1:
    q = subprocess.Popen(["sleep", "{tag}"], **quiet)
    open(os.path.dirname(dirs[0]) + "/cgroup.procs", "w").write(str(q.pid))
"#
    );
    let out = env
        .run(&["run", "--run-id", "n", "--memory", "128M", "--pids", "20", "--", "python3", "-c", &script]);
    let left = std::process::Command::new("pgrep").args(["-f", &tag]).output().unwrap();
    let left = String::from_utf8_lossy(&left.stdout).to_string();
    for pid in left.split_whitespace() {
        let _ = std::process::Command::new("kill").args(["-9", pid]).status();
    }
    let r = resources(&env, "n");
    let dirs: Vec<&str> = r["group_dirs"].as_array().unwrap().iter().map(|d| d.as_str().unwrap()).collect();
    if !left.is_empty() {
        let pids: Vec<i32> = left.split_whitespace().filter_map(|p| p.parse().ok()).collect();
        wait_until(Duration::from_secs(5), || pids.iter().all(|p| !alive(*p)));
        for d in &dirs {
            let _ = std::fs::remove_dir(format!("{d}/inner"));
            let _ = std::fs::remove_dir(d);
        }
    }
    out.ok();
    assert!(left.is_empty(), "outlived the run: {left}");
    assert!(r["killed_left"].as_u64().unwrap() >= 1, "{r}");
    for dir in dirs {
        assert!(!std::path::Path::new(dir).exists(), "{dir} is left");
    }
}

#[test]
fn a_replay_where_no_group_can_be_made_is_refused_unless_try() {
    // As an ordinary user (nobody, when the tests run as root) no group can
    // be made here unless a cgroup v2 subtree is delegated.
    let who = if is_root() { Who::Nobody } else { Who::Me };
    if who == Who::Me && groups_here("replay_limits_refused") {
        eprintln!("skipped replay_limits_refused: this user may make control groups");
        return;
    }
    let env = Env::new();
    let as_who = |args: &[&str]| Out::from(runws_as(&env, who, args).output().unwrap());
    // Run where the limits were not applied: replayed the same way.
    as_who(&["run", "--run-id", "t", "--limits=try", "--memory", "64M", "--", "true"]).ok();
    as_who(&["replay", "t"]).ok().stderr_has("running without limits");
    // Run where they were (as a machine that could make the group records it).
    let path = env.run_dir("t").join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    m["resources"].as_object_mut().unwrap().remove("missing");
    std::fs::write(&path, serde_json::to_string(&m).unwrap()).unwrap();
    let before = env.run_ids();
    as_who(&["replay", "t"])
        .code(125)
        .one_line_error()
        .stderr_has("cannot limit the run")
        .stderr_has("--limits=try");
    assert_eq!(env.run_ids(), before);
    as_who(&["replay", "t", "--limits=try"]).ok().stderr_has("running without limits");
}

#[test]
fn a_memory_limit_too_small_for_the_exec_ends_the_command_not_runws() {
    if !groups_here("tiny_memory") {
        return;
    }
    let env = Env::new();
    // The exec itself runs out of 4 KiB. Before it, the command is runws's
    // child at its gate: were it sharing runws's memory, the out-of-memory
    // killer (which ends every process sharing its victim's memory) would
    // end runws too, leaving the run `running` and its group behind.
    let out = env.run(&["run", "--run-id", "tiny", "--memory", "4096", "--", "true"]);
    let m = env.manifest("tiny");
    assert_eq!(m["status"], "oom", "{out:?}");
    out.code(137);
    for dir in m["resources"]["group_dirs"].as_array().unwrap() {
        assert!(!std::path::Path::new(dir.as_str().unwrap()).exists(), "{dir} is left");
    }
}

/// runws's arguments run in a mount namespace of their own to which a
/// mount on a directory whose name is not UTF-8 was added first, as any
/// user may add one on the host with a FUSE file system in a directory of
/// theirs: the mount table every process reads then holds those bytes.
pub fn with_a_mount_named_in_bytes(env: &Env, args: &[&str]) -> Out {
    use std::os::unix::ffi::OsStrExt;
    let odd = env.tmp.path().join(std::ffi::OsStr::from_bytes(b"mnt-\xff\xfe"));
    std::fs::create_dir(&odd).unwrap();
    let mut cmd = std::process::Command::new("unshare");
    cmd.args([
        "-m",
        "--propagation",
        "private",
        "sh",
        "-c",
        r#"mount -t tmpfs runws-odd "$1" && shift && exec "$@""#,
        "sh",
    ])
    .arg(&odd)
    .arg(BIN)
    .args(args);
    Out::from(env.clean(&mut cmd).output().expect("spawn unshare"))
}

/// A mount whose point is not UTF-8 in the mount table (a user's FUSE
/// mount on the host) does not hide the control group hierarchies: the
/// limits still apply. (The table was read as text, and any byte that was
/// not UTF-8 left it empty: every run with a limit was refused.)
#[test]
fn a_mount_named_in_bytes_that_are_not_utf8_does_not_refuse_the_limits() {
    if !groups_here("odd_mount") || !is_root() {
        return;
    }
    let env = Env::new();
    let out = with_a_mount_named_in_bytes(
        &env,
        &["run", "--run-id", "odd", "--memory", "64M", "--pids", "64", "--", "true"],
    );
    out.ok();
    let r = resources(&env, "odd");
    assert!(r["group_dirs"].as_array().is_some_and(|d| !d.is_empty()), "{r}");
}
