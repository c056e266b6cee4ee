//! `run --sandbox --cache DIR`: a shared cache seen read-only with a layer
//! of the run's own, and `cache warm`, its one writer.

use std::time::Duration;

use crate::harness::*;
use crate::sandbox::{Retry, Who, everyone, runws_as, skip};

fn cache_dir(env: &Env, who: Who) -> std::path::PathBuf {
    let dir = env.path("shared-cache");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("a"), "1\n").unwrap();
    std::fs::write(dir.join("b"), "1\n").unwrap();
    if who == Who::Nobody {
        // The user's own cache: a file of another user cannot be copied up
        // into a layer made inside an unprivileged user namespace.
        for p in [dir.clone(), dir.join("a"), dir.join("b")] {
            std::os::unix::fs::chown(&p, Some(65534), Some(65534)).unwrap();
        }
    }
    dir
}

#[test]
fn a_run_writes_its_own_layer_and_never_the_cache() {
    for who in everyone() {
        if skip(who, "cache_layer") {
            continue;
        }
        let env = Env::new();
        let dir = cache_dir(&env, who);
        let spec = format!("{}:/tmp/cache", dir.display());
        let script = "cat /tmp/cache/a; echo changed > /tmp/cache/a; echo new > /tmp/cache/new; rm /tmp/cache/b; \
                      cat /tmp/cache/a; ls /tmp/cache";
        let out = Out::from(
            runws_as(&env, who, &["run", "--sandbox", "--cache", &spec, "--", "sh", "-c", script])
                .output_retrying(),
        );
        out.ok().stdout_has("1\nchanged").stdout_has("new");
        assert!(!out.stdout.contains("\nb\n"), "{who:?}: the deleted file is still listed: {}", out.stdout);
        assert_eq!(
            std::fs::read_to_string(dir.join("a")).unwrap(),
            "1\n",
            "{who:?}: the run wrote into the cache"
        );
        assert!(dir.join("b").exists(), "{who:?}: the run deleted from the cache");
        assert!(!dir.join("new").exists(), "{who:?}: the run added to the cache");
        // Without a mount point the cache shows at its own path.
        let own = format!("cat '{}/a'", dir.display());
        let out = Out::from(
            runws_as(
                &env,
                who,
                &["run", "--sandbox", "--cache", dir.to_str().unwrap(), "--", "sh", "-c", &own],
            )
            .output_retrying(),
        );
        out.ok().stdout_has("1");
    }
}

#[test]
fn a_run_sees_the_old_or_the_new_cache_never_half_of_a_warm() {
    if skip(Who::Me, "cache_warm") {
        return;
    }
    let env = Env::new();
    let dir = cache_dir(&env, Who::Me);
    let spec = format!("{}:/tmp/cache", dir.display());
    // The warmer writes a, pauses, then b: half-way the cache is inconsistent.
    let warm_script = "echo 2 > a; sleep 0.6; echo 2 > b";
    // A run that is already using the cache when the warm starts (its
    // marker is in its run directory: the sandbox's /tmp is its own).
    let early_up = env.run_dir("early").join("work/up");
    let early = env
        .cmd(&[
            "run",
            "--run-id",
            "early",
            "--sandbox",
            "--cache",
            &spec,
            "--",
            "sh",
            "-c",
            "touch \"$RUNWS_DIR/work/up\"; sleep 0.5; cat /tmp/cache/a /tmp/cache/b",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_until(Duration::from_secs(10), || early_up.exists()), "the early run never started");
    let warmer = env
        .cmd(&["cache", "warm", dir.to_str().unwrap(), "--", "sh", "-c", warm_script])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Runs started while the warmer works (or waits) see one whole cache.
    let mut late = Vec::new();
    for _ in 0..4 {
        std::thread::sleep(Duration::from_millis(150));
        late.push(
            env.cmd(&[
                "run",
                "--sandbox",
                "--cache",
                &spec,
                "--",
                "sh",
                "-c",
                "cat /tmp/cache/a /tmp/cache/b",
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
        );
    }
    let early = Out::from(early.wait_with_output().unwrap());
    early.ok();
    assert_eq!(early.stdout.split_whitespace().collect::<Vec<_>>(), ["1", "1"], "the early run saw a warm");
    let w = Out::from(warmer.wait_with_output().unwrap());
    w.ok().stderr_has("waiting for runs using the cache");
    for l in late {
        let out = Out::from(l.wait_with_output().unwrap());
        out.ok();
        let seen: Vec<&str> = out.stdout.split_whitespace().collect();
        assert!(seen == ["1", "1"] || seen == ["2", "2"], "a run saw half a warm: {seen:?}");
    }
    assert_eq!(std::fs::read_to_string(dir.join("b")).unwrap().trim(), "2");
}

#[test]
fn bad_cache_options_are_refused() {
    let env = Env::new();
    env.run(&["run", "--cache", "/tmp", "--", "true"]).code(125).one_line_error();
    env.run(&["run", "--sandbox", "--cache", "/no/such/cache", "--", "true"]).code(125).one_line_error();
    let dir = cache_dir(&env, Who::Me);
    let rel = format!("{}:relative/mount", dir.display());
    env.run(&["run", "--sandbox", "--cache", &rel, "--", "true"])
        .code(125)
        .one_line_error()
        .stderr_has("absolute");
    env.run(&["cache", "warm", "/no/such/dir", "--", "true"]).code(125).one_line_error();
    env.run(&["cache", "warm", dir.to_str().unwrap(), "--", "sh", "-c", "exit 7"]).code(7);
}
