//! `runws replay`: the stale-report incident end to end, a job that reads
//! the clock, variables given again, replays from archives (quarantine
//! only when asked), and every refusal leaving nothing behind.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use crate::harness::*;
use crate::sandbox::{Retry, Who, runws_as, skip};

/// The report job: lowercases its input into `report.txt`.
const REPORT: &str = "tr A-Z a-z < ../inputs/data/today.csv | runws put report.txt";

fn report_run(env: &Env, id: &str, data: &Path) -> Out {
    env.run(&[
        "run",
        "--run-id",
        id,
        "--job",
        "report",
        "--input",
        data.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        REPORT,
    ])
}

fn data_dir(env: &Env, content: &str) -> PathBuf {
    let d = env.path("data");
    std::fs::create_dir_all(d.join("empty")).unwrap();
    std::fs::write(d.join("today.csv"), content).unwrap();
    d
}

/// The id of the newest run that is none of `before`.
fn new_run(env: &Env, before: &[String]) -> String {
    let now = env.run_ids();
    let new: Vec<&String> = now.iter().filter(|id| !before.contains(id)).collect();
    assert_eq!(new.len(), 1, "want one new run, have {new:?}");
    new[0].clone()
}

fn output(env: &Env, id: &str, name: &str) -> String {
    std::fs::read_to_string(env.run_dir(id).join("outputs").join(format!("{name}.{id}"))).unwrap()
}

#[test]
fn a_replay_of_the_second_run_reproduces_its_report_not_the_first() {
    let env = Env::new();
    let data = data_dir(&env, "YESTERDAY\n");
    report_run(&env, "a", &data).ok();
    std::fs::write(data.join("today.csv"), "TODAY\n").unwrap();
    report_run(&env, "b", &data).ok();
    // The source changes again after the run: the replay reads B's copies.
    std::fs::write(data.join("today.csv"), "TOMORROW\n").unwrap();

    let before = env.run_ids();
    let out = env.run(&["replay", "b", "--expect", "same"]);
    out.ok().stderr_has("replay of run b: same");
    let r = new_run(&env, &before);
    assert_eq!(output(&env, &r, "report.txt"), "today\n");
    let (mb, mr) = (env.manifest("b"), env.manifest(&r));
    assert_eq!(mr["input_fingerprint"], mb["input_fingerprint"]);
    assert_ne!(mr["input_fingerprint"], env.manifest("a")["input_fingerprint"]);
    assert_eq!(mr["replay_of"]["run"], "b");
    assert_eq!(mr["job"], "report");
    assert_eq!(mr["replay"]["same"], true);
    assert_eq!(mr["replay"]["outputs"][0]["result"], "same");
    // The empty directory of the input came along too.
    assert!(env.run_dir(&r).join("inputs/data/empty").is_dir());
    // A new run: its own id, directory and work/.
    assert_ne!(mr["ports"][0]["port"], serde_json::Value::Null);
    assert!(mr["cwd"].as_str().unwrap().ends_with(&format!("/runs/{r}/work")), "{}", mr["cwd"]);

    // `show` names both sides.
    env.run(&["show", &r]).ok().stdout_has("replay of: b: same");
    env.run(&["show", "b"]).ok().stdout_has(&format!("replayed:  {r} same"));
    env.run(&["show", "a"]).ok().stdout_lacks("replayed:");

    // Replaying A gives A's report: it compares as the same as A.
    env.run(&["replay", "a", "--expect", "same"]).ok();
}

