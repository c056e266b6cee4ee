//! Leases with fencing tokens and the sink that checks them, against the
//! embedded file store and a real PostgreSQL server.

use std::path::Path;
use std::time::Duration;

use crate::harness::*;

/// A key no other test (or earlier run against the same server) uses.
fn fresh_key(tag: &str) -> String {
    format!("{tag}-{}", uuid::Uuid::now_v7().simple())
}

fn with_store(env: &Env, store: &Option<String>, args: &[&str]) -> std::process::Command {
    let mut c = env.cmd(args);
    if let Some(url) = store {
        c.env("RUNWS_STORE", url);
    }
    c
}

/// `runws publish KEY [--fence N] [--to DIR]` with `bytes` on stdin.
fn publish(env: &Env, store: &Option<String>, key: &str, fence: u64, to: Option<&Path>, bytes: &[u8]) -> Out {
    let fence = fence.to_string();
    let mut args = vec!["publish", key, "-", "--fence", &fence, "-v"];
    let to = to.map(|d| d.display().to_string());
    if let Some(d) = &to {
        args.extend(["--to", d]);
    }
    let mut c = with_store(env, store, &args);
    c.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = c.spawn().unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    Out::from(child.wait_with_output().unwrap())
}

fn acquire(env: &Env, store: &Option<String>, key: &str, holder: &str, ttl: &str) -> u64 {
    let out = Out::from(
        with_store(env, store, &["lease", "acquire", key, "--holder", holder, "--ttl", ttl])
            .output()
            .unwrap(),
    );
    out.ok();
    out.stdout.trim().parse().unwrap()
}

