//! The index of runs (ROOT/runs.index) as a command outside a sandbox can
//! leave it (it writes ROOT as the same user): a fifo, a lock held on it,
//! a huge line. The index is a hint: none of these may make `ls`, `show
//! last` or `run` hang; every run is still listed.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::harness::*;

/// Runs `runws ARGS` for at most `secs`; a hang is a failure, not a stuck suite.
fn bounded(env: &Env, secs: u64, args: &[&str]) -> Out {
    let mut child = env.cmd(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(secs);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            child.wait().unwrap();
            panic!("`runws {}` hung (still running after {secs} s)", args.join(" "));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Out::from(child.wait_with_output().unwrap())
}

fn listed(out: &Out) -> Vec<String> {
    out.stdout
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["run_id"].as_str().unwrap().to_string()
        })
        .collect()
}

#[test]
fn a_fifo_as_the_index_hangs_neither_ls_nor_show_last_nor_run() {
    let env = Env::new();
    env.run(&["run", "--run-id", "a1", "--", "true"]).ok();
    let index = env.root.join("runs.index");
    std::fs::remove_file(&index).unwrap();
    nix::unistd::mkfifo(&index, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    assert_eq!(listed(bounded(&env, 30, &["ls", "--oldest-first", "--json-lines"]).ok()), ["a1"]);
    bounded(&env, 30, &["show", "last", "--json"]).ok().stdout_has("a1");
    bounded(&env, 30, &["run", "--run-id", "a2", "--", "true"]).ok();
    assert_eq!(listed(bounded(&env, 30, &["ls", "--oldest-first", "--json-lines"]).ok()), ["a1", "a2"]);
}

#[test]
fn a_lock_held_on_the_index_does_not_hang_ls() {
    let env = Env::new();
    env.run(&["run", "--run-id", "a1", "--", "true"]).ok();
    // A run made while the lock is held appends its line alone (no stamp):
    // the index is behind, so the next reader catches up.
    let index = env.root.join("runs.index");
    let held = std::fs::OpenOptions::new().read(true).open(&index).unwrap();
    rustix::fs::flock(&held, rustix::fs::FlockOperation::LockExclusive).unwrap();
    bounded(&env, 30, &["run", "--run-id", "a2", "--", "true"]).ok();
    assert_eq!(listed(bounded(&env, 30, &["ls", "--oldest-first", "--json-lines"]).ok()), ["a1", "a2"]);
    bounded(&env, 30, &["show", "last", "--json"]).ok().stdout_has("a2");
    drop(held);
}

#[test]
fn an_index_ending_in_a_huge_unterminated_line_does_not_hang_ls() {
    let env = Env::new();
    env.run(&["run", "--run-id", "a1", "--", "true"]).ok();
    env.run(&["run", "--run-id", "a2", "--", "true"]).ok();
    // 256 MiB with no newline after the real lines (sparse: costs no disk).
    let index = env.root.join("runs.index");
    let f = std::fs::OpenOptions::new().write(true).open(&index).unwrap();
    f.set_len(256 << 20).unwrap();
    drop(f);
    assert_eq!(listed(bounded(&env, 60, &["ls", "--oldest-first", "--json-lines"]).ok()), ["a1", "a2"]);
    bounded(&env, 60, &["show", "last", "--json"]).ok().stdout_has("a2");
}

/// A command outside a sandbox writes ROOT as its user: it can leave an
/// index that omits a run (its own) and ends in a stamp of `runs/` as it is
/// now. The stamp is not a secret, so it matches, and every later run
/// carries it forward: `ls` and `show last` would skip that run for good
/// while its directory and manifest stay in `runs/` (before the index, `ls`
/// listed every directory there).
#[test]
fn an_index_forged_with_a_current_stamp_does_not_hide_a_run() {
    use std::os::unix::fs::MetadataExt;
    let env = Env::new();
    env.run(&["run", "--run-id", "a1", "--", "true"]).ok();
    env.run(&["run", "--run-id", "a2", "--", "true"]).ok();
    let st = std::fs::metadata(env.root.join("runs")).unwrap();
    let stamp = format!(
        "stamp {} {} {}.{:09} {}.{:09} {}\n",
        st.dev(),
        st.ino(),
        st.ctime(),
        st.ctime_nsec(),
        st.mtime(),
        st.mtime_nsec(),
        st.nlink()
    );
    std::fs::write(env.root.join("runs.index"), format!("run a1 - -\n{stamp}")).unwrap();
    // A later run chains the forged stamp forward.
    env.run(&["run", "--run-id", "a3", "--", "true"]).ok();
    let out = bounded(&env, 30, &["ls", "--oldest-first", "--json-lines"]);
    assert_eq!(listed(out.ok()), ["a1", "a2", "a3"]);
}
