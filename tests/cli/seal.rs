//! Seal, quarantine, verify and restore through the real binary, read back
//! by GNU tar.

use std::path::{Path, PathBuf};

use crate::harness::*;

/// A token the scanner must find, built at run time.
fn github_token() -> String {
    format!("{}{}", "ghp_", "R4nd0mT0k3nV4lu3".repeat(3).chars().take(36).collect::<String>())
}

fn tar_list(archive: &Path) -> Vec<String> {
    let flag = if archive.to_string_lossy().ends_with(".gz") { "-tzf" } else { "--zstd" };
    let mut c = std::process::Command::new("tar");
    if flag == "--zstd" {
        c.args(["--zstd", "-tf"]);
    } else {
        c.arg(flag);
    }
    let out = c.arg(archive).output().expect("tar");
    assert!(
        out.status.success(),
        "tar cannot list {}: {}",
        archive.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).lines().map(|l| l.trim_end_matches('/').to_string()).collect()
}

fn archive_dir(env: &Env, job: &str) -> PathBuf {
    env.root.join("archive").join(job)
}

#[test]
fn a_clean_run_is_sealed_checksummed_and_readable_by_gnu_tar() {
    let env = Env::new();
    let script = "mkdir -p sub && echo report > sub/r.txt && echo 'A=1' > .env && echo 'B=2' > .env.local \
                  && mkdir .ssh && echo k > .ssh/id_ed25519 && echo c > server.pem && printf out | runws put o";
    env.run(&["run", "--run-id", "s1", "--job", "nightly", "--seal", "--", "sh", "-c", script]).ok();
    let dir = archive_dir(&env, "nightly");
    let archive = dir.join("s1.tar.zst");
    let listed = tar_list(&archive);
    for want in ["manifest.json", "work/sub/r.txt", "outputs/o.s1", "inputs", "logs"] {
        assert!(listed.iter().any(|l| l == want), "{want} missing from {listed:?}");
    }
    for never in [".env", ".env.local", ".ssh", "id_ed25519", "server.pem"] {
        assert!(!listed.iter().any(|l| l.ends_with(never)), "{never} was packed: {listed:?}");
    }
    assert!(!listed.iter().any(|l| l.starts_with("home") || l.starts_with("tmp")));
    let check = std::process::Command::new("sha256sum")
        .arg("-c")
        .arg("s1.tar.zst.sha256")
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stdout));
    let receipt: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("s1.receipt.json")).unwrap()).unwrap();
    assert_eq!(receipt["scan"]["result"], "clean");
    assert!(receipt["excluded"].to_string().contains("work/.env.local"));
    let m = env.manifest("s1");
    assert_eq!(m["checkpoint"]["source"], "receipt");
    env.run(&["verify", archive.to_str().unwrap()]).ok();
    // Restore elsewhere and compare.
    let target = env.path("restored");
    env.run(&["restore", archive.to_str().unwrap(), "--to", target.to_str().unwrap()]).ok();
    assert_eq!(std::fs::read_to_string(target.join("work/sub/r.txt")).unwrap(), "report\n");
    // gz for tools without zstd.
    env.run(&["run", "--run-id", "s2", "--job", "nightly", "--seal", "--format", "gz", "--", "true"]).ok();
    assert!(tar_list(&dir.join("s2.tar.gz")).contains(&"manifest.json".to_string()));
}

#[test]
fn a_workspace_holding_a_token_goes_to_quarantine_and_restores_only_from_there() {
    let env = Env::new();
    let token = github_token();
    let script = format!("echo 'token: {token}' > config.yml; echo 'X=1' > .env");
    let out = Out::from(
        env.cmd(&["run", "--run-id", "leak", "--job", "j", "--seal", "--", "sh", "-c", &script])
            .output()
            .unwrap(),
    );
    out.code(80).stderr_has("quarantine").stderr_has("work/config.yml:1:github-token");
    assert!(!out.stderr.contains(&token), "the secret was printed");
    let dir = archive_dir(&env, "j");
    assert!(!dir.join("leak.tar.zst").exists(), "a secret-holding archive sits in the ordinary location");
    let q = dir.join("quarantine/leak.tar.zst");
    let listed = tar_list(&q);
    assert!(listed.contains(&"work/config.yml".to_string()));
    assert!(!listed.iter().any(|l| l.ends_with(".env")), ".env in quarantine: {listed:?}");
    let m = env.manifest("leak");
    assert_eq!(m["checkpoint"]["source"], "quarantine");

    // From quarantine: restored, with the token file, and what the scan
    // found listed, redacted.
    let t1 = env.path("from-quarantine");
    let out = env.run(&["restore", q.to_str().unwrap(), "--to", t1.to_str().unwrap()]);
    out.ok().stderr_has("from a quarantine archive").stderr_has("work/config.yml:1:github-token");
    assert!(!out.stderr.contains(&token), "the secret was printed");
    assert!(std::fs::read_to_string(t1.join("work/config.yml")).unwrap().contains(&token));

    // The same archive copied to an ordinary location: refused, target empty.
    let elsewhere = env.path("copies");
    std::fs::create_dir_all(&elsewhere).unwrap();
    for ext in ["tar.zst", "tar.zst.sha256"] {
        std::fs::copy(dir.join(format!("quarantine/leak.{ext}")), elsewhere.join(format!("leak.{ext}")))
            .unwrap();
    }
    let t2 = env.path("ordinary");
    std::fs::create_dir_all(&t2).unwrap();
    env.run(&["restore", elsewhere.join("leak.tar.zst").to_str().unwrap(), "--to", t2.to_str().unwrap()])
        .code(82)
        .stderr_has("refused");
    assert!(std::fs::read_dir(&t2).unwrap().next().is_none(), "the refused restore left files behind");
}