#[test]
fn a_job_that_reads_the_clock_is_reported_different_with_the_outputs_named() {
    let env = Env::new();
    let script =
        "date +%s%N | runws put stamp.txt; echo fixed | runws put fixed.txt; echo kept | runws put kept.txt";
    env.run(&["run", "--run-id", "c", "--job", "clock", "--", "sh", "-c", script]).ok();
    let before = env.run_ids();
    let out = env.run(&["replay", "c", "--expect", "same", "--json"]);
    out.code(86).stderr_has("DIFFERENT (1 of 3 output(s) differ)").stderr_has("output stamp.txt: different");
    assert!(!out.stderr.contains("output fixed.txt"), "{}", out.stderr);
    let r = new_run(&env, &before);
    let json: serde_json::Value = serde_json::from_str(out.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(json["run_id"], r.as_str());
    assert_eq!(json["comparison"]["same"], false);
    let results: Vec<(String, String)> = json["comparison"]["outputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["name"].as_str().unwrap().to_string(), o["result"].as_str().unwrap().to_string()))
        .collect();
    assert!(results.contains(&("stamp.txt".into(), "different".into())), "{results:?}");
    assert!(results.contains(&("fixed.txt".into(), "same".into())), "{results:?}");
    assert_eq!(env.manifest(&r)["replay"]["same"], false);
    env.run(&["replay", "c", "--expect", "different"]).ok();
    // The default: the command's own status.
    env.run(&["replay", "c"]).ok();
    env.run(&["show", "c"]).ok().stdout_has("DIFFERENT (1 output(s) differ)");
}

#[test]
fn outputs_missing_or_new_and_a_changed_status_are_differences() {
    let env = Env::new();
    // The command's behaviour depends on a file outside the run.
    let flag = env.path("flag");
    let script = format!(
        "if [ -e {f} ]; then echo b | runws put b.txt; exit 3; else echo a | runws put a.txt; fi",
        f = flag.display()
    );
    env.run(&["run", "--run-id", "o", "--", "sh", "-c", &script]).ok();
    std::fs::write(&flag, "").unwrap();
    let out = env.run(&["replay", "o"]);
    // `--expect any`: the replayed command's own exit status.
    out.code(3)
        .stderr_has("output a.txt: missing")
        .stderr_has("output b.txt: new")
        .stderr_has("status: was succeeded (exit 0), now failed (exit 3)");
}

#[test]
fn variables_are_given_again_and_a_replay_without_them_names_every_one() {
    let env = Env::new();
    let file = env.path("vars.env");
    std::fs::write(&file, "FROM_FILE=one\n").unwrap();
    let script = "echo \"$FROM_FILE $FROM_ARG $PASSED ${UNSET-unset}\" | runws put seen.txt";
    let out = Out::from(
        env.cmd(&[
            "run",
            "--run-id",
            "v",
            "--env-file",
            file.to_str().unwrap(),
            "--env",
            "FROM_ARG=two",
            "--pass",
            "PASSED",
            "--pass",
            "UNSET",
            "--",
            "sh",
            "-c",
            script,
        ])
        .env("PASSED", "three")
        .output()
        .unwrap(),
    );
    out.ok();
    assert_eq!(output(&env, "v", "seen.txt"), "one two three unset\n");

    let before = env.run_ids();
    let out = env.run(&["replay", "v"]);
    out.code(125)
        .one_line_error()
        .stderr_has("FROM_FILE (--env-file)")
        .stderr_has("FROM_ARG (--env)")
        .stderr_has("PASSED (--pass, not set now)");
    assert!(!out.stderr.contains("UNSET"), "an absent variable is not needed: {}", out.stderr);
    assert_eq!(env.run_ids(), before, "a refused replay created a run");

    // Given again (PASSED from the environment, as --pass passes it again).
    let out = Out::from(
        env.cmd(&[
            "replay",
            "v",
            "--expect",
            "same",
            "--env-file",
            file.to_str().unwrap(),
            "--env",
            "FROM_ARG=two",
        ])
        .env("PASSED", "three")
        .output()
        .unwrap(),
    );
    out.ok();
    let r = new_run(&env, &before);
    let passed = env.manifest(&r)["env"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["name"] == "PASSED" && e["source"] == "pass");
    assert!(passed, "PASSED is not recorded as passed again");
}

#[test]
fn a_run_that_has_not_ended_changed_evidence_and_a_newer_schema_are_refused_with_nothing_created() {
    let env = Env::new();
    // Still running.
    let ready = env.path("ready");
    let script = format!("touch {}; sleep 30", ready.display());
    let mut child = env
        .cmd(&["run", "--run-id", "live", "--", "sh", "-c", &script])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&ready);
    let before = env.run_ids();
    env.run(&["replay", "live"]).code(125).one_line_error().stderr_has("has not ended");
    assert_eq!(env.run_ids(), before);
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = child.wait();

    // Input copies changed, or added to, since the run.
    let data = data_dir(&env, "X\n");
    report_run(&env, "changed", &data).ok();
    report_run(&env, "added", &data).ok();
    std::fs::write(env.run_dir("changed").join("inputs/data/today.csv"), "Y\n").unwrap();
    std::fs::write(env.run_dir("added").join("inputs/data/planted"), "Z\n").unwrap();
    let before = env.run_ids();
    env.run(&["replay", "changed"])
        .code(4)
        .one_line_error()
        .stderr_has("inputs/data/today.csv")
        .stderr_has("evidence has changed");
    env.run(&["replay", "added"])
        .code(4)
        .one_line_error()
        .stderr_has("inputs/data/planted")
        .stderr_has("not recorded");
    assert_eq!(env.run_ids(), before);

    // A manifest from a newer runws.
    env.sh("newer", "true").ok();
    let path = env.run_dir("newer").join("manifest.json");
    let text = std::fs::read_to_string(&path).unwrap().replacen("\"schema\": 1", "\"schema\": 2", 1);
    std::fs::write(&path, text).unwrap();
    let before = env.run_ids();
    env.run(&["replay", "newer"]).code(125).one_line_error().stderr_has("schema 2");
    assert_eq!(env.run_ids(), before);

    // Nothing to replay.
    env.run(&["replay", "nosuch"]).code(125).one_line_error();
    env.run(&["replay", "s3://bucket/x.tar.zst"]).code(125).one_line_error().stderr_has("s3://");
}

#[test]
fn imports_are_replayed_from_their_copies_when_the_producer_is_gone() {
    let env = Env::new();
    env.sh("prod", "echo v1 | runws put data.csv").ok();
    env.sh("cons", "runws import prod data.csv && tr a-z A-Z < ../inputs/prod/data.csv | runws put out.txt")
        .ok();
    let fp = env.manifest("cons")["input_fingerprint"].clone();
    std::fs::remove_dir_all(env.run_dir("prod")).unwrap();
    // The command imports again; the copy made for the replay stands.
    let before = env.run_ids();
    env.run(&["replay", "cons", "--expect", "same"]).ok();
    let r = new_run(&env, &before);
    let m = env.manifest(&r);
    assert_eq!(m["input_fingerprint"], fp);
    assert_eq!(m["inputs"][0]["from_run"], "prod");
    assert_eq!(output(&env, &r, "out.txt"), "V1\n");
    // A plain run importing from a run that is gone still fails.
    env.sh("late", "runws import prod data.csv").code(125);
}

#[test]
fn the_working_directory_is_the_replays_own_or_the_same_directory() {
    let env = Env::new();
    let dir = env.path("elsewhere");
    std::fs::create_dir_all(&dir).unwrap();
    env.run(&[
        "run",
        "--run-id",
        "w",
        "--cwd",
        dir.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        "pwd | runws put pwd.txt",
    ])
    .ok();
    // A relative command is found from where the original was started.
    let script = env.path("job.sh");
    std::fs::write(&script, "#!/bin/sh\necho ran | runws put ran.txt\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    env.run(&["run", "--run-id", "rel", "--", "./job.sh"]).ok();
    let elsewhere = env.path("sub");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let before = env.run_ids();
    Out::from(env.cmd(&["replay", "w", "--expect", "same"]).current_dir(&elsewhere).output().unwrap()).ok();
    Out::from(env.cmd(&["replay", "rel", "--expect", "same"]).current_dir(&elsewhere).output().unwrap()).ok();
    assert_eq!(env.run_ids().len(), before.len() + 2);
}

/// Seals run `id` of job `job`; returns its archive.
fn sealed(env: &Env, id: &str, job: &str, script: &str) -> PathBuf {
    env.run(&["run", "--run-id", id, "--job", job, "--seal", "--", "sh", "-c", script]).ok();
    env.root.join("archive").join(job).join(format!("{id}.tar.zst"))
}

fn restores_left(env: &Env) -> Vec<String> {
    tree(&env.root.join("restores"))
}

#[test]
fn a_sealed_run_is_replayed_from_its_archive_and_the_restored_copy_goes() {
    let env = Env::new();
    let archive = sealed(&env, "s", "nightly", "echo sealed | runws put r.txt");
    // The run itself is gone: the archive is the evidence.
    std::fs::remove_dir_all(env.run_dir("s")).unwrap();
    let before = env.run_ids();
    env.run(&["replay", archive.to_str().unwrap(), "--expect", "same"])
        .ok()
        .stderr_has("replay of run s: same");
    let r = new_run(&env, &before);
    let of = &env.manifest(&r)["replay_of"];
    assert_eq!(of["run"], "s");
    assert_eq!(of["archive"], archive.to_str().unwrap());
    assert_eq!(of.get("from_quarantine"), None);
    assert!(restores_left(&env).is_empty(), "left under restores/: {:?}", restores_left(&env));

    let out = env.run(&["replay", archive.to_str().unwrap(), "--keep", "--json"]);
    out.ok();
    let json: serde_json::Value = serde_json::from_str(out.stdout.lines().last().unwrap()).unwrap();
    let kept = PathBuf::from(json["kept"].as_str().unwrap());
    assert!(kept.join("manifest.json").is_file() && kept.starts_with(env.root.join("restores")));

    // A checksum that does not match: refused before anything is created.
    let copy = env.path("bad/s.tar.zst");
    std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
    std::fs::copy(&archive, &copy).unwrap();
    std::fs::write(env.path("bad/s.tar.zst.sha256"), format!("{}  s.tar.zst\n", "0".repeat(64))).unwrap();
    let before = env.run_ids();
    let left = restores_left(&env);
    env.run(&["replay", copy.to_str().unwrap()]).code(4).one_line_error();
    assert_eq!(env.run_ids(), before);
    assert_eq!(restores_left(&env), left);
}

#[test]
fn a_quarantined_archive_is_replayed_only_with_the_flag_and_that_is_recorded() {
    let env = Env::new();
    let token = format!("{}{}", "ghp_", "R3pl4yT0k3nV4lu3Xy".repeat(3).chars().take(36).collect::<String>());
    let script = format!("echo 'token: {token}' > config.yml; echo done | runws put done.txt");
    let out = env.run(&["run", "--run-id", "q", "--job", "leaky", "--seal", "--", "sh", "-c", &script]);
    out.code(80);
    let archive = env.root.join("archive/leaky/quarantine/q.tar.zst");
    assert!(archive.is_file());
    let before = env.run_ids();
    env.run(&["replay", archive.to_str().unwrap()])
        .code(125)
        .one_line_error()
        .stderr_has("--from-quarantine");
    assert_eq!(env.run_ids(), before);
    let out = env.run(&["replay", archive.to_str().unwrap(), "--from-quarantine"]);
    out.ok();
    assert!(!out.stderr.contains(&token), "the secret was printed");
    let r = new_run(&env, &before);
    assert_eq!(env.manifest(&r)["replay_of"]["from_quarantine"], true);
    env.run(&["show", &r]).ok().stdout_has("(quarantine)");

    // A secret in an archive from an ordinary place is refused, as `restore` does.
    let plain = env.path("plain");
    std::fs::create_dir_all(&plain).unwrap();
    for ext in ["tar.zst", "tar.zst.sha256"] {
        std::fs::copy(
            env.root.join(format!("archive/leaky/quarantine/q.{ext}")),
            plain.join(format!("q.{ext}")),
        )
        .unwrap();
    }
    let before = env.run_ids();
    env.run(&["replay", plain.join("q.tar.zst").to_str().unwrap()]).code(82).one_line_error();
    assert_eq!(env.run_ids(), before);
}

#[test]
fn a_sandboxed_run_is_replayed_in_the_same_sandbox() {
    if skip(Who::Me, "replay_sandbox") {
        return;
    }
    let env = Env::new();
    let out = Out::from(
        runws_as(
            &env,
            Who::Me,
            &[
                "run",
                "--run-id",
                "sb",
                "--sandbox",
                "--net",
                "none",
                "--",
                "sh",
                "-c",
                "echo x | runws put x.txt",
            ],
        )
        .output_retrying(),
    );
    out.ok();
    let before = env.run_ids();
    Out::from(runws_as(&env, Who::Me, &["replay", "sb", "--expect", "same"]).output_retrying()).ok();
    let r = new_run(&env, &before);
    let sb = &env.manifest(&r)["sandbox"];
    assert_eq!(sb["kind"], "sandbox");
    assert_eq!(sb["net"], "none");
}

#[test]
fn only_the_user_who_recorded_a_run_replays_it() {
    if !is_root() || skip(Who::Nobody, "replay_other_user") {
        return;
    }
    let env = Env::new();
    let out = Out::from(
        runws_as(&env, Who::Nobody, &["run", "--run-id", "theirs", "--", "sh", "-c", "id -u"])
            .output()
            .unwrap(),
    );
    out.ok();
    let before = env.run_ids();
    env.run(&["replay", "theirs"]).code(125).one_line_error().stderr_has("recorded by uid 65534");
    assert_eq!(env.run_ids(), before);
}

#[test]
fn an_archive_of_another_users_is_not_replayed() {
    if !is_root() || skip(Who::Nobody, "replay_other_users_archive") {
        return;
    }
    let env = Env::new();
    // Whoever can write an archive chooses the command its manifest records:
    // as a run of another user's, it is not executed for the caller.
    let out = Out::from(
        runws_as(
            &env,
            Who::Nobody,
            &[
                "run",
                "--run-id",
                "theirs",
                "--job",
                "j",
                "--seal",
                "--",
                "sh",
                "-c",
                "id -u | runws put uid.txt",
            ],
        )
        .output()
        .unwrap(),
    );
    out.ok();
    let archive = env.root.join("archive/j/theirs.tar.zst");
    assert!(archive.is_file());
    std::fs::remove_dir_all(env.run_dir("theirs")).unwrap();
    let before = env.run_ids();
    env.run(&["replay", archive.to_str().unwrap()])
        .code(125)
        .one_line_error()
        .stderr_has("belongs to uid 65534");
    assert_eq!(env.run_ids(), before, "the replay ran");
    assert!(restores_left(&env).is_empty(), "left under restores/: {:?}", restores_left(&env));
}

#[test]
fn a_link_planted_at_the_top_of_inputs_is_refused_not_followed() {
    let env = Env::new();
    let secret = env.path("private/key");
    std::fs::create_dir_all(secret.parent().unwrap()).unwrap();
    std::fs::write(&secret, "not for the run\n").unwrap();
    env.sh("planted", "true").ok();
    // What a process the command left behind can do once runws has exited:
    // a link at the top of inputs/, and a record that matches it.
    let dir = env.run_dir("planted");
    std::fs::create_dir_all(dir.join("inputs")).unwrap();
    let target = secret.parent().unwrap().to_str().unwrap().to_string();
    std::os::unix::fs::symlink(&target, dir.join("inputs/s")).unwrap();
    let path = dir.join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    use sha2::Digest;
    let sha: String = sha2::Sha256::digest(target.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    m["inputs"] = serde_json::json!([{
        "path": "s",
        "kind": "symlink",
        "bytes": target.len(),
        "sha256": sha,
    }]);
    std::fs::write(&path, serde_json::to_string(&m).unwrap()).unwrap();
    let before = env.run_ids();
    env.run(&["replay", "planted"])
        .code(4)
        .one_line_error()
        .stderr_has("inputs/s")
        .stderr_has("symbolic link");
    assert_eq!(env.run_ids(), before, "a replay was created (and the link's target copied into it)");
}

/// A plain run's record can be rewritten after its runws exits (by a
/// process it left behind): a replay names every variable it passes from
/// the caller's environment, and says that such a run's record was not
/// defended, so a forged `*` does not pass everything unseen.
#[test]
fn a_replay_names_what_it_passes_and_warns_of_an_undefended_record() {
    let env = Env::new();
    env.sh("plain", "echo ok | runws put out.txt").ok();
    let path = env.run_dir("plain").join("manifest.json");
    let mut m = env.manifest("plain");
    m["env"].as_array_mut().unwrap().push(serde_json::json!(
        {"name": "*", "source": "pass", "granted": true, "present": false}
    ));
    std::fs::write(&path, serde_json::to_vec(&m).unwrap()).unwrap();
    let out = env.run(&["replay", "plain"]);
    out.ok()
        .stderr_has("passing from this environment: *")
        .stderr_has("neither a sandbox nor a control group");
    // A sandboxed run's record was the run's to read only: no such note.
    let who = if is_root() { Who::Nobody } else { Who::Me };
    if skip(who, "a_replay_names_what_it_passes_and_warns_of_an_undefended_record") {
        return;
    }
    let env = Env::new();
    Out::from(
        runws_as(&env, who, &["run", "--sandbox", "--run-id", "boxed", "--", "true"]).output_retrying(),
    )
    .ok();
    let out = Out::from(runws_as(&env, who, &["replay", "boxed"]).output_retrying());
    out.ok();
    assert!(!out.stderr.contains("neither a sandbox"), "{out:?}");
}

/// A relative `--rw` of the original is found from where the original was
/// started, not from where the replay is: the same directory is writable
/// again (each backend the machine has).
#[test]
fn a_relative_rw_is_replayed_against_where_the_original_started() {
    if skip(Who::Me, "replay_relative_rw") {
        return;
    }
    for backend in ["--sandbox=ns", "--sandbox=landlock"] {
        let env = Env::new();
        std::fs::create_dir_all(env.path("shared")).unwrap();
        let write =
            format!("echo wrote > {}/out.txt && runws put x.txt < /dev/null", env.path("shared").display());
        let out = env.run(&["run", "--run-id", "o", backend, "--rw", "shared", "--", "sh", "-c", &write]);
        if out.code == Some(125) {
            eprintln!("skipped {backend}: {}", out.stderr.trim());
            continue;
        }
        out.ok();
        std::fs::remove_file(env.path("shared/out.txt")).unwrap();
        // The replay starts elsewhere, where `shared` does not exist.
        let elsewhere = env.path("elsewhere");
        std::fs::create_dir_all(&elsewhere).unwrap();
        let replayed = Out::from(env.cmd(&["replay", "o"]).current_dir(&elsewhere).output().unwrap());
        replayed.ok();
        assert_eq!(std::fs::read_to_string(env.path("shared/out.txt")).unwrap(), "wrote\n", "{backend}");
    }
}
