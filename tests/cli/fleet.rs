//! The fleet view of a PostgreSQL store: every run's start and end are
//! recorded there, `ls --fleet` lists any host's runs, `show` answers for a
//! run this ROOT does not hold, and a record the store could not take waits
//! in ROOT's queue until the next runws sends it.

use std::process::Command;

use crate::harness::*;

/// The PostgreSQL URL, or `None` (after saying so) when no server was named.
fn pg() -> Option<String> {
    stores().into_iter().flatten().next()
}

/// A job name no other test uses: the test database is shared.
fn job(tag: &str) -> String {
    format!("fleet-{tag}-{}", uuid::Uuid::now_v7().simple())
}

fn fleet_json(env: &Env, url: &str, args: &[&str]) -> Vec<serde_json::Value> {
    let mut a = vec!["--store", url, "ls", "--fleet", "--json"];
    a.extend_from_slice(args);
    let out = env.run(&a);
    out.ok();
    serde_json::from_str::<Vec<serde_json::Value>>(&out.stdout).unwrap()
}

#[test]
fn runs_are_recorded_listed_newest_first_and_shown_from_elsewhere() {
    let Some(url) = pg() else { return };
    let env = Env::new();
    let j = job("list");
    env.run(&[
        "--store",
        &url,
        "run",
        "--run-id",
        &format!("{j}-1"),
        "--job",
        &j,
        "--",
        "sh",
        "-c",
        "echo one | runws put a.txt",
    ])
    .ok();
    env.run(&[
        "--store",
        &url,
        "run",
        "--run-id",
        &format!("{j}-2"),
        "--job",
        &j,
        "--",
        "sh",
        "-c",
        "exit 3",
    ])
    .code(3);
    let runs = fleet_json(&env, &url, &["--job", &j]);
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(runs[0]["run_id"], format!("{j}-2"), "newest first");
    assert_eq!(runs[0]["status"], "failed");
    assert_eq!(runs[0]["exit_code"], 3);
    assert_eq!(runs[1]["status"], "succeeded");
    let m = env.manifest(&format!("{j}-1"));
    assert_eq!(runs[1]["outputs"][0]["sha256"], m["outputs"][0]["sha256"]);
    assert_eq!(runs[1]["input_fingerprint"], m["input_fingerprint"]);
    assert_eq!(runs[1]["host"], m["host"]);
    assert_eq!(fleet_json(&env, &url, &["--job", &j, "--limit", "1"]).len(), 1);
    assert_eq!(fleet_json(&env, &url, &["--job", &j, "--since", "1h"]).len(), 2);
    assert_eq!(fleet_json(&env, &url, &["--job", &j, "--host", "no-such-host"]).len(), 0);
    // The table, and `show` from a ROOT that does not hold the run.
    env.run(&["--store", &url, "ls", "--fleet", "--job", &j]).ok().stdout_has(&format!("{j}-2"));
    let elsewhere = Env::new();
    elsewhere
        .run(&["--store", &url, "show", &format!("{j}-1")])
        .ok()
        .stdout_has("from the fleet view")
        .stdout_has("a.txt");
    // Without a PostgreSQL store there is no fleet view; a run unknown
    // everywhere is still "no run".
    env.run(&["ls", "--fleet"]).code(125).one_line_error().stderr_has("PostgreSQL store");
    elsewhere.run(&["--store", &url, "show", "no-such-run-anywhere"]).code(125);
}

/// Another host's run (a new UTS namespace with its own host name, as
/// root): listed by host, shown with where its files are.
#[test]
fn another_hosts_run_is_listed_by_host() {
    let Some(url) = pg() else { return };
    if !is_root() {
        eprintln!("skipped: a host name of its own needs root (a new UTS namespace)");
        return;
    }
    let env = Env::new();
    let j = job("host");
    let host = format!("h{}", &j[j.len() - 12..]);
    let out = Command::new("unshare")
        .args(["--uts", "sh", "-c", &format!("hostname {host} && exec \"$0\" \"$@\""), crate::harness::BIN])
        .args(["--store", &url, "--root", env.root.to_str().unwrap(), "run", "--job", &j, "--", "true"])
        .env("HOME", &env.home)
        .output()
        .unwrap();
    Out::from(out).ok();
    let runs = fleet_json(&env, &url, &["--host", &host]);
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["job"], j);
}

