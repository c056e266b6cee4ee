//! The guard round trip, with runws itself as the child.

use crate::harness::*;

/// Replays the incident: a retry found yesterday's report on disk and
/// published it as its own. Run B sees A's report, but `has` says no, a
/// read of A's output is refused, and B writes its own.
#[test]
fn stale_report_from_an_earlier_run_is_not_this_runs_work() {
    let env = Env::new();
    env.sh("run-a", "echo '{\"day\":\"yesterday\"}' | runws put report.json").ok();
    let a_file = env.run_dir("run-a").join("outputs/report.json.run-a");
    let a_bytes = std::fs::read(&a_file).unwrap();

    let script = format!(
        r#"
        set -u
        # the retry finds a report on disk, under its own name even
        cp "{a}" "$RUNWS_DIR/outputs/report.json.$RUN_ID"
        cp "{a}" "$RUNWS_DIR/outputs/report.json"
        if runws has report.json; then echo HAS=yes; else echo HAS=no:$?; fi
        runws get report.json --from run-a; echo GET_FROM=$?
        runws get report.json; echo GET_OWN=$?
        echo '{{"day":"today"}}' | runws put report.json || exit 9
        runws has report.json && echo HAS_AFTER=yes
        runws get report.json
        "#,
        a = a_file.display()
    );
    let out = env.sh("run-b", &script);
    out.ok()
        .stdout_has("HAS=no:1")
        .stdout_has("GET_FROM=3")
        .stdout_has("GET_OWN=1")
        .stdout_has("HAS_AFTER=yes")
        .stdout_has("{\"day\":\"today\"}");
    // The refusal names both runs and points at import.
    out.stderr_has("run `run-b` may not read `report.json` of run `run-a`").stderr_has("runws import run-a");
    assert_eq!(std::fs::read(&a_file).unwrap(), a_bytes, "run A's output changed");
    let m = env.manifest("run-b");
    let outputs = m["outputs"].as_array().unwrap();
    assert_eq!(outputs.len(), 1);
    assert_eq!(outputs[0]["file"], "report.json.run-b");
}

#[test]
fn put_is_idempotent_for_the_same_bytes_and_records_new_bytes() {
    let env = Env::new();
    let out = env.sh(
        "r",
        r#"
        printf one | runws put x || exit 1
        cp "$RUNWS_DIR/manifest.json" "$TMPDIR/m1"
        printf one | runws put -v x || exit 2
        cmp -s "$RUNWS_DIR/manifest.json" "$TMPDIR/m1" || exit 3
        printf two | runws put x || exit 4
        cmp -s "$RUNWS_DIR/manifest.json" "$TMPDIR/m1" && exit 5
        runws get x
        "#,
    );
    out.ok().stderr_has("unchanged x.r").stdout_has("two");
    let m = env.manifest("r");
    assert_eq!(m["outputs"].as_array().unwrap().len(), 1);
    assert_eq!(m["outputs"][0]["bytes"], 3);
    // sha256("two")
    assert_eq!(m["outputs"][0]["sha256"], "3fc4ccfe745870e2c0d99f71f30ff0656c8dedd41cc1d7d3d376b0dbe685e2f3");
}

#[test]
fn put_from_a_file_argument_and_stdin_dash() {
    let env = Env::new();
    env.sh(
        "r",
        "printf abc > f && runws put a f && printf def | runws put b - && runws get a && runws get b",
    )
    .ok()
    .stdout_has("abcdef");
}

#[test]
fn tampered_output_is_refused_by_get_and_has() {
    let env = Env::new();
    let out = env.sh(
        "r",
        r#"
        printf good | runws put x || exit 1
        printf evil > "$RUNWS_DIR/outputs/x.$RUN_ID"
        runws get x; echo GET=$?
        runws has x; echo HAS=$?
        "#,
    );
    out.ok().stdout_has("GET=4").stdout_has("HAS=4").stderr_has("does not match its recorded sha256");
    assert!(!out.stdout.contains("evil"), "tampered bytes were printed");
}

#[test]
fn import_is_the_one_recorded_cross_run_read() {
    let env = Env::new();
    env.sh("producer", "printf payload | runws put data.csv").ok();
    env.sh("failed-producer", "printf x | runws put data.csv; exit 3").code(3);
    let out = env.sh(
        "consumer",
        r#"
        runws import producer data.csv || exit 1
        cat "$RUNWS_DIR/inputs/producer/data.csv"; echo
        runws import failed-producer data.csv; echo FAILED=$?
        runws import producer nothing; echo MISSING=$?
        runws import consumer data.csv; echo SELF=$?
        "#,
    );
    out.ok().stdout_has("payload").stdout_has("FAILED=125").stdout_has("MISSING=125").stdout_has("SELF=125");
    out.stderr_has("run `failed-producer` is failed");
    let m = env.manifest("consumer");
    let inputs = m["inputs"].as_array().unwrap();
    assert_eq!(inputs.len(), 1);
    assert_eq!(inputs[0]["path"], "producer/data.csv");
    assert_eq!(inputs[0]["from_run"], "producer");
    assert_eq!(inputs[0]["from_output"], "data.csv");
    // The fingerprint now covers the import: not the empty one.
    let empty = env.sh("empty", "true");
    empty.ok();
    assert_ne!(m["input_fingerprint"], env.manifest("empty")["input_fingerprint"]);
}

