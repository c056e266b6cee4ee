//! The file store across processes: children of this test binary contend
//! for one key and some are killed with SIGKILL while they work (mostly
//! inside acquire, where they spend their time). No token is issued twice,
//! holds never overlap, and the next token is higher than any seen.
//!
//! A child is this same test executable running only [`child_worker`], told
//! by `RUNWS_STORE_WORKER` where the store is and where to log.

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use super::Rng;
use crate::store::open;

const WORKER_ENV: &str = "RUNWS_STORE_WORKER";
const KEY: &str = "nightly-report/2026-11-30";
/// Long enough that a live child never outlasts it; a killed holder's lease
/// blocks the others this long.
const TTL: Duration = Duration::from_secs(1);
/// Children work until this file appears beside their logs.
const STOP: &str = "stop";

fn now_ns() -> u128 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_nanos()
}

/// Does nothing in a normal test run; in a child it is the worker.
#[test]
fn child_worker() {
    let Ok(spec) = std::env::var(WORKER_ENV) else {
        return;
    };
    let (url, log) = spec.split_once('\n').unwrap();
    let stop = std::path::Path::new(log).with_file_name(STOP);
    let mut store = open(url).unwrap();
    let mut log = std::fs::OpenOptions::new().append(true).create(true).open(log).unwrap();
    let holder = format!("child:{}", std::process::id());
    let mut rng = Rng::new(u64::from(std::process::id()));
    while !stop.exists() {
        let lease = store.acquire(KEY, &holder, TTL, Duration::from_secs(60)).unwrap();
        // One write per line, so a kill never leaves half a line.
        log.write_all(format!("G {} {}\n", lease.token, now_ns()).as_bytes()).unwrap();
        std::thread::sleep(rng.millis(2));
        log.write_all(format!("R {} {}\n", lease.token, now_ns()).as_bytes()).unwrap();
        store.release(KEY, &holder).unwrap();
    }
}

fn spawn(url: &str, log: &std::path::Path) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "store::tests::process::child_worker", "--test-threads=1", "--quiet"])
        .env(WORKER_ENV, format!("{url}\n{}", log.display()))
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

#[test]
fn file_store_killed_processes_never_lower_a_token() {
    let tmp = tempfile::tempdir().unwrap();
    let url = format!("file:{}", tmp.path().join("store").display());
    let mut rng = Rng::new(7);
    let mut children: Vec<(Child, std::path::PathBuf)> = (0..4)
        .map(|i| {
            let log = tmp.path().join(format!("child-{i}.log"));
            (spawn(&url, &log), log)
        })
        .collect();
    // Kill three children at random moments, starting a fresh one for each.
    let mut killed = 0;
    for i in 0..3 {
        std::thread::sleep(Duration::from_millis(150) + rng.millis(250));
        let victim = rng.below(children.len() as u64) as usize;
        let (child, _) = &mut children[victim];
        if child.try_wait().unwrap().is_none() {
            child.kill().unwrap();
            killed += 1;
        }
        let log = tmp.path().join(format!("late-{i}.log"));
        children.push((spawn(&url, &log), log));
    }
    std::thread::sleep(Duration::from_millis(300));
    std::fs::write(tmp.path().join(STOP), b"").unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut logs = Vec::new();
    for (mut child, log) in children {
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                let was_killed = std::os::unix::process::ExitStatusExt::signal(&status) == Some(9);
                assert!(status.success() || was_killed, "a child failed: {status}");
                break;
            }
            assert!(Instant::now() < deadline, "children did not finish");
            std::thread::sleep(Duration::from_millis(20));
        }
        logs.push(std::fs::read_to_string(log).unwrap_or_default());
    }
    assert!(killed > 0, "no child was killed while it worked");

    // token -> (granted-seen-at, released-at)
    let mut holds: std::collections::BTreeMap<u64, (u128, Option<u128>)> = Default::default();
    for line in logs.iter().flat_map(|l| l.lines()) {
        let mut parts = line.split(' ');
        let (kind, token, at) = (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap());
        let (token, at): (u64, u128) = (token.parse().unwrap(), at.parse().unwrap());
        match kind {
            "G" => assert!(holds.insert(token, (at, None)).is_none(), "token {token} was issued twice"),
            _ => holds.get_mut(&token).unwrap().1 = Some(at),
        }
    }
    let max = *holds.keys().last().unwrap();
    assert!(holds.len() >= 20, "too little work was done: {}", holds.len());
    let ordered: Vec<_> = holds.iter().collect();
    for w in ordered.windows(2) {
        let ((_, (_, released)), (next, (granted, _))) = (w[0], w[1]);
        if let Some(released) = released {
            assert!(released <= granted, "token {next} was granted while its predecessor was held");
        }
    }

    let mut store = open(&url).unwrap();
    let highest = store.show(KEY).unwrap().token;
    assert!(highest >= max, "the store forgot token {max} (it says {highest})");
    let next = store.acquire(KEY, "parent", TTL, Duration::from_secs(10)).unwrap().token;
    assert!(next > highest && next > max, "token {next} after {highest}");
}