/// A store that is down when a run ends: the run is not held up or failed,
/// its record waits in ROOT's queue, and the next runws with the store sends
/// it; sending twice, or a running record after the end, changes nothing.
#[test]
fn a_record_the_store_cannot_take_waits_and_is_sent_once() {
    let Some(url) = pg() else { return };
    let env = Env::new();
    let j = job("queue");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let down = format!("postgres://runws:x@127.0.0.1:{closed}/runws_test");
    let id = format!("{j}-1");
    env.run(&["--store", &down, "run", "--run-id", &id, "--job", &j, "--", "true"])
        .ok()
        .stderr_has("waits in");
    let queued = env.root.join("fleet-queue").join(format!("{id}.json"));
    assert!(queued.exists());
    let saved = std::fs::read(&queued).unwrap();
    // The next runws with the store sends it.
    let runs = fleet_json(&env, &url, &["--job", &j]);
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["status"], "succeeded");
    assert!(!queued.exists());
    // Again, as a start: an ended record stays ended.
    let mut start: serde_json::Value = serde_json::from_slice(&saved).unwrap();
    start["status"] = "running".into();
    start["exit_code"] = serde_json::Value::Null;
    std::fs::write(&queued, serde_json::to_vec(&start).unwrap()).unwrap();
    // A file in the queue that is not a run's record is left alone.
    std::fs::write(env.root.join("fleet-queue").join("not a run.json"), b"{}").unwrap();
    env.run(&["--store", &url, "reap"]).ok();
    assert!(!queued.exists(), "reap sent what waited");
    let runs = fleet_json(&env, &url, &["--job", &j]);
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0]["status"], "succeeded");
    assert!(env.root.join("fleet-queue").join("not a run.json").exists());
}