#[test]
fn import_of_a_tampered_output_is_refused() {
    let env = Env::new();
    env.sh("p", "printf good | runws put x").ok();
    std::fs::write(env.run_dir("p").join("outputs/x.p"), "bad!").unwrap();
    let out = env.sh("c", "runws import p x; echo CODE=$?; ls \"$RUNWS_DIR/inputs/p\" | wc -l");
    out.ok().stdout_has("CODE=4");
    assert!(out.stdout.trim_end().ends_with('0'), "a partial import was left: {}", out.stdout);
}

#[test]
fn guard_outside_a_run_or_after_it_ended_is_refused() {
    let env = Env::new();
    env.run(&["put", "x"]).code(5).one_line_error().stderr_has("RUNWS_RUN_ID is not set");
    // A background process outliving its run must not write into it.
    let out = env.sh(
        "r",
        "(sleep 1; printf late | runws put late; echo $? > \"$RUNWS_DIR/work/late-code\") >/dev/null 2>&1 &",
    );
    out.ok();
    let code_file = env.run_dir("r").join("work/late-code");
    wait_until(std::time::Duration::from_secs(5), || {
        std::fs::read_to_string(&code_file).is_ok_and(|code| !code.is_empty())
    });
    assert_eq!(std::fs::read_to_string(&code_file).unwrap().trim(), "5");
    assert!(env.manifest("r")["outputs"].as_array().unwrap().is_empty());
    assert!(!env.run_dir("r").join("outputs/late.r").exists());
}

#[test]
fn info_shows_the_current_run() {
    let env = Env::new();
    let out = env.sh("info-run", "runws info --json");
    out.ok();
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["run_id"], "info-run");
    assert_eq!(v["status"], "running");
    env.sh("info-2", "runws info").ok().stdout_has("run:       info-2");
}

#[test]
fn a_nested_run_gets_its_own_id_and_a_scheduler_id_is_honoured() {
    let env = Env::new();
    let out = env.sh("outer", "runws run -- sh -c 'echo inner=$RUN_ID'; echo outer=$RUN_ID");
    out.ok().stdout_has("outer=outer");
    assert!(!out.stdout.contains("inner=outer"), "{}", out.stdout);
    assert_eq!(env.run_ids().len(), 2);
    let sched = Out::from(
        env.cmd(&["run", "--", "sh", "-c", "echo $RUN_ID"])
            .env("RUNWS_RUN_ID", "cron-2026-11-30")
            .output()
            .unwrap(),
    );
    sched.ok().stdout_has("cron-2026-11-30");
}

/// A process of the run rewrites its output in place, over and over, while
/// `get` reads it: every `get` prints exactly the recorded bytes or fails
/// with exit 4 and prints nothing.
#[test]
fn get_prints_only_bytes_it_verified_while_the_output_is_rewritten_in_place() {
    let env = Env::new();
    let script = r#"
        set -u
        head -c 1048576 /dev/zero | tr '\0' a > "$TMPDIR/a"
        head -c 1048576 /dev/zero | tr '\0' b > "$TMPDIR/b"
        runws put o "$TMPDIR/a" || exit 9
        f="$RUNWS_DIR/outputs/o.$RUN_ID"
        mkdir "$RUNWS_DIR/work/got"
        while :; do
            dd if="$TMPDIR/b" of="$f" bs=64k conv=notrunc status=none
            dd if="$TMPDIR/a" of="$f" bs=64k conv=notrunc status=none
        done &
        writer=$!
        i=0
        while [ $i -lt 48 ]; do
            i=$((i + 1))
            runws get o > "$RUNWS_DIR/work/got/$i" 2>/dev/null
            echo $? > "$RUNWS_DIR/work/got/$i.code"
        done
        kill $writer
        wait
        exit 0
    "#;
    env.sh("rw", script).ok();
    let recorded = env.manifest("rw")["outputs"][0]["sha256"].as_str().unwrap().to_string();
    let got = env.run_dir("rw").join("work/got");
    let (mut printed, mut refused) = (0, 0);
    for i in 1..=48 {
        let code = std::fs::read_to_string(got.join(format!("{i}.code"))).unwrap();
        let bytes = std::fs::read(got.join(i.to_string())).unwrap();
        match code.trim() {
            "0" => {
                use sha2::Digest;
                let sha: String = sha2::Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect();
                assert_eq!(
                    sha,
                    recorded,
                    "get {i} exited 0 but printed {} bytes that are not the recorded ones",
                    bytes.len()
                );
                printed += 1;
            }
            "4" => {
                assert!(bytes.is_empty(), "get {i} failed the check yet printed {} bytes", bytes.len());
                refused += 1;
            }
            other => panic!("get {i} exited {other}"),
        }
    }
    eprintln!("{printed} gets printed the recorded bytes, {refused} refused");
}