/// Polls `lease show` until the lease on `key` has run out.
fn wait_expired(env: &Env, store: &Option<String>, key: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let out = Out::from(with_store(env, store, &["lease", "show", key, "--json"]).output().unwrap());
        out.ok();
        let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        if v["expired"] == true {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "the lease `{key}` never expired: {v}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What the sink holds for `key`: the file in `--to DIR`, else the store's
/// own sink read back through an idempotent publish of the expected bytes.
fn assert_published(
    env: &Env,
    store: &Option<String>,
    key: &str,
    to: Option<&Path>,
    fence: u64,
    bytes: &str,
) {
    match to {
        Some(dir) => {
            let name = std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .find(|n| !n.starts_with('.'))
                .unwrap();
            assert_eq!(std::fs::read_to_string(dir.join(name)).unwrap(), bytes);
        }
        None => {
            publish(env, store, key, fence, None, bytes.as_bytes()).ok().stderr_has("unchanged");
        }
    }
}

/// Kleppmann's scenario, both ways: A holds the lease, is paused past its
/// ttl, B takes the lease; A wakes and publishes with its old token, after
/// B has published or before: the sink refuses it either way, and B's
/// bytes are the ones that stay.
#[test]
fn a_paused_holder_is_fenced_off_at_the_sink() {
    let env = Env::new();
    for store in stores() {
        for b_first in [true, false] {
            let tag = format!("{}-{b_first}", store.is_some());
            let key = fresh_key("report");
            let flag = |n: &str| env.path(&format!("{n}-{tag}"));
            // Each store with each sink: its own, and a directory.
            let sink = flag("sink");
            let to = if b_first == store.is_some() { Some(sink.as_path()) } else { None };
            let target = to.map(|d| format!("--to '{}'", d.display())).unwrap_or_default();
            let script = format!(
                r#"echo $RUNWS_FENCE > '{afence}'; touch '{up}'
                   while [ ! -e '{go}' ]; do sleep 0.02; done
                   printf from-A | runws publish '{key}' {target}; echo $? > '{code}'"#,
                afence = flag("a.fence").display(),
                up = flag("a.up").display(),
                go = flag("go").display(),
                code = flag("a.code").display(),
            );
            let a_id = fresh_key("a");
            let a = with_store(
                &env,
                &store,
                &["run", "--run-id", &a_id, "--lease", &key, "--lease-ttl", "0.6", "--", "sh", "-c", &script],
            )
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
            wait_for(&flag("a.up"));
            let t: u64 = std::fs::read_to_string(flag("a.fence")).unwrap().trim().parse().unwrap();
            // Stop runws (no more renewals) and its command.
            let a_pid = nix::unistd::Pid::from_raw(a.id() as i32);
            let child_pgid =
                nix::unistd::Pid::from_raw(env.manifest(&a_id)["child"]["pgid"].as_i64().unwrap() as i32);
            nix::sys::signal::kill(a_pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
            nix::sys::signal::killpg(child_pgid, nix::sys::signal::Signal::SIGSTOP).unwrap();
            wait_expired(&env, &store, &key);

            let b_token = acquire(&env, &store, &key, "B", "30s");
            assert_eq!(b_token, t + 1, "tokens must grow by grant");
            if b_first {
                publish(&env, &store, &key, b_token, to, b"from-B").ok();
            }

            std::fs::write(flag("go"), "").unwrap();
            nix::sys::signal::killpg(child_pgid, nix::sys::signal::Signal::SIGCONT).unwrap();
            nix::sys::signal::kill(a_pid, nix::sys::signal::Signal::SIGCONT).unwrap();
            let a_out = Out::from(a.wait_with_output().unwrap());
            a_out.ok().stderr_has("stale fence").stderr_has("lost the lease");
            // The command wrote its publish's exit status before it exited.
            let code = std::fs::read_to_string(flag("a.code")).unwrap_or_else(|e| {
                panic!(
                    "A's status file is missing ({e})\n--- A's stdout\n{}\n--- A's stderr\n{}",
                    a_out.stdout, a_out.stderr
                )
            });
            assert_eq!(code.trim(), "76", "{tag}: A's stale publish was accepted\n{}", a_out.stderr);
            // The loss is on record, found by a renewal or by the check at the end.
            assert!(env.manifest(&a_id)["lease"]["lost_at"].is_string(), "{}", env.manifest(&a_id));
            if !b_first {
                publish(&env, &store, &key, b_token, to, b"from-B").ok().stderr_has("published");
            }
            assert_published(&env, &store, &key, to, b_token, "from-B");
            publish(&env, &store, &key, b_token, to, b"other bytes")
                .code(76)
                .one_line_error()
                .stderr_has("stale fence");
            publish(&env, &store, &key, b_token, to, b"from-B").ok();
            publish(&env, &store, &key, t, to, b"from-A again").code(76);
            // The holder may release; a stranger may not.
            with_store(&env, &store, &["lease", "release", &key, "--holder", "stranger"])
                .output()
                .map(Out::from)
                .unwrap()
                .code(75);
            with_store(&env, &store, &["lease", "release", &key, "--holder", "B"])
                .output()
                .map(Out::from)
                .unwrap()
                .ok();
        }
    }
}

/// A fence the store never issued is refused, whether nobody ever held the
/// key or its holder has a lower token, and refusing it leaves the real
/// holder free to publish. Within the store's reach the highest token
/// issued is what counts: it still publishes after its lease ran out or was
/// released, until the next grant; tokens never go back.
#[test]
fn a_fence_never_issued_is_refused_and_locks_nobody_out() {
    let env = Env::new();
    for store in stores() {
        for to in [None, Some(env.path(&format!("forged-sink-{}", store.is_some())))] {
            let to = to.as_deref();
            let key = fresh_key("forged");
            publish(&env, &store, &key, 1_000_000, to, b"forged")
                .code(76)
                .one_line_error()
                .stderr_has("was ever granted");
            publish(&env, &store, &key, 1, to, b"forged").code(76);
            let t = acquire(&env, &store, &key, "A", "0.5");
            assert_eq!(t, 1);
            publish(&env, &store, &key, t + 1, to, b"forged")
                .code(76)
                .one_line_error()
                .stderr_has("never issued (the highest issued is 1)");
            publish(&env, &store, &key, 1_000_000, to, b"forged").code(76);
            publish(&env, &store, &key, t, to, b"real").ok().stderr_has("published");
            assert_published(&env, &store, &key, to, t, "real");
            // Expired, and nobody took it since: still the highest token.
            wait_expired(&env, &store, &key);
            publish(&env, &store, &key, t, to, b"real").ok().stderr_has("unchanged");
            let t2 = acquire(&env, &store, &key, "B", "30s");
            assert_eq!(t2, t + 1);
            with_store(&env, &store, &["lease", "release", &key, "--holder", "B"])
                .output()
                .map(Out::from)
                .unwrap()
                .ok();
            // Released: the next grant still counts on, and B's token stays
            // the highest until then.
            publish(&env, &store, &key, t2, to, b"after release").ok().stderr_has("published");
            publish(&env, &store, &key, t, to, b"real").code(76).stderr_has("stale fence");
            assert_published(&env, &store, &key, to, t2, "after release");
            assert_eq!(acquire(&env, &store, &key, "C", "30s"), t2 + 1);
            publish(&env, &store, &key, t2, to, b"late").code(76).stderr_has("stale fence");
            if to.is_some() {
                assert_published(&env, &store, &key, to, t2, "after release");
            }
        }
    }
    // Nothing is left behind for a refused key in the file store.
    let leases = env.root.join("store/leases");
    let refused = fresh_key("never");
    publish(&env, &None, &refused, 7, None, b"x").code(76);
    assert!(!leases.join(&refused).exists());
}

/// `--to DIR` with the store out of reach checks only the fences published
/// in DIR, and says so.
// A build without the `postgres` feature refuses the URL outright (see
// `build::a_lean_build_refuses_a_postgres_store_naming_the_feature`).
#[cfg(feature = "postgres")]
#[test]
fn publish_to_a_dir_without_the_store_checks_only_the_published_fences() {
    let env = Env::new();
    let store = Some("postgres://runws:not-a-password@127.0.0.1:1/none".to_string());
    let sink = env.path("offline-sink");
    publish(&env, &store, "k", 5, Some(&sink), b"five")
        .ok()
        .stderr_has("warning: cannot reach the store")
        .stderr_has("checked only against the fences published");
    publish(&env, &store, "k", 4, Some(&sink), b"four").code(76).stderr_has("highest seen 5");
    assert_published(&env, &store, "k", Some(&sink), 5, "five");
    assert!(!publish(&env, &store, "k", 6, Some(&sink), b"six").stderr.contains("not-a-password"));
}

#[test]
fn a_held_lease_stops_a_run_before_anything_is_created() {
    let env = Env::new();
    for store in stores() {
        let key = fresh_key("job");
        let out = Out::from(
            with_store(&env, &store, &["lease", "acquire", &key, "--holder", "nightly@box", "--ttl", "30s"])
                .output()
                .unwrap(),
        );
        out.ok();
        let before = env.run_ids().len();
        let run =
            Out::from(with_store(&env, &store, &["run", "--lease", &key, "--", "true"]).output().unwrap());
        run.code(75).one_line_error().stderr_has("nightly@box");
        assert_eq!(env.run_ids().len(), before, "a refused run left a directory");
        // --wait outlasts a short lease held by someone else.
        let key2 = fresh_key("short");
        Out::from(
            with_store(&env, &store, &["lease", "acquire", &key2, "--holder", "x", "--ttl", "0.4"])
                .output()
                .unwrap(),
        )
        .ok();
        let waited = Out::from(
            with_store(
                &env,
                &store,
                &[
                    "run",
                    "--lease",
                    &key2,
                    "--wait",
                    "10s",
                    "--",
                    "sh",
                    "-c",
                    "echo $RUNWS_LEASE_KEY $RUNWS_FENCE",
                ],
            )
            .output()
            .unwrap(),
        );
        waited.ok().stdout_has(&format!("{key2} 2"));
        // Released at the end: the next run gets the next token at once.
        let next = Out::from(
            with_store(&env, &store, &["run", "--lease", &key2, "--", "sh", "-c", "echo $RUNWS_FENCE"])
                .output()
                .unwrap(),
        );
        next.ok().stdout_has("3");
        let show = Out::from(with_store(&env, &store, &["lease", "show", &key2, "--json"]).output().unwrap());
        show.ok();
        let v: serde_json::Value = serde_json::from_str(&show.stdout).unwrap();
        assert_eq!(v["token"], 3);
        assert!(v["holder"].is_null(), "{v}");
    }
    // The manifest records the lease.
    let key = fresh_key("rec");
    env.run(&["run", "--run-id", "leased", "--lease", &key, "--", "true"]).ok();
    let m = env.manifest("leased");
    assert_eq!(m["lease"]["key"], key.as_str());
    assert_eq!(m["lease"]["token"], 1);
    assert!(m["env"].to_string().contains("RUNWS_FENCE"));
}

/// Many contenders, many rounds: holds never overlap, tokens only grow in
/// the order the holds happened, and the sink never goes back.
#[test]
fn contenders_take_turns_and_tokens_only_grow() {
    let env = Env::new();
    for store in stores() {
        let key = fresh_key("contended");
        let log = env.path(&format!("holds-{}.log", store.is_some()));
        let sink = env.path(&format!("sink-contended-{}", store.is_some()));
        let script = format!(
            r#"s=$(date +%s%N); sleep 0.0$(( $$ % 5 )); e=$(date +%s%N)
               printf "$RUNWS_FENCE" | runws publish "$RUNWS_LEASE_KEY" --to '{sink}' || exit 9
               echo "$RUNWS_FENCE $s $e" >> '{log}'"#,
            sink = sink.display(),
            log = log.display()
        );
        let mut handles = Vec::new();
        for _ in 0..6 {
            let c = with_store(
                &env,
                &store,
                &["run", "--lease", &key, "--wait", "60s", "--lease-ttl", "5s", "--", "sh", "-c", &script],
            );
            handles.push(std::thread::spawn(move || {
                let mut c = c;
                for _ in 0..4 {
                    Out::from(c.output().unwrap()).ok();
                }
            }));
        }
        for h in handles {
            h.join().unwrap();
        }
        let mut holds: Vec<(u64, u128, u128)> = std::fs::read_to_string(&log)
            .unwrap()
            .lines()
            .map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f[0].parse().unwrap(), f[1].parse().unwrap(), f[2].parse().unwrap())
            })
            .collect();
        assert_eq!(holds.len(), 24);
        holds.sort_by_key(|h| h.1);
        for w in holds.windows(2) {
            assert!(w[0].0 < w[1].0, "token went back: {w:?}");
            assert!(w[0].2 <= w[1].1, "two holds overlapped: {w:?}");
        }
        let tokens: std::collections::BTreeSet<u64> = holds.iter().map(|h| h.0).collect();
        assert_eq!(tokens.len(), 24);
        let name = std::fs::read_dir(&sink)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .find(|n| !n.starts_with('.'))
            .unwrap();
        let last: u64 = std::fs::read_to_string(sink.join(name)).unwrap().parse().unwrap();
        assert_eq!(last, *tokens.iter().max().unwrap());
    }
}

