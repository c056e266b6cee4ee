//! Long operations say what they are doing on a terminal, and nothing
//! anywhere else: `seal`, `restore` and `reap` under a pseudo-terminal
//! (`script`), and with stderr a pipe.

use std::process::Command;

use crate::harness::*;

/// `runws ARGS` with stdin, stdout and stderr on a pseudo-terminal; all it
/// wrote there.
fn on_a_terminal(env: &Env, args: &[&str]) -> String {
    let template = env.cmd(&[]);
    let mut line = shell_quote(BIN);
    for a in args {
        line.push(' ');
        line.push_str(&shell_quote(a));
    }
    let mut c = Command::new("script");
    c.args(["-qec", &line, "/dev/null"]).env_clear().current_dir(env.tmp.path());
    for (k, v) in template.get_envs() {
        if let Some(v) = v {
            c.env(k, v);
        }
    }
    let out = c.output().expect("run script");
    assert!(out.status.success(), "{line}: {}", String::from_utf8_lossy(&out.stdout));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

#[test]
fn seal_restore_and_reap_show_progress_on_a_terminal_only() {
    let env = Env::new();
    env.sh("p1", "for i in $(seq 200); do echo $i > f$i; done").ok();
    let shown = on_a_terminal(&env, &["seal", "p1"]);
    assert!(shown.contains("runws: packing `"), "no progress on the terminal:\n{shown}");
    assert!(shown.contains(" files"), "{shown}");
    // Cleared once done: the last line is the seal's own report.
    assert!(shown.contains("\r\x1b[K"), "{shown:?}");
    let archive = env.root.join("archive/sh/p1.tar.zst");
    assert!(archive.exists());
    let shown = on_a_terminal(
        &env,
        &["restore", archive.to_str().unwrap(), "--to", env.path("back").to_str().unwrap()],
    );
    assert!(shown.contains("runws: restoring `"), "{shown}");
    env.sh("p2", "true").ok();
    let shown = on_a_terminal(&env, &["reap", "--dry-run"]);
    assert!(shown.contains("runws: looking at runs: ") && shown.contains("/2 runs"), "{shown}");

    // stderr a pipe (a cron log, CI): not a byte of it.
    env.sh("p3", "for i in $(seq 200); do echo $i > f$i; done").ok();
    let sealed = env.run(&["seal", "p3"]);
    sealed.ok();
    for quiet in [sealed, env.run(&["reap", "--dry-run"])] {
        assert!(!quiet.stderr.contains('\r') && !quiet.stderr.contains("packing"), "{}", quiet.stderr);
        assert!(!quiet.stderr.contains("looking at runs"), "{}", quiet.stderr);
    }
}
