//! Runs are private to their owner: another local user reads nothing of
//! them (tried as root with `nobody` as the other user, and as `nobody`
//! with uid 65533 as the other).

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use crate::harness::*;
use crate::sandbox::{Retry, Who, runws_as};

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

/// What user `uid` can read of run `id`: each path it could open, and
/// whether `runws show` worked for it.
fn readable_by(env: &Env, uid: u32, id: &str) -> Vec<String> {
    let run = env.run_dir(id);
    let mut got = Vec::new();
    for rel in ["manifest.json", &format!("outputs/o.{id}"), "logs/stdout.log", "inputs/in.txt", "."] {
        let p = run.join(rel);
        let ok = Command::new("sh")
            .arg("-c")
            .arg("cat \"$1\" >/dev/null 2>&1 || ls \"$1\" >/dev/null 2>&1")
            .arg("sh")
            .arg(&p)
            .uid(uid)
            .gid(uid)
            .status()
            .unwrap()
            .success();
        if ok {
            got.push(rel.to_string());
        }
    }
    let show = Command::new(BIN)
        .args(["show", id])
        .env_clear()
        .env("RUNWS_ROOT", &env.root)
        .env("PATH", "/usr/bin:/bin")
        .current_dir("/")
        .uid(uid)
        .gid(uid)
        .output()
        .unwrap();
    if show.status.success() {
        got.push("runws show".into());
    }
    got
}

const SCRIPT: &str = "echo secret-out; printf secret | runws put o";

#[test]
fn a_run_is_private_to_its_owner() {
    if !is_root() {
        eprintln!("skipped a_run_is_private_to_its_owner: switching users needs root");
        return;
    }
    // Root's runs, in a ROOT runws creates and in one that exists already
    // with mode 0755 (its mode is left as it was).
    for existing in [false, true] {
        let env = Env::new();
        std::fs::set_permissions(env.tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(env.path("in.txt"), "secret-in").unwrap();
        if existing {
            std::fs::create_dir_all(env.root.join("runs")).unwrap();
            std::fs::set_permissions(&env.root, std::fs::Permissions::from_mode(0o755)).unwrap();
            std::fs::set_permissions(env.root.join("runs"), std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let input = env.path("in.txt").display().to_string();
        env.run(&["run", "--run-id", "r", "--capture", "--input", &input, "--", "sh", "-c", SCRIPT]).ok();
        assert_eq!(mode(&env.run_dir("r")), 0o700);
        let root_mode = if existing { 0o755 } else { 0o700 };
        assert_eq!(mode(&env.root), root_mode, "existing ROOT: {existing}");
        assert_eq!(readable_by(&env, 65534, "r"), Vec::<String>::new(), "existing ROOT: {existing}");
        // The owner reads it all.
        assert_eq!(readable_by(&env, 0, "r").len(), 6);
    }
    // `nobody`'s runs, in a ROOT everyone may write: another user reads none.
    let env = Env::new();
    std::fs::write(env.path("in.txt"), "secret-in").unwrap();
    let input = env.path("in.txt").display().to_string();
    let out = Out::from(
        runws_as(
            &env,
            Who::Nobody,
            &["run", "--run-id", "n", "--capture", "--input", &input, "--", "sh", "-c", SCRIPT],
        )
        .output_retrying(),
    );
    out.ok();
    assert_eq!(mode(&env.run_dir("n")), 0o700);
    assert_eq!(readable_by(&env, 65533, "n"), Vec::<String>::new());
    assert_eq!(readable_by(&env, 65534, "n").len(), 6);
}
