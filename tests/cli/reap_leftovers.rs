//! What runws processes killed half-way leave behind (a seal's temp
//! archive, a restore's staging directory, a run directory without a
//! manifest, a `put`'s temp file) is listed by `reap --dry-run` and removed
//! by `reap`, and what a live process is still writing is never touched.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::harness::*;

/// Incompressible bytes, so sealing and restoring them takes a while.
fn big_file(path: &Path, bytes: usize) {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut v = Vec::with_capacity(bytes);
    while v.len() < bytes {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    std::fs::write(path, v).unwrap();
}

fn quiet(env: &Env, args: &[&str]) -> Child {
    env.cmd(args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap()
}

/// True when some process holds the `flock` of the file at `path`: a
/// writer creates its temp file and then locks it, and a process stopped
/// between the two holds nothing yet (the writer then finds its file
/// removed and takes a new name, which is not what this test looks at).
fn locked(path: &Path) -> bool {
    let Ok(f) = std::fs::File::open(path) else { return false };
    match nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock) {
        Ok(_unlocked_on_drop) => false,
        Err((_, e)) => e == nix::errno::Errno::EWOULDBLOCK,
    }
}

/// The names in `dir` that end with `suffix` and whose writer holds them.
fn held_with_suffix(dir: &Path, suffix: &str) -> bool {
    names_in(dir).iter().any(|n| n.ends_with(suffix) && locked(&dir.join(n)))
}

fn names_in(dir: &Path) -> Vec<String> {
    match std::fs::read_dir(dir) {
        Ok(rd) => rd.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect(),
        Err(_) => Vec::new(),
    }
}

/// Every leftover of the four kinds now on disk, by kind.
#[derive(Debug, Default, PartialEq)]
struct Leftovers {
    partials: Vec<String>,
    stagings: Vec<String>,
    no_manifest: Vec<String>,
    put_temps: Vec<String>,
}

impl Leftovers {
    fn scan(env: &Env, restored: &Path) -> Leftovers {
        let mut l = Leftovers::default();
        let crash = env.root.join("archive/crash");
        for d in names_in(&crash) {
            for n in names_in(&crash.join(&d)) {
                if n.ends_with(".partial") {
                    l.partials.push(format!("{d}/{n}"));
                }
            }
        }
        l.stagings = names_in(restored).into_iter().filter(|n| n.contains(".restore-")).collect();
        for id in env.run_ids() {
            let dir = env.run_dir(&id);
            if !dir.join("manifest.json").exists() {
                l.no_manifest.push(id.clone());
            }
            for n in names_in(&dir.join("outputs")) {
                if n.starts_with('.') && n.ends_with(".tmp") {
                    l.put_temps.push(format!("{id}/{n}"));
                }
            }
        }
        for v in [&mut l.partials, &mut l.stagings, &mut l.no_manifest, &mut l.put_temps] {
            v.sort();
        }
        l
    }

    fn is_empty(&self) -> bool {
        self == &Leftovers::default()
    }
}

struct Setup {
    env: Env,
    big: PathBuf,
    archive: PathBuf,
    restored: PathBuf,
}

fn setup() -> Setup {
    let env = Env::new();
    let big = env.path("big.bin");
    big_file(&big, 8 << 20);
    env.run(&["run", "--run-id", "src", "--input", big.to_str().unwrap(), "--", "true"]).ok();
    // A smaller archive to restore: its check before extracting is short.
    let small = env.path("small.bin");
    big_file(&small, 2 << 20);
    env.run(&["run", "--run-id", "small", "--input", small.to_str().unwrap(), "--", "true"]).ok();
    let sealed = env.path("sealed");
    std::fs::create_dir_all(&sealed).unwrap();
    env.run(&["seal", "small", "--to", sealed.to_str().unwrap()]).ok();
    let archive = sealed.join("small.tar.zst");
    assert!(archive.exists());
    let restored = env.path("restored");
    std::fs::create_dir_all(&restored).unwrap();
    Setup { env, big, archive, restored }
}

/// A run whose command starts `runws put` of BIG in the background and
/// waits for it: returns runws and the put's pid once it started.
fn put_in_a_run(s: &Setup, id: &str) -> (Child, i32) {
    let runws = quiet(
        &s.env,
        &[
            "run",
            "--run-id",
            id,
            "--env",
            &format!("BIG={}", s.big.display()),
            "--",
            "sh",
            "-c",
            "runws put big \"$BIG\" & echo $! > \"$RUNWS_DIR/work/put.pid\"; wait",
        ],
    );
    let pid_file = s.env.run_dir(id).join("work/put.pid");
    assert!(
        wait_until(Duration::from_secs(10), || std::fs::read_to_string(&pid_file)
            .is_ok_and(|t| t.ends_with('\n'))),
        "the put of `{id}` never started"
    );
    let pid = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
    (runws, pid)
}

fn kill9(pid: i32) {
    let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
}

/// Twenty rounds of `seal`, `run --input BIG`, `restore` and `put`, each
/// killed with SIGKILL after a longer delay than the round before; then
/// `reap --dry-run` lists every kind of leftover and changes nothing, and
/// `reap` removes them all.
#[test]
fn leftovers_of_killed_runws_processes_are_listed_and_reaped() {
    let s = setup();
    let env = &s.env;
    let big = s.big.to_str().unwrap();
    let archive = s.archive.to_str().unwrap();
    for i in 0..22u64 {
        let delay = Duration::from_millis(2 + i * i / 2);
        let to = env.root.join(format!("archive/crash/{i}"));
        std::fs::create_dir_all(&to).unwrap();
        let started = Instant::now();
        let mut seal = quiet(env, &["seal", "src", "--to", to.to_str().unwrap()]);
        let mut run = quiet(env, &["run", "--run-id", &format!("in-{i}"), "--input", big, "--", "true"]);
        let target = s.restored.join(format!("r{i}"));
        let mut restore = quiet(env, &["restore", archive, "--to", target.to_str().unwrap()]);
        let (mut putter, put) = put_in_a_run(&s, &format!("p-{i}"));
        std::thread::sleep(delay.saturating_sub(started.elapsed()));
        for c in [&mut seal, &mut run] {
            let _ = c.kill();
        }
        kill9(put);
        // A restore checks the whole archive before it makes its staging
        // directory: from then on, the same increasing delays.
        let staging = format!(".r{i}.restore-");
        wait_until(Duration::from_secs(10), || {
            restore.try_wait().unwrap().is_some()
                || names_in(&s.restored).iter().any(|n| n.starts_with(&staging))
        });
        std::thread::sleep(Duration::from_millis(i / 2));
        let _ = restore.kill();
        for c in [&mut seal, &mut run, &mut restore, &mut putter] {
            c.wait().unwrap();
        }
    }
    let before = Leftovers::scan(env, &s.restored);
    assert!(!before.partials.is_empty(), "no seal was killed half-way: {before:?}");
    assert!(!before.stagings.is_empty(), "no restore was killed half-way: {before:?}");
    assert!(!before.no_manifest.is_empty(), "no run was killed half-way: {before:?}");
    assert!(!before.put_temps.is_empty(), "no put was killed half-way: {before:?}");

    let dry = env.run(&["reap", "--dry-run"]);
    dry.ok();
    for p in &before.partials {
        dry.stdout_has(&format!(
            "would remove the seal's temp archive `{}",
            env.root.join("archive/crash").join(p).display()
        ));
    }
    for n in &before.stagings {
        dry.stdout_has(&format!("would remove the staging directory `{}", s.restored.join(n).display()));
    }
    for id in &before.no_manifest {
        dry.stdout_has(&format!("would-remove {id}  (no-manifest)"));
    }
    for t in &before.put_temps {
        let (id, name) = t.split_once('/').unwrap();
        dry.stdout_has(&format!(
            "would remove the temp file `{}",
            env.run_dir(id).join("outputs").join(name).display()
        ));
    }
    assert_eq!(Leftovers::scan(env, &s.restored), before, "the dry run changed something");

    let out = env.run(&["reap", "--json"]);
    out.ok();
    assert!(!out.stdout.contains("\"failed\""), "{}", out.stdout);
    let after = Leftovers::scan(env, &s.restored);
    assert!(after.is_empty(), "left after the reap: {after:?}\n{}", out.stdout);
    assert!(names_in(&env.root.join("restores")).is_empty(), "restore records were kept");
    // A second reap finds nothing left to do.
    let again = env.run(&["reap", "--dry-run"]);
    again.ok();
    assert!(!again.stdout.contains("would remove"), "{}", again.stdout);
}

fn stop(pid: u32) {
    kill(Pid::from_raw(pid as i32), Signal::SIGSTOP).unwrap();
}

fn cont(pid: u32) {
    kill(Pid::from_raw(pid as i32), Signal::SIGCONT).unwrap();
}

/// A seal, a restore, a run copying its inputs and a `put`, each stopped
/// while its temp file (or directory) exists: `reap` leaves all of them,
/// and each completes when it is continued.
#[test]
fn reap_never_touches_what_a_live_process_is_writing() {
    let s = setup();
    let env = &s.env;
    let big = s.big.to_str().unwrap();
    let to = env.root.join("archive/live");
    std::fs::create_dir_all(&to).unwrap();
    let mut seal = quiet(env, &["seal", "src", "--to", to.to_str().unwrap()]);
    assert!(wait_until(Duration::from_secs(20), || held_with_suffix(&to, ".partial")));
    stop(seal.id());
    let target = s.restored.join("live");
    let mut restore = quiet(env, &["restore", s.archive.to_str().unwrap(), "--to", target.to_str().unwrap()]);
    assert!(wait_until(Duration::from_secs(20), || names_in(&s.restored)
        .iter()
        .any(|n| n.contains(".restore-"))));
    stop(restore.id());
    let mut run = quiet(env, &["run", "--run-id", "copying", "--input", big, "--", "true"]);
    let inputs = env.run_dir("copying").join("inputs");
    assert!(wait_until(Duration::from_secs(20), || !names_in(&inputs).is_empty()));
    stop(run.id());
    let (mut putter, put) = put_in_a_run(&s, "putting");
    let outputs = env.run_dir("putting").join("outputs");
    assert!(wait_until(Duration::from_secs(20), || held_with_suffix(&outputs, ".tmp")));
    stop(put as u32);

    let before = Leftovers::scan(env, &s.restored);
    for args in [&["reap", "--dry-run"][..], &["reap"][..]] {
        let out = env.run(args);
        out.ok();
        assert!(
            !out.stdout.contains("would remove the") && !out.stdout.contains("removed the"),
            "{}",
            out.stdout
        );
        assert!(!out.stdout.contains("copying") || out.stdout.contains("being made"), "{}", out.stdout);
    }
    assert_eq!(Leftovers::scan(env, &s.restored), before);

    for pid in [seal.id(), restore.id(), run.id(), put as u32] {
        cont(pid);
    }
    for (what, c) in
        [("seal", &mut seal), ("restore", &mut restore), ("run", &mut run), ("put's run", &mut putter)]
    {
        assert_eq!(c.wait().unwrap().code(), Some(0), "the {what} failed after the reap");
    }
    assert_eq!(
        std::fs::read(target.join("inputs/small.bin")).unwrap(),
        std::fs::read(s.env.path("small.bin")).unwrap()
    );
    assert_eq!(env.manifest("copying")["status"], "succeeded");
    assert_eq!(env.manifest("putting")["outputs"][0]["name"], "big");
    assert!(Leftovers::scan(env, &s.restored).is_empty());
}