/// A holder killed with SIGKILL never lowers the next token, and its lease
/// is granted again once it expires.
#[test]
fn a_killed_holder_loses_its_lease_at_expiry_and_tokens_keep_growing() {
    let env = Env::new();
    for store in stores() {
        let key = fresh_key("killed");
        let up = env.path(&format!("up-{}", store.is_some()));
        let mut a = with_store(
            &env,
            &store,
            &[
                "run",
                "--lease",
                &key,
                // Long enough that the lease is still held right after
                // the kill on a loaded machine.
                "--lease-ttl",
                "2",
                "--",
                "sh",
                "-c",
                &format!("touch '{}'; sleep 30", up.display()),
            ],
        )
        .spawn()
        .unwrap();
        wait_for(&up);
        a.kill().unwrap();
        a.wait().unwrap();
        // Still held until the ttl runs out.
        Out::from(with_store(&env, &store, &["lease", "acquire", &key, "--holder", "B"]).output().unwrap())
            .code(75);
        let b = Out::from(
            with_store(&env, &store, &["lease", "acquire", &key, "--holder", "B", "--wait", "10s"])
                .output()
                .unwrap(),
        );
        b.ok();
        assert_eq!(b.stdout.trim(), "2");
        // The orphaned command is the reaper's business once the run's lease is gone.
        std::thread::sleep(Duration::from_millis(2200));
        env.run(&["reap", "--grace", "0.5s"]).ok();
    }
}