#[test]
fn budgets_special_files_and_the_deadline_fail_the_seal_loudly() {
    let env = Env::new();
    // Too many files: the quarantine has the same budget, so nothing is saved.
    env.run(&[
        "run",
        "--run-id",
        "many",
        "--job",
        "b",
        "--seal",
        "--max-files",
        "5",
        "--",
        "sh",
        "-c",
        "touch a b c d e f g",
    ])
    .code(81)
    .stderr_has("NOTHING SAVED")
    .stderr_has("more than 5 entries; raise `--max-files` to allow more");
    let m = env.manifest("many");
    assert_eq!(m["checkpoint"]["source"], "none");
    assert_eq!(m["held"], true);
    // Too many bytes.
    env.run(&[
        "run",
        "--run-id",
        "big",
        "--job",
        "b",
        "--seal",
        "--max-bytes",
        "1KiB",
        "--",
        "sh",
        "-c",
        "head -c 5000 /dev/zero > z",
    ])
    .code(81)
    .stderr_has("raise `--max-bytes` to allow more");
    // A fifo in the evidence.
    env.run(&["run", "--run-id", "fifo", "--job", "b", "--seal", "--", "sh", "-c", "mkfifo pipe"])
        .code(81)
        .stderr_has("pipe");
    // A symlink leaving the run.
    env.run(&["run", "--run-id", "link", "--job", "b", "--seal", "--", "sh", "-c", "ln -s /etc/passwd p"])
        .code(81);
    // No time at all.
    env.run(&["run", "--run-id", "late", "--job", "b", "--seal", "--deadline", "0s", "--", "true"])
        .code(81)
        .stderr_has("raise `--deadline` to allow more time");
    // Nothing partial is left in the archive directory.
    let left: Vec<String> = tree(&archive_dir(&env, "b"));
    assert!(left.iter().all(|p| p == "quarantine"), "left behind: {left:?}");
    // A held run survives reap --keep.
    env.run(&["reap", "--keep", "0s"]).ok();
    assert!(env.run_dir("many").exists());
    // The command's own failure wins over the seal's exit code.
    env.run(&["run", "--job", "b", "--seal", "--max-files", "1", "--", "sh", "-c", "touch a b; exit 7"])
        .code(7);
}

#[test]
fn seal_refuses_a_running_run_and_a_second_seal() {
    let env = Env::new();
    env.run(&["run", "--run-id", "done", "--job", "x", "--", "true"]).ok();
    env.run(&["seal", "done"]).ok();
    env.run(&["seal", "done"]).code(125).one_line_error().stderr_has("already exists");
    env.sh("inside", "runws seal inside; echo CODE=$?").ok().stdout_has("CODE=125");
}

#[test]
fn scan_reports_redacted_findings() {
    let env = Env::new();
    let token = github_token();
    std::fs::create_dir_all(env.path("tree/sub")).unwrap();
    std::fs::write(env.path("tree/sub/conf"), format!("x = 1\nauth = {token}\n")).unwrap();
    std::fs::write(env.path("tree/clean"), "nothing here\n").unwrap();
    let out = env.run(&["scan", env.path("tree").to_str().unwrap()]);
    out.code(82).stdout_has("sub/conf:2:github-token");
    assert!(!out.stdout.contains(&token));
    env.run(&["scan", env.path("tree/clean").to_str().unwrap()]).ok();
}

#[test]
fn a_corrupted_archive_is_refused_before_extraction() {
    let env = Env::new();
    env.run(&["run", "--run-id", "c", "--job", "k", "--seal", "--", "sh", "-c", "echo hi > f"]).ok();
    let archive = archive_dir(&env, "k").join("c.tar.zst");
    let mut bytes = std::fs::read(&archive).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&archive, &bytes).unwrap();
    env.run(&["verify", archive.to_str().unwrap()]).code(4);
    let target = env.path("t");
    env.run(&["restore", archive.to_str().unwrap(), "--to", target.to_str().unwrap()]).code(4);
    assert!(!target.exists() || std::fs::read_dir(&target).unwrap().next().is_none());
}

