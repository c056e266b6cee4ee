//! The reaper on a crowded host: it reads the process table once per reap,
//! so what it decides must not depend on how many unrelated processes run,
//! and a run whose recorded runws is one of them (alive, started when the
//! manifest says) is never taken over.

use std::process::{Child, Command, Stdio};

use crate::harness::*;

/// Idle processes, killed when dropped.
struct Crowd(Vec<Child>);

impl Crowd {
    fn start(n: usize) -> Crowd {
        let crowd = (0..n)
            .map(|_| {
                Command::new("sleep")
                    .arg("300")
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap()
            })
            .collect();
        Crowd(crowd)
    }
}

impl Drop for Crowd {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn start_time(pid: i32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    s.rsplit(')').next().unwrap().split_whitespace().nth(19).unwrap().parse().unwrap()
}

/// With 300 unrelated processes on the host, a reap reclaims the scratch
/// of every finished run, as it does on a quiet host; a run whose manifest
/// says it is running, past its lease, with a runws that is one of those
/// processes (pid and start time match) is refused and keeps its scratch,
/// and that process is not signalled.
#[test]
fn a_crowded_host_changes_nothing_a_reap_decides() {
    let env = Env::new();
    for i in 0..8 {
        env.sh(&format!("r{i}"), "mkdir -p $TMPDIR/a/b && touch $TMPDIR/a/b/f $HOME/x").ok();
    }
    env.sh("held", "touch $TMPDIR/f $HOME/x").ok();
    let crowd = Crowd::start(300);
    let last = crowd.0.last().unwrap().id() as i32;
    let path = env.run_dir("held").join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    m["status"] = "running".into();
    m["finished_at"] = serde_json::Value::Null;
    m["exit_code"] = serde_json::Value::Null;
    m["lease_until"] = "2020-01-01T00:00:00.000Z".into();
    m["runws"]["pid"] = last.into();
    m["runws"]["start_time"] = start_time(last).into();
    std::fs::write(&path, serde_json::to_vec_pretty(&m).unwrap()).unwrap();

    let out = env.run(&["reap", "--json"]);
    out.ok();
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let action = |id: &str| {
        v.as_array().unwrap().iter().find(|r| r["run_id"] == id).map(|r| r["action"].clone()).unwrap()
    };
    for i in 0..8 {
        let id = format!("r{i}");
        assert_eq!(action(&id), "reaped", "{}", out.stdout);
        assert!(!env.run_dir(&id).join("tmp").exists());
        assert!(!env.run_dir(&id).join("home").exists());
        assert_eq!(env.manifest(&id)["reap"]["completed"], true);
    }
    assert_eq!(action("held"), "refused", "{}", out.stdout);
    assert!(env.run_dir("held").join("tmp/f").exists(), "the held run's scratch was removed");
    assert_eq!(env.manifest("held")["status"], "running");
    assert!(crowd.0.iter().all(|c| alive(c.id() as i32)), "an unrelated process was signalled");
    drop(crowd);
}