/// `runws publish` killed with SIGKILL at 20 points from its start to its
/// end, into each sink of the file store and PostgreSQL's own: the lock (or
/// transaction) it held dies with it, so the key is never wedged; a stale
/// fence is still refused, the sink holds a whole payload (the old or the
/// new, never a torn one), and the retry of the same publish lands.
#[test]
fn a_publish_killed_at_any_point_leaves_the_sink_whole_and_the_key_usable() {
    let env = Env::new();
    for store in stores() {
        // A PostgreSQL connection costs a debug build a tenth of a second:
        // its directory sink shares the transaction tried here.
        let dir = Some(env.path("killed-sink")).filter(|_| store.is_none());
        for to in [None, dir] {
            let to = to.as_deref();
            let key = fresh_key("killed-publish");
            let file = env.path("payload");
            let mut before: Option<Vec<u8>> = None;
            for i in 0..20u64 {
                let t = acquire(&env, &store, &key, "H", "30s");
                let payload = vec![b'a' + (i % 26) as u8; 64 << 10];
                std::fs::write(&file, &payload).unwrap();
                let fence = t.to_string();
                let mut args = vec!["publish", &key, file.to_str().unwrap(), "--fence", &fence];
                let dir = to.map(|d| d.display().to_string());
                if let Some(d) = &dir {
                    args.extend(["--to", d]);
                }
                let mut victim =
                    with_store(&env, &store, &args).stderr(std::process::Stdio::null()).spawn().unwrap();
                std::thread::sleep(Duration::from_micros(i * 600));
                let _ = victim.kill();
                victim.wait().unwrap();
                if let Some(d) = to {
                    let now = std::fs::read(d.join(&key)).ok();
                    assert!(
                        now.is_none() || now == before || now.as_deref() == Some(&payload[..]),
                        "a torn payload after a kill at {i}"
                    );
                }
                if t > 1 && (store.is_none() || i % 4 == 1) {
                    publish(&env, &store, &key, t - 1, to, b"stale").code(76).stderr_has("stale fence");
                }
                publish(&env, &store, &key, t, to, &payload).ok();
                if let Some(d) = to {
                    assert!(std::fs::read(d.join(&key)).unwrap() == payload, "the retry at {i} did not land");
                }
                before = Some(payload);
                with_store(&env, &store, &["lease", "release", &key, "--holder", "H"])
                    .output()
                    .map(Out::from)
                    .unwrap()
                    .ok();
            }
        }
    }
}