#[test]
fn a_missing_archive_is_named_as_missing() {
    let env = Env::new();
    let target = env.path("t");
    env.run(&["restore", "no-such.tar.zst", "--to", target.to_str().unwrap()])
        .code(125)
        .one_line_error()
        .stderr_has("cannot open archive `no-such.tar.zst`");
    env.run(&["verify", "no-such.tar.zst"]).code(125).stderr_has("cannot open archive");
    assert!(!target.exists());
}

/// `--seal` seals what a command did: a command that never ran (a program
/// that cannot be executed, a missing one) leaves its failure recorded and
/// nothing sealed, and its exit code is runws's.
#[test]
fn run_seal_seals_nothing_of_a_command_that_never_ran() {
    let env = Env::new();
    let not_executable = env.path("not-executable");
    std::fs::write(&not_executable, "#!/bin/sh\nexit 0\n").unwrap();
    let out = env.run(&[
        "run",
        "--run-id",
        "n1",
        "--job",
        "never",
        "--seal",
        "--",
        not_executable.to_str().unwrap(),
    ]);
    out.code(126);
    assert!(!out.stderr.contains("sealed run"), "a seal was reported:\n{}", out.stderr);
    assert_eq!(env.manifest("n1")["status"], "failed");
    assert!(env.manifest("n1").get("checkpoint").is_none());
    env.run(&["run", "--run-id", "n2", "--job", "never", "--seal", "--", "no-such-program-anywhere"])
        .code(127);
    assert!(!archive_dir(&env, "never").exists(), "an archive was made of a command that never ran");
}

/// A directory as the archive store (a mounted share, say): runs seal to
/// `DIR/<job>/`, `archives` lists them, and a held run whose archive is
/// there all the same is let go by `reap --keep`.
#[test]
fn a_directory_serves_as_the_archive_store() {
    let env = Env::new();
    let store = env.path("share");
    let s = store.to_str().unwrap();
    env.run(&["run", "--run-id", "a1", "--job", "nightly", "--seal", "--archive-store", s, "--", "true"])
        .ok();
    assert!(store.join("nightly/a1.tar.zst").is_file());
    assert!(store.join("nightly/a1.tar.zst.sha256").is_file());
    let listed = env.run(&["archives", "--archive-store", s, "--json"]);
    let v: Vec<serde_json::Value> = serde_json::from_str(&listed.ok().stdout).unwrap();
    assert_eq!((v.len(), v[0]["job"].as_str(), v[0]["run"].as_str()), (1, Some("nightly"), Some("a1")));
    env.run(&["verify", store.join("nightly/a1.tar.zst").to_str().unwrap()]).ok();

    // Held: its seal found a secret and its quarantine failed (a file
    // stands where the quarantine directory would be). The archive turns
    // up in the store later.
    std::fs::create_dir_all(store.join("blocked")).unwrap();
    std::fs::write(store.join("blocked/quarantine"), "").unwrap();
    let leak = format!("echo 'token {}' | runws put leak.txt", github_token());
    env.run(&[
        "run",
        "--run-id",
        "h1",
        "--job",
        "blocked",
        "--seal",
        "--archive-store",
        s,
        "--",
        "sh",
        "-c",
        &leak,
    ])
    .code(81);
    assert_eq!(env.manifest("h1")["held"], true);
    std::thread::sleep(std::time::Duration::from_millis(20));
    env.run(&["reap", "--keep", "1ms", "--archive-store", s]).ok();
    assert!(env.run_dir("h1").exists(), "held while the store lacks its archive");
    std::fs::write(store.join("blocked/h1.tar.zst"), "sealed elsewhere").unwrap();
    env.run(&["reap", "--keep", "1ms", "--archive-store", s]).ok();
    assert!(env.run_dir("h1").exists(), "an archive alone is not a whole seal");
    let digest: String = {
        use sha2::Digest;
        sha2::Sha256::digest(b"sealed elsewhere").iter().map(|b| format!("{b:02x}")).collect()
    };
    std::fs::write(store.join("blocked/h1.tar.zst.sha256"), format!("{digest}  h1.tar.zst\n")).unwrap();
    std::fs::write(store.join("blocked/h1.receipt.json"), "{}").unwrap();
    env.run(&["reap", "--keep", "1ms", "--archive-store", s]).ok();
    assert!(env.run_dir("h1").exists(), "a receipt that names nothing is not the run's");
    let receipt = serde_json::json!({"run_id": "h1", "archive": "h1.tar.zst", "archive_sha256": digest});
    std::fs::write(store.join("blocked/h1.receipt.json"), receipt.to_string()).unwrap();
    env.run(&["reap", "--keep", "1ms", "--archive-store", s]).ok().stdout_has("blocked/h1.tar.zst");
    assert!(!env.run_dir("h1").exists());
}
