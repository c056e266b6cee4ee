//! `runws import` from inside a sandbox reaches only the runs named with
//! `--allow-import` (by run id, or `job:NAME`); every other import is
//! refused with exit 3 and recorded in the run's manifest. As root and as
//! an ordinary user.

use crate::harness::*;
use crate::sandbox::{Retry, everyone, runws_as, skip};

const IMPORT: &str =
    r#"runws import producer data; echo CODE=$?; cat "$RUNWS_DIR/inputs/producer/data" 2>/dev/null; true"#;

/// A finished producer run of job `maker` with the output `data`.
fn producer(env: &Env, who: crate::sandbox::Who) {
    let out = Out::from(
        runws_as(
            env,
            who,
            &[
                "run",
                "--run-id",
                "producer",
                "--job",
                "maker",
                "--",
                "sh",
                "-c",
                "echo made | runws put data",
            ],
        )
        .output_retrying(),
    );
    out.ok();
}

/// A sandboxed consumer run `id` with `allow` (each after `--allow-import`).
fn consumer(env: &Env, who: crate::sandbox::Who, id: &str, allow: &[&str]) -> Out {
    let mut args = vec!["run", "--sandbox", "--net", "none", "--run-id", id];
    for a in allow {
        args.extend(["--allow-import", a]);
    }
    args.extend(["--", "sh", "-c", IMPORT]);
    Out::from(runws_as(env, who, &args).output_retrying())
}

fn refused(env: &Env, id: &str) -> Vec<serde_json::Value> {
    env.manifest(id)["refused"].as_array().cloned().unwrap_or_default()
}

#[test]
fn a_sandboxed_import_of_a_run_not_named_is_refused_and_recorded() {
    for who in everyone() {
        if skip(who, "allow-import refused") {
            continue;
        }
        let env = Env::new();
        producer(&env, who);
        for (id, allow) in
            [("none", &[][..]), ("other-run", &["someone-else"][..]), ("other-job", &["job:another"][..])]
        {
            let out = consumer(&env, who, id, allow);
            out.ok().stdout_has("CODE=3");
            assert!(!out.stdout.contains("made"), "{who:?} {id}: imported anyway\n{}", out.stdout);
            assert!(out.stderr.contains("--allow-import"), "{who:?} {id}: {}", out.stderr);
            let m = env.manifest(id);
            assert!(m["inputs"].as_array().unwrap().is_empty(), "{who:?} {id}: {m}");
            let r = refused(&env, id);
            assert_eq!(r.len(), 1, "{who:?} {id}: {m}");
            assert_eq!(r[0]["call"], "import");
            assert_eq!(r[0]["run"], "producer");
            assert_eq!(r[0]["name"], "data");
            assert!(r[0]["at"].is_string());
            let recorded: Vec<&str> = m["sandbox"]["allow_import"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap())
                .collect();
            assert_eq!(recorded, allow, "{who:?} {id}");
        }
        // A run that does not exist is refused the same way: the sandbox
        // learns nothing about which ids exist.
        let out = Out::from(
            runws_as(
                &env,
                who,
                &["run", "--sandbox", "--run-id", "guess", "--", "sh", "-c", "runws import nope data"],
            )
            .output_retrying(),
        );
        out.code(3).stderr_has("--allow-import");
    }
}

#[test]
fn a_sandboxed_import_named_by_run_id_or_job_works() {
    for who in everyone() {
        if skip(who, "allow-import allowed") {
            continue;
        }
        let env = Env::new();
        producer(&env, who);
        for (id, allow) in [("by-id", "producer"), ("by-job", "job:maker")] {
            let out = consumer(&env, who, id, &["unrelated", allow]);
            out.ok().stdout_has("CODE=0").stdout_has("made");
            let m = env.manifest(id);
            assert_eq!(m["inputs"][0]["from_run"], "producer", "{who:?} {id}: {m}");
            assert!(refused(&env, id).is_empty(), "{who:?} {id}");
        }
    }
}

#[test]
fn allow_import_without_a_sandbox_still_restricts_the_guard() {
    let env = Env::new();
    env.run(&[
        "run",
        "--run-id",
        "producer",
        "--job",
        "maker",
        "--",
        "sh",
        "-c",
        "echo made | runws put data",
    ])
    .ok();
    // Without the option a plain run imports as before.
    env.sh("free", IMPORT).ok().stdout_has("CODE=0");
    let out = env.run(&["run", "--run-id", "plain", "--allow-import", "job:other", "--", "sh", "-c", IMPORT]);
    out.ok().stdout_has("CODE=3");
    assert_eq!(refused(&env, "plain")[0]["run"], "producer");
    assert_eq!(env.manifest("plain")["allow_import"][0], "job:other");
    env.run(&["run", "--run-id", "plain-ok", "--allow-import", "producer", "--", "sh", "-c", IMPORT])
        .ok()
        .stdout_has("CODE=0");
}

#[test]
fn bad_allow_import_values_are_refused_before_anything_runs() {
    let env = Env::new();
    for bad in ["../x", "job:", "job:../x", "job:a/b", "", "-x"] {
        let out = env.run(&["run", "--run-id", "never", &format!("--allow-import={bad}"), "--", "true"]);
        assert!(matches!(out.code, Some(2) | Some(125)), "{bad:?} accepted: {out:?}");
        assert!(!env.run_dir("never").exists(), "{bad:?}");
    }
    env.run(&["run", "--help"]).ok().stdout_has("--allow-import");
}

#[test]
fn a_sandboxed_read_of_another_runs_output_is_recorded_too() {
    for who in everyone() {
        if skip(who, "refused get") {
            continue;
        }
        let env = Env::new();
        producer(&env, who);
        let script = "runws get data --from producer; echo CODE=$?";
        let out = Out::from(
            runws_as(
                &env,
                who,
                &[
                    "run",
                    "--sandbox",
                    "--allow-import",
                    "producer",
                    "--run-id",
                    "g",
                    "--",
                    "sh",
                    "-c",
                    script,
                ],
            )
            .output_retrying(),
        );
        out.ok().stdout_has("CODE=3");
        let r = refused(&env, "g");
        assert_eq!(r.len(), 1, "{who:?}: {r:?}");
        assert_eq!((r[0]["call"].as_str(), r[0]["run"].as_str()), (Some("get"), Some("producer")));
    }
}
