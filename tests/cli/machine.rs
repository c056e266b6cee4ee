//! Output for machines: `--json` on seal, verify, restore, publish and
//! lease acquire, `run --json-status-fd`, `ls --json-lines`.

use std::process::Command;

use crate::harness::*;

fn one_object(out: &Out) -> serde_json::Value {
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 1, "want one line of JSON\n--- stdout\n{}", out.stdout);
    let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(v["schema"], 1, "{v}");
    v
}

#[test]
fn seal_verify_and_restore_print_one_json_object() {
    let env = Env::new();
    env.run(&["run", "--run-id", "s1", "--job", "j", "--", "sh", "-c", "echo hi > f.txt"]).ok();
    let sealed = env.run(&["seal", "s1", "--json"]);
    let v = one_object(sealed.ok());
    assert_eq!(v["run_id"], "s1");
    assert_eq!(v["source"], "receipt");
    let archive = v["archive"].as_str().unwrap().to_string();
    let sha = v["archive_sha256"].as_str().unwrap().to_string();

    let v = one_object(env.run(&["verify", &archive, "--json"]).ok());
    assert_eq!(v["ok"], true);
    assert_eq!(v["sha256"], sha.as_str());
    assert_eq!(v["archive"], archive.as_str());

    let to = env.path("restored");
    let v = one_object(env.run(&["restore", &archive, "--to", to.to_str().unwrap(), "--json"]).ok());
    assert_eq!(v["from_quarantine"], false);
    assert!(v["files"].as_u64().unwrap() >= 1, "{v}");
    assert_eq!(v["findings"], serde_json::json!([]));
    assert!(to.join("work/f.txt").exists());

    // A failure is still one line on stderr and its exit code, nothing on stdout.
    std::fs::write(&archive, "changed").unwrap();
    let out = env.run(&["verify", &archive, "--json"]);
    out.code(4).one_line_error();
    assert_eq!(out.stdout, "");
}

#[test]
fn lease_acquire_and_publish_print_one_json_object() {
    let env = Env::new();
    let v = one_object(env.run(&["lease", "acquire", "k", "--holder", "me", "--ttl", "30s", "--json"]).ok());
    assert_eq!(v["key"], "k");
    assert_eq!(v["holder"], "me");
    let token = v["token"].as_u64().unwrap();
    assert!(token >= 1);
    assert!(v["expires_at"].is_string());
    let fence = token.to_string();
    let dir = env.path("sink");
    let file = env.path("payload");
    std::fs::write(&file, "data").unwrap();
    let args =
        ["publish", "k", file.to_str().unwrap(), "--fence", &fence, "--to", dir.to_str().unwrap(), "--json"];
    let v = one_object(env.run(&args).ok());
    assert_eq!(v["outcome"], "written");
    assert_eq!(v["fence"], token);
    assert_eq!(v["bytes"], 4);
    let v = one_object(env.run(&args).ok());
    assert_eq!(v["outcome"], "unchanged");
}

#[test]
fn ls_json_lines_prints_one_run_a_line() {
    let env = Env::new();
    env.sh("l1", "true").ok();
    env.sh("l2", "exit 3").code(3);
    for flag in ["--json-lines", "--jsonl"] {
        let out = env.run(&["ls", flag]);
        let rows: Vec<serde_json::Value> =
            out.ok().stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(rows.len(), 2, "{}", out.stdout);
        // Newest first.
        assert_eq!(rows[0]["run_id"], "l2");
        assert_eq!(rows[0]["exit_code"], 3);
        assert_eq!(rows[1]["run_id"], "l1");
    }
    // `--json` stays one array.
    let all: serde_json::Value = serde_json::from_str(&env.run(&["ls", "--json"]).ok().stdout).unwrap();
    assert_eq!(all.as_array().unwrap().len(), 2);
}

/// `runws ARGS 3>STATUS` through a shell, so that fd 3 is handed over.
fn with_fd3(env: &Env, args: &[&str], status: &std::path::Path) -> Out {
    let mut script = format!("exec '{BIN}'");
    for a in args {
        script.push_str(&format!(" '{a}'"));
    }
    script.push_str(&format!(" 3>'{}'", status.display()));
    Out::from(
        Command::new("sh")
            .arg("-c")
            .arg(script)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .env("HOME", &env.home)
            .env("RUNWS_ROOT", &env.root)
            .current_dir(env.tmp.path())
            .output()
            .unwrap(),
    )
}

#[test]
fn json_status_fd_gets_the_final_record_as_one_line() {
    let env = Env::new();
    let status = env.path("status.json");
    // Through both parsers: a plain line (the fast path) and one only clap takes.
    for (id, extra) in [("st1", None), ("st2", Some("--env=A=1"))] {
        let mut args = vec!["run", "--run-id", id, "--json-status-fd", "3"];
        args.extend(extra);
        args.extend(["--", "sh", "-c", "echo out; ls /proc/self/fd/3 2>/dev/null && echo LEAKED; exit 3"]);
        let out = with_fd3(&env, &args, &status);
        out.code(3).stdout_lacks("LEAKED");
        let text = std::fs::read_to_string(&status).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["run_id"], id);
        assert_eq!(v["status"], "failed");
        assert_eq!(v["exit_code"], 3);
        assert_eq!(v["schema"], 1);
    }
    // A command that cannot run still gets its record.
    with_fd3(&env, &["run", "--run-id", "st3", "--json-status-fd", "3", "--", "/nonexistent/x"], &status)
        .code(127);
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&status).unwrap()).unwrap();
    assert_eq!(v["run_id"], "st3");
    // A descriptor that is not open, or one of the command's own, is refused
    // before anything is created.
    env.run(&["run", "--run-id", "st4", "--json-status-fd", "9", "--", "true"])
        .code(125)
        .one_line_error()
        .stderr_has("not an open descriptor");
    env.run(&["run", "--run-id", "st5", "--json-status-fd", "1", "--", "true"]).code(125).one_line_error();
    assert!(!env.run_dir("st4").exists() && !env.run_dir("st5").exists());
}