#[test]
fn acquire_renew_and_release_from_one_shell_default_to_the_same_holder() {
    let env = Env::new();
    for store in stores() {
        let key = fresh_key("same-holder");
        let script = format!(
            "t=$({BIN} lease acquire {key} --ttl 30s) || exit 9
             echo \"token=$t shell=$$\"
             {BIN} lease renew {key} --ttl 30s >/dev/null || exit 10
             {BIN} lease release {key} || exit 11
             {BIN} lease show {key} --json"
        );
        let mut c = with_store(&env, &store, &[]);
        let c = c.env("RUNWS_ROOT", &env.root);
        let mut sh = std::process::Command::new("sh");
        sh.args(["-c", &script]).env_clear().envs(c.get_envs().filter_map(|(k, v)| Some((k, v?))));
        sh.current_dir(env.tmp.path()).stdin(std::process::Stdio::null());
        let out = Out::from(sh.output().unwrap());
        out.ok();
        let shell = out.stdout.split("shell=").nth(1).unwrap().lines().next().unwrap().trim().to_string();
        let host = nix::unistd::gethostname().unwrap().into_string().unwrap();
        // stdout is the token alone; the holder is said on stderr.
        let token = out.stdout.split("token=").nth(1).unwrap().split(' ').next().unwrap();
        assert!(token.parse::<u64>().is_ok(), "stdout is not the token alone: {out:?}");
        out.stderr_has(&format!("runws: took `{key}` as holder `{host}:{shell}`"));
        let shown: serde_json::Value =
            serde_json::from_str(&out.stdout[out.stdout.find('{').unwrap()..]).unwrap();
        assert!(shown["holder"].is_null(), "not released: {shown}");
    }
}