/// A store that takes the connection and never answers holds a run's end
/// up for a bounded time, not forever: the record is queued and runws
/// exits with the command's status.
#[test]
fn a_store_that_never_answers_does_not_hold_the_run() {
    if pg().is_none() {
        return;
    }
    let env = Env::new();
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = silent.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in silent.incoming() {
            held.push(s);
        }
    });
    let url = format!("postgres://runws:x@127.0.0.1:{port}/runws_test?sslmode=disable");
    let mut child = env
        .cmd(&["--store", &url, "run", "--run-id", "silent", "--", "sh", "-c", "exit 4"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut status = None;
    let ended = wait_until(std::time::Duration::from_secs(60), || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    if !ended {
        let _ = child.kill();
    }
    assert!(ended, "runws waited on a store that never answers");
    assert_eq!(status.unwrap().code(), Some(4));
    assert!(env.root.join("fleet-queue/silent.json").exists());
    // A lease command gives up too, saying why (the URL's connect_timeout
    // of 1 s bounds it to 2 s).
    let quick = format!("{url}&connect_timeout=1");
    env.run(&["--store", &quick, "lease", "show", "k"])
        .code(125)
        .one_line_error()
        .stderr_has("did not answer");
}

/// A record waiting in the queue for a run (as a plain run's command may
/// write one) with the id given to `show`, job `j`.
fn queue_record(env: &Env, id: &str, j: &str, started_at: &str) {
    let dir = env.root.join("fleet-queue");
    std::fs::create_dir_all(&dir).unwrap();
    let record = serde_json::json!({
        "run_id": id, "host": "elsewhere", "root": "/r", "job": j, "status": "succeeded",
        "started_at": started_at, "exit_code": 0, "input_fingerprint": "x",
    });
    std::fs::write(dir.join(format!("{id}.json")), serde_json::to_vec(&record).unwrap()).unwrap();
}

/// `show ID` from the fleet view is the run of that id even when other
/// ids start with it, and `_` in what is given matches only `_`.
#[test]
fn show_from_the_fleet_view_takes_the_exact_id_and_no_wildcard() {
    let Some(url) = pg() else { return };
    let env = Env::new();
    let j = job("exact");
    queue_record(&env, &format!("{j}-1"), &j, "2026-01-01T00:00:00.000Z");
    for n in 0..25 {
        queue_record(&env, &format!("{j}-1{n}"), &j, "2026-01-02T00:00:00.000Z");
    }
    queue_record(&env, &format!("{j}-2"), &j, "2026-01-01T00:00:00.000Z");
    assert_eq!(fleet_json(&env, &url, &["--job", &j]).len(), 27, "all sent");
    let elsewhere = Env::new();
    elsewhere
        .run(&["--store", &url, "show", &format!("{j}-1"), "--json"])
        .ok()
        .stdout_has(&format!("\"{j}-1\""));
    // `_` is not a wildcard: `X_2` names no run when only `X-2` exists.
    let under = format!("{}_2", j.replace('-', "_"));
    let out = elsewhere.run(&["--store", &url, "show", &under]);
    assert!(!out.stderr.contains("more than one") && out.stdout.is_empty(), "{}{}", out.stdout, out.stderr);
    out.code(125);
}

/// Files in the queue that are not runws's records, whatever they hold,
/// never hold back the records after them, and a huge one is not read.
#[test]
fn a_bad_file_in_the_queue_does_not_hold_the_others_back() {
    let Some(url) = pg() else { return };
    let env = Env::new();
    let j = job("poison");
    // Records the store refuses: a time it cannot read, a NUL in a text.
    for n in 0..40 {
        queue_record(&env, &format!("{j}-bad{n}"), &j, "not a time");
    }
    queue_record(&env, &format!("{j}-nul"), &format!("{j}\0x"), "2026-01-01T00:00:00.000Z");
    queue_record(&env, &format!("{j}-good"), &j, "2026-01-01T00:00:00.000Z");
    // A huge (sparse) file named as a run's record.
    let huge = std::fs::File::create(env.root.join("fleet-queue").join(format!("{j}-huge.json"))).unwrap();
    huge.set_len(2 << 30).unwrap();
    let began = std::time::Instant::now();
    let runs = fleet_json(&env, &url, &["--job", &j]);
    assert!(began.elapsed() < std::time::Duration::from_secs(5), "read the huge file: {:?}", began.elapsed());
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert_eq!(runs[0]["run_id"], format!("{j}-good"));
    assert!(env.root.join("fleet-queue").join(format!("{j}-bad0.json")).exists(), "left alone");
}

/// A plain run's command that plants a symlink where ROOT's queue goes
/// does not get a later runws to write there: the record is refused a place, and
/// runws says so.
#[test]
fn a_queue_planted_as_a_symlink_is_not_followed() {
    if pg().is_none() {
        return;
    }
    let env = Env::new();
    let elsewhere = env.path("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let down = format!("postgres://runws:x@127.0.0.1:{closed}/runws_test");
    // An earlier run's command leaves the link for a later runws.
    let plant = format!("ln -s {} \"$RUNWS_DIR/../../fleet-queue\"", elsewhere.display());
    env.run(&["run", "--run-id", "planter", "--", "sh", "-c", &plant]).ok();
    env.run(&["--store", &down, "run", "--run-id", "planted", "--", "true"])
        .ok()
        .stderr_has("cannot be queued");
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0, "runws wrote through the planted link");
}

#[test]
fn the_fleet_view_names_where_a_runs_archive_went() {
    let Some(url) = pg() else { return };
    let env = Env::new();
    let j = job("sealed");
    let id = format!("{j}-1");
    env.run(&["--store", &url, "run", "--run-id", &id, "--job", &j, "--seal", "--", "true"]).ok();
    let runs = fleet_json(&env, &url, &["--job", &j]);
    let archive = env.manifest(&id)["checkpoint"]["archive"].as_str().unwrap().to_string();
    assert!(archive.ends_with(&format!("{id}.tar.zst")));
    assert_eq!(runs[0]["archive"], archive, "{runs:?}");
    // A seal made later, by `runws seal`, is learnt too.
    let id2 = format!("{j}-2");
    env.run(&["--store", &url, "run", "--run-id", &id2, "--job", &j, "--", "true"]).ok();
    assert!(fleet_json(&env, &url, &["--job", &j])[0]["archive"].is_null());
    env.run(&["--store", &url, "seal", &id2]).ok();
    let archive2 = env.manifest(&id2)["checkpoint"]["archive"].as_str().unwrap().to_string();
    assert_eq!(fleet_json(&env, &url, &["--job", &j])[0]["archive"], archive2);
}

/// Statements straight to the fleet's table, as another host's runws (or a
/// host that went away) would have left it.
#[cfg(feature = "postgres")]
fn sql(url: &str, statement: &str, params: &[&(dyn postgres::types::ToSql + Sync)]) -> Vec<postgres::Row> {
    let mut c = postgres::Client::connect(url, postgres::NoTls).expect("connect to the test server");
    c.query(statement, params).expect(statement)
}

#[cfg(feature = "postgres")]
fn plant(url: &str, host: &str, run_id: &str, job: &str, lease_until: &str) {
    let record = serde_json::json!({
        "run_id": run_id, "host": host, "root": "/elsewhere", "job": job, "status": "running",
        "started_at": "2026-01-01T00:00:00.000Z", "input_fingerprint": "sha256:0", "outputs": [],
        "lease_until": lease_until,
    })
    .to_string();
    sql(
        url,
        "INSERT INTO runws_runs_v1 (host, run_id, job, status, started_at, record) \
         VALUES ($1, $2, $3, 'running', now(), $4::text::jsonb)",
        &[&host, &run_id, &job, &record],
    );
}

#[cfg(feature = "postgres")]
#[test]
fn reap_marks_other_hosts_runs_whose_heartbeat_stopped_stale_and_nothing_else() {
    let Some(url) = pg() else { return };
    let env = Env::new();
    // The table exists once any runws used the store.
    env.run(&["--store", &url, "ls", "--fleet", "--limit", "1"]).ok();
    let j = job("stale");
    let far = format!("far-host-{}", uuid::Uuid::now_v7().simple());
    plant(&url, &far, &format!("{j}-gone"), &j, "2020-01-01T00:00:00.000Z");
    plant(&url, &far, &format!("{j}-live"), &j, "2999-01-01T00:00:00.000Z");
    plant(&url, &far, &format!("{j}-forged"), &j, "'; DROP TABLE x; --");
    // Of runws's form but no date: cast, it would fail the statement, and
    // with it every host's marking.
    plant(&url, &far, &format!("{j}-month13"), &j, "2024-13-45T00:00:00Z");
    plant(&url, &far, &format!("{j}-year0"), &j, "0000-01-01T00:00:00Z");
    let out = env.run(&["--store", &url, "reap"]);
    assert!(!out.stderr.contains("cannot mark"), "{}", out.stderr);
    out.ok().stderr_has(&format!("run {j}-gone on host {far}: its heartbeat stopped"));
    assert!(!out.stderr.contains(&format!("{j}-live")) && !out.stderr.contains(&format!("{j}-forged")));
    let runs = fleet_json(&env, &url, &["--job", &j]);
    let status = |id: &str| runs.iter().find(|r| r["run_id"] == id).unwrap()["status"].clone();
    assert_eq!(status(&format!("{j}-gone")), "stale");
    assert_eq!(status(&format!("{j}-live")), "running");
    assert_eq!(status(&format!("{j}-forged")), "running");
}

#[cfg(feature = "postgres")]
#[test]
fn reap_never_marks_this_hosts_runs_from_the_fleet_view() {
    let Some(url) = pg() else { return };
    let env = Env::new();
    env.run(&["--store", &url, "ls", "--fleet", "--limit", "1"]).ok();
    // This host's runs are its reaper's to judge, from their manifests.
    let j = job("own");
    let me = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap().trim().to_string();
    plant(&url, &me, &format!("{j}-mine"), &j, "2020-01-01T00:00:00.000Z");
    env.run(&["--store", &url, "reap"]).ok();
    assert_eq!(fleet_json(&env, &url, &["--job", &j])[0]["status"], "running");
}

#[cfg(feature = "postgres")]
#[test]
fn a_running_runs_heartbeat_keeps_it_live_and_revives_a_stale_mark() {
    let Some(url) = pg() else { return };
    let env = Env::new();
    let j = job("beat");
    let id = format!("{j}-1");
    let mut child = env
        .cmd(&[
            "--store",
            &url,
            "run",
            "--run-id",
            &id,
            "--job",
            &j,
            "--lease-ttl",
            "300ms",
            "--",
            "sleep",
            "2",
        ])
        .spawn()
        .unwrap();
    let seen = wait_until(std::time::Duration::from_secs(5), || {
        fleet_json(&env, &url, &["--job", &j]).first().is_some_and(|r| r["status"] == "running")
    });
    assert!(seen, "the start reached the view");
    let first = fleet_json(&env, &url, &["--job", &j]).remove(0)["lease_until"].as_str().unwrap().to_string();
    // Another host's reaper thought it gone: the next heartbeat says otherwise.
    sql(
        &url,
        "UPDATE runws_runs_v1 SET status = 'stale', record = jsonb_set(record, '{status}', '\"stale\"') WHERE run_id = $1",
        &[&id],
    );
    let revived = wait_until(std::time::Duration::from_secs(3), || {
        fleet_json(&env, &url, &["--job", &j]).first().is_some_and(|r| r["status"] == "running")
    });
    assert!(revived, "the heartbeat revived it");
    let r = fleet_json(&env, &url, &["--job", &j]).remove(0);
    let until = r["lease_until"].as_str().unwrap().to_string();
    assert!(until > first, "the heartbeat moved the lease on: {first} then {r}");
    assert!(child.wait().unwrap().success());
    let r = fleet_json(&env, &url, &["--job", &j]).remove(0);
    assert_eq!(r["status"], "succeeded");
    assert!(r.get("lease_until").is_none(), "an ended record holds no lease: {r}");
}

/// A run's command may leave a process that rewrites manifest.json after
/// runws recorded the end (outside a sandbox nothing stops it). A seal
/// after that names the archive in the fleet view and changes nothing else
/// of what runws sent: the run stays failed there.
#[test]
fn a_seal_after_a_rewritten_manifest_changes_only_the_archive_in_the_view() {
    let Some(url) = pg() else { return };
    let env = Env::new();
    let j = job("rewritten");
    let id = format!("{j}-1");
    env.run(&["--store", &url, "run", "--run-id", &id, "--job", &j, "--", "sh", "-c", "exit 3"]).code(3);
    let path = env.run_dir(&id).join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    m["status"] = "succeeded".into();
    m["exit_code"] = 0.into();
    std::fs::write(&path, serde_json::to_vec_pretty(&m).unwrap()).unwrap();
    env.run(&["--store", &url, "seal", &id]).ok();
    let r = fleet_json(&env, &url, &["--job", &j]).remove(0);
    assert_eq!((r["status"].as_str(), r["exit_code"].as_i64()), (Some("failed"), Some(3)), "{r}");
    assert!(r["archive"].as_str().is_some_and(|a| a.ends_with(&format!("{id}.tar.zst"))), "{r}");
}
