//! Exit statuses follow `env` and `timeout`; signals reach the command.

use std::time::Duration;

use crate::harness::*;

#[test]
fn child_status_passes_through() {
    let env = Env::new();
    for (script, want) in
        [("exit 0", 0), ("exit 1", 1), ("exit 42", 42), ("kill -INT $$", 130), ("kill -TERM $$", 143)]
    {
        let out = env.run(&["run", "--", "sh", "-c", script]);
        out.code(want);
    }
    let statuses: Vec<String> =
        env.run_ids().iter().map(|id| env.manifest(id)["status"].as_str().unwrap().to_string()).collect();
    assert_eq!(statuses.iter().filter(|s| *s == "succeeded").count(), 1);
    assert_eq!(statuses.iter().filter(|s| *s == "failed").count(), 2);
    assert_eq!(statuses.iter().filter(|s| *s == "killed").count(), 2);
}

#[test]
fn timeout_is_124_and_kill_after_ends_a_command_that_ignores_sigterm() {
    let env = Env::new();
    env.run(&["run", "--run-id", "t1", "--timeout", "0.2", "--", "sleep", "30"]).code(124);
    assert_eq!(env.manifest("t1")["status"], "timed_out");
    let started = std::time::Instant::now();
    env.run(&[
        "run",
        "--run-id",
        "t2",
        "--timeout",
        "0.2",
        "--kill-after",
        "0.3",
        "--",
        "sh",
        "-c",
        "trap '' TERM; while :; do sleep 0.05; done",
    ])
    .code(124);
    assert!(started.elapsed() < Duration::from_secs(20), "kill-after did not kill");
    assert_eq!(env.manifest("t2")["status"], "timed_out");
}

#[test]
fn runws_failure_is_125_not_executable_126_not_found_127() {
    let env = Env::new();
    env.run(&["run", "--run-id", "bad/id", "--", "true"]).code(125).one_line_error();
    env.run(&["run", "--no-such-flag", "--", "true"]).code(125).one_line_error();
    // A missing argument is named on the one line, not left to a second one.
    env.run(&["lease", "acquire"]).code(125).one_line_error().stderr_has("not provided: <KEY>");
    env.run(&["run"]).code(125).one_line_error().stderr_has("<COMMAND>");
    env.run(&["run", "--run-id", "nf", "--", "no-such-command-xyz"])
        .code(127)
        .one_line_error()
        .stderr_has("command not found");
    assert_eq!(env.manifest("nf")["exit_code"], 127);
    assert_eq!(env.manifest("nf")["status"], "failed");
    let script = env.path("not-executable.sh");
    std::fs::write(&script, "#!/bin/sh\nexit 0\n").unwrap();
    env.run(&["run", "--run-id", "ne", "--", "./not-executable.sh"]).code(126).one_line_error();
    env.run(&["run", "--", "/"]).code(126);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    // A relative command is found from where runws was started, not work/.
    env.run(&["run", "--", "./not-executable.sh"]).ok();
}

fn signal_forwarded(sig: nix::sys::signal::Signal, want: i32) {
    let env = Env::new();
    let marker = env.path("started");
    let script = format!(
        "trap 'echo got-{name} > \"$RUNWS_DIR/work/trap\"; exit {want}' {name}; touch '{m}'; while :; do sleep 0.05; done",
        name = sig.as_str().trim_start_matches("SIG"),
        m = marker.display()
    );
    let child = env
        .cmd(&["run", "--run-id", "sig", "--", "sh", "-c", &script])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_until(Duration::from_secs(5), || marker.exists()), "the command never started");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), sig).unwrap();
    let out = Out::from(child.wait_with_output().unwrap());
    out.code(want);
    let trap = std::fs::read_to_string(env.run_dir("sig").join("work/trap")).unwrap();
    assert_eq!(trap.trim(), format!("got-{}", sig.as_str().trim_start_matches("SIG")));
}

#[test]
fn sigterm_is_forwarded_to_the_command() {
    signal_forwarded(nix::sys::signal::Signal::SIGTERM, 43);
}

#[test]
fn sigint_sighup_sigquit_are_forwarded() {
    signal_forwarded(nix::sys::signal::Signal::SIGINT, 44);
    signal_forwarded(nix::sys::signal::Signal::SIGHUP, 45);
    signal_forwarded(nix::sys::signal::Signal::SIGQUIT, 46);
}

#[test]
fn a_signal_that_kills_the_command_becomes_128_plus_n() {
    let env = Env::new();
    let marker = env.path("up");
    let script = format!("touch '{}'; exec sleep 30", marker.display());
    let child = env.cmd(&["run", "--run-id", "k", "--", "sh", "-c", &script]).spawn().unwrap();
    while !marker.exists() {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(100));
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGINT)
        .unwrap();
    let out = Out::from(child.wait_with_output().unwrap());
    out.code(130);
    assert_eq!(env.manifest("k")["status"], "killed");
    assert_eq!(env.manifest("k")["signal"], 2);
}

#[test]
fn capture_writes_logs_and_still_passes_output_through() {
    let env = Env::new();
    let out = env.run(&[
        "run",
        "--run-id",
        "c",
        "--capture",
        "--",
        "sh",
        "-c",
        "echo to-out; echo to-err >&2; exit 3",
    ]);
    out.code(3).stdout_has("to-out").stderr_has("to-err");
    let logs = env.run_dir("c").join("logs");
    assert_eq!(std::fs::read_to_string(logs.join("stdout.log")).unwrap(), "to-out\n");
    assert_eq!(std::fs::read_to_string(logs.join("stderr.log")).unwrap(), "to-err\n");
}

#[test]
fn stdin_passes_through() {
    let env = Env::new();
    let mut child = env
        .cmd(&["run", "--", "sh", "-c", "read line; echo got:$line"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(b"hello\n").unwrap();
    Out::from(child.wait_with_output().unwrap()).ok().stdout_has("got:hello");
}

#[test]
fn closed_standard_descriptors_reach_the_command_as_dev_null() {
    // runws opens /dev/null on a closed 0 or 1, as a careful program does:
    // otherwise the first file it opened would take that number, and the
    // command would find its stdin or stdout closed (or worse, a file).
    let env = Env::new();
    let mut sh = std::process::Command::new("sh");
    sh.args([
        "-c",
        r#"exec "$0" run -- sh -c 'echo $(readlink /proc/$$/fd/0 /proc/$$/fd/1) >&2' <&- >&-"#,
        BIN,
    ])
    .env_clear()
    .env("PATH", "/usr/local/bin:/usr/bin:/bin")
    .env("HOME", &env.home)
    .env("RUNWS_ROOT", &env.root);
    let out = Out::from(sh.output().unwrap());
    out.ok();
    assert_eq!(out.stderr, "/dev/null /dev/null\n", "{out:?}");
}

#[test]
fn a_closed_pipe_is_an_error_for_runws_and_sigpipe_for_the_command() {
    let env = Env::new();
    env.sh("one", "true").ok();
    // runws writes into a pipe nobody reads: it must not die of SIGPIPE.
    let (r, w) = nix::unistd::pipe().unwrap();
    drop(r);
    let status = env.cmd(&["ls"]).stdout(std::process::Stdio::from(w)).status().unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}");
    // The command gets SIGPIPE's default back: `yes` dies of it silently
    // instead of reporting a write error.
    let out = env.sh("two", "yes | head -n 1");
    out.ok().stdout_has("y");
    assert!(!out.stderr.contains("Broken pipe") && !out.stderr.contains("write error"), "{out:?}");
}
