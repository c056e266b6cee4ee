//! Membership in a run cannot be forged by another process of the same
//! user: a process that joins the command's process group is not part of
//! the run. Only descent from the run's runws counts.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::harness::*;

/// Joins run `a`'s command group (from a forked child, as a group leader
/// cannot move), then calls `runws put` and `runws get` with run `a`'s
/// RUNWS_DIR and RUNWS_RUN_ID, and writes what happened to `report`.
const ATTACKER: &str = r#"
import json, os, subprocess, sys, time
bin, run_dir, report = sys.argv[1:4]
out = os.path.join(run_dir, "outputs", "out.a")
while not os.path.exists(out):
    time.sleep(0.01)
pgid = json.load(open(os.path.join(run_dir, "manifest.json")))["child"]["pgid"]
pid = os.fork()
if pid == 0:
    try:
        os.setpgid(0, pgid)
        joined = "joined" if os.getpgrp() == pgid else "not-joined"
    except OSError as e:
        joined = "setpgid-refused:" + str(e.errno)
    env = dict(os.environ, RUNWS_DIR=run_dir, RUNWS_RUN_ID="a")
    put = subprocess.run([bin, "put", "out"], input=b"forged", env=env, stderr=subprocess.PIPE)
    get = subprocess.run([bin, "get", "out"], env=env, capture_output=True)
    with open(report + ".tmp", "w") as f:
        f.write("%s put=%d get=%d got=%r\n%s" % (joined, put.returncode, get.returncode, get.stdout, put.stderr.decode()))
    os.rename(report + ".tmp", report)
    os._exit(0)
os.waitpid(pid, 0)
"#;

/// Run A's command: records `out`, then waits for `done`.
fn run_a_script(done: &Path) -> String {
    format!("printf mine | runws put out || exit 9; while [ ! -e '{}' ]; do sleep 0.02; done", done.display())
}

fn check_refused(env: &Env, report: &str) {
    let first = report.lines().next().unwrap_or_default();
    assert!(!first.is_empty(), "no report");
    assert!(
        first.contains("put=5") && first.contains("get=5"),
        "run B's process acted as run A's:\n{report}"
    );
    assert_eq!(std::fs::read(env.run_dir("a").join("outputs/out.a")).unwrap(), b"mine");
    let m = env.manifest("a");
    let outputs = m["outputs"].as_array().unwrap();
    assert_eq!(outputs.len(), 1);
    // sha256("mine")
    assert_eq!(outputs[0]["sha256"], "3fd30542fe3f61b14bd4a4b2dc0b6fb30fa6f63ebce52dd1778aaa8c4dc02cff");
}

/// Runs A and B start from one process, without a terminal; B's command
/// moves a process into A's command group and calls the guard as run A.
/// As root and as an ordinary user.
#[test]
fn another_runs_process_in_the_commands_group_is_not_part_of_the_run() {
    use crate::sandbox::{Retry, Who, everyone, runws_as};
    for who in everyone() {
        let env = Env::new();
        let (done, report) = (env.path("done"), env.path("report"));
        let attacker = env.path("attacker.py");
        std::fs::write(&attacker, ATTACKER).unwrap();
        let a_script = run_a_script(&done);
        let a = runws_as(&env, who, &["run", "--run-id", "a", "--", "sh", "-c", &a_script]).spawn_retrying();
        let bin = if who == Who::Me { BIN.into() } else { env.path("runws-copy") };
        let run_dir = env.run_dir("a");
        let b = runws_as(
            &env,
            who,
            &[
                "run",
                "--run-id",
                "b",
                "--",
                "python3",
                attacker.to_str().unwrap(),
                bin.to_str().unwrap(),
                run_dir.to_str().unwrap(),
                report.to_str().unwrap(),
            ],
        )
        .output_retrying();
        std::fs::write(&done, "").unwrap();
        Out::from(a.wait_with_output().unwrap()).ok();
        Out::from(b).ok();
        let text = std::fs::read_to_string(&report).unwrap();
        check_refused(&env, &format!("{who:?}: {text}"));
    }
}

/// The same from a process of the terminal's session while run A's command
/// holds the terminal (so it stays in that session and the join succeeds):
/// the guard still refuses it. The attacker is started in a subshell that
/// exits at once, so it is no descendant of the shell that becomes runws.
#[test]
fn a_process_that_joins_the_commands_group_on_a_terminal_is_not_part_of_the_run() {
    if Command::new("script").arg("--version").stdout(Stdio::null()).status().is_err() {
        eprintln!("skipped a_process_that_joins_the_commands_group_on_a_terminal: no `script`");
        return;
    }
    let env = Env::new();
    let (done, report) = (env.path("done"), env.path("report"));
    let attacker = env.path("attacker.py");
    std::fs::write(&attacker, ATTACKER).unwrap();
    let run_dir = env.run_dir("a");
    let inner = format!(
        "(python3 '{py}' '{bin}' '{dir}' '{rep}' </dev/null >/dev/null 2>&1 &); exec '{bin}' run --run-id a -- sh -c \"{a}\"",
        py = attacker.display(),
        bin = BIN,
        dir = run_dir.display(),
        rep = report.display(),
        a = run_a_script(&done)
    );
    let mut a = Command::new("script")
        .args(["-qec", &inner, "/dev/null"])
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("HOME", &env.home)
        .env("SHELL", "/bin/sh")
        .env("RUNWS_ROOT", &env.root)
        .current_dir(env.tmp.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&report);
    std::fs::write(&done, "").unwrap();
    let text = std::fs::read_to_string(&report).unwrap();
    drop(a.stdin.take());
    let out = Out::from(a.wait_with_output().unwrap());
    assert!(text.starts_with("joined"), "the join should succeed on a terminal:\n{text}\n{out:?}");
    check_refused(&env, &text);
}

/// A process whose parent exited is reparented to runws (a child
/// subreaper), not to init: it keeps its descent, so its guard calls are
/// accepted while the run lives; runws reaps it when it ends, leaving no
/// zombie behind.
#[test]
fn an_orphan_of_the_command_stays_part_of_the_run_and_is_reaped() {
    let env = Env::new();
    let script = r#"
        w="$RUNWS_DIR/work"
        ( (sleep 0.3; printf x | runws put orphan; echo $? > "$w/code"; exec sleep 2) </dev/null >/dev/null 2>&1 & echo $! > "$w/orphan" )
        ( sleep 0.1 & echo $! > "$w/short" )
        while [ ! -s "$w/code" ]; do sleep 0.02; done
        sleep 0.2
        echo "parent=$(cut -d' ' -f4 "/proc/$(cat "$w/orphan")/stat" 2>/dev/null)"
        echo "short=$(cut -d' ' -f3 "/proc/$(cat "$w/short")/stat" 2>/dev/null)gone"
    "#;
    let out = env.sh("orphans", script);
    out.ok();
    let dir = env.run_dir("orphans");
    assert_eq!(std::fs::read_to_string(dir.join("work/code")).unwrap().trim(), "0", "{out:?}");
    assert_eq!(env.manifest("orphans")["outputs"][0]["name"], "orphan");
    // The short-lived orphan ended while the run lived: reaped, not a zombie.
    assert!(out.stdout.contains("short=gone"), "{}", out.stdout);
    let runws = env.manifest("orphans")["runws"]["pid"].as_i64().unwrap();
    // The long-lived one had been adopted by runws.
    assert!(out.stdout.contains(&format!("parent={runws}\n")), "{}", out.stdout);
}
