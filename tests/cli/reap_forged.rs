//! What a run leaves for a later `reap` to trip on: records of restores it
//! forged, files named like runws's temp files, places under ROOT swapped
//! for symlinks. The reaper removes none of what it must not, as the owner
//! of ROOT and as root reaping a ROOT another user owns.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use crate::harness::*;
use crate::sandbox::{Retry, Who, runws_as};

/// Hex of the bytes of `p`, as a restore's record spells its staging path.
fn hex(p: &Path) -> String {
    p.as_os_str().as_encoded_bytes().iter().map(|b| format!("{b:02x}")).collect()
}

/// A shell script that writes `ROOT/restores/TOKEN.json` naming `staging`,
/// with a pid that is no process: a record of a restore that died.
fn forge_record(token: &str, staging: &Path) -> String {
    format!(
        "mkdir -p \"$RUNWS_ROOT/restores\" && printf '%s' '{{\"staging\":\"x\",\"staging_hex\":\"{}\",\"pid\":2147483000,\"start_time\":1}}' > \"$RUNWS_ROOT/restores/{token}.json\"",
        hex(staging)
    )
}

fn open_up(p: &Path) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777)).unwrap();
}

/// Root reaps a ROOT that `nobody` owns, after a run of `nobody`'s wrote
/// records of "dead restores" naming directories of root's (a restore of
/// root's in progress, say): root's directories stay; a staging directory
/// of `nobody`'s own that `nobody`'s record names is removed.
#[test]
fn a_forged_restore_record_cannot_make_root_remove_roots_directory() {
    if !is_root() {
        eprintln!("skipped a_forged_restore_record_cannot_make_root_remove_roots_directory: needs root");
        return;
    }
    let env = Env::new();
    // Root's directories, named as a restore names its staging directory:
    // one in a directory of root's, one in a directory `nobody` may write.
    let roots = env.path("roots");
    std::fs::create_dir_all(roots.join(".kit.restore-aaa1")).unwrap();
    std::fs::write(roots.join(".kit.restore-aaa1/keep"), "root's").unwrap();
    std::fs::set_permissions(&roots, std::fs::Permissions::from_mode(0o755)).unwrap();
    let shared = env.path("shared");
    std::fs::create_dir_all(shared.join(".kit.restore-bbb2")).unwrap();
    std::fs::write(shared.join(".kit.restore-bbb2/keep"), "root's").unwrap();
    open_up(&shared);
    // A directory of `nobody`'s holding one of root's: `nobody` could not
    // empty it, and neither may the reaper acting on `nobody`'s record.
    let mixed = shared.join(".mix.restore-fff6");
    std::fs::create_dir_all(mixed.join("roots")).unwrap();
    std::fs::write(mixed.join("roots/keep"), "root's").unwrap();
    std::os::unix::fs::chown(&mixed, Some(65534), Some(65534)).unwrap();
    // `nobody`'s own leftover, in the shared directory.
    let script = [
        forge_record("fff6", &mixed),
        forge_record("aaa1", &roots.join(".kit.restore-aaa1")),
        forge_record("bbb2", &shared.join(".kit.restore-bbb2")),
        format!("mkdir {}", shared.join(".own.restore-ccc3").display()),
        format!("echo x > {}", shared.join(".own.restore-ccc3/f").display()),
        forge_record("ccc3", &shared.join(".own.restore-ccc3")),
    ]
    .join(" && ");
    let out = runws_as(&env, Who::Nobody, &["run", "--run-id", "evil", "--", "sh", "-c", &script])
        .output_retrying();
    Out::from(out).ok();
    assert_eq!(std::fs::metadata(env.root.join("restores/aaa1.json")).unwrap().uid(), 65534);

    let reaped = env.run(&["reap"]);
    for kept in [
        roots.join(".kit.restore-aaa1/keep"),
        shared.join(".kit.restore-bbb2/keep"),
        mixed.join("roots/keep"),
    ] {
        assert!(kept.exists(), "root's `{}` was removed\n{}", kept.display(), reaped.stdout);
    }
    reaped.stdout_has("kept");
    assert!(!shared.join(".own.restore-ccc3").exists(), "{}", reaped.stdout);
}

/// An output named like a temp file of runws's, imported by another run,
/// and an input file named so: each is the run's evidence, and `reap`
/// keeps it, as `nobody` and as root.
#[test]
fn a_file_named_like_a_temp_file_is_evidence_and_reap_keeps_it() {
    for who in crate::sandbox::everyone() {
        let env = Env::new();
        let temp_like = ".x.1.2.ab.tmp";
        let inputs = env.path("in");
        std::fs::create_dir_all(inputs.join("sub")).unwrap();
        std::fs::write(inputs.join(temp_like), "input").unwrap();
        std::fs::write(inputs.join("sub").join(temp_like), "nested input").unwrap();
        if who == Who::Nobody {
            for p in [inputs.clone(), inputs.join("sub")] {
                open_up(&p);
            }
        }
        let run = |args: &[&str]| Out::from(runws_as(&env, who, args).output_retrying());
        let put = format!("echo evidence | runws put {temp_like}");
        run(&["run", "--run-id", "prod", "--", "sh", "-c", &put]).ok();
        let import = format!("runws import prod {temp_like}");
        let input = inputs.display().to_string();
        run(&["run", "--run-id", "cons", "--input", &input, "--", "sh", "-c", &import]).ok();
        let cons = env.run_dir("cons").join("inputs");
        let evidence = [
            cons.join("prod").join(temp_like),
            cons.join("in").join(temp_like),
            cons.join("in/sub").join(temp_like),
        ];
        for f in &evidence {
            assert!(f.exists(), "{who:?}: `{}` missing before reap", f.display());
        }
        let reaped = run(&["reap"]);
        reaped.ok();
        for f in &evidence {
            assert!(f.exists(), "{who:?}: reap removed the evidence `{}`\n{}", f.display(), reaped.stdout);
        }
        assert!(!reaped.stdout.contains("removed the temp file"), "{who:?}\n{}", reaped.stdout);
    }
}

/// A run that replaces `ROOT/archive` (or `ROOT/restores`) with a symlink
/// to a directory of the user's: `reap` looks only at the real places
/// under ROOT and removes nothing through the link.
#[test]
fn reap_never_follows_a_place_under_root_swapped_for_a_symlink() {
    for who in crate::sandbox::everyone() {
        let env = Env::new();
        let elsewhere = env.path("elsewhere");
        std::fs::create_dir_all(elsewhere.join("sub")).unwrap();
        std::fs::write(elsewhere.join(".a.1.2.ab.tmp"), "mine").unwrap();
        std::fs::write(elsewhere.join("sub/.b.1.2.ab.partial"), "mine").unwrap();
        std::fs::create_dir_all(elsewhere.join(".c.restore-ddd4")).unwrap();
        std::fs::write(elsewhere.join(".c.restore-ddd4/f"), "mine").unwrap();
        let records = env.path("records");
        std::fs::create_dir_all(&records).unwrap();
        if who == Who::Nobody {
            for p in [&elsewhere, &elsewhere.join("sub"), &elsewhere.join(".c.restore-ddd4"), &records] {
                open_up(p);
                std::os::unix::fs::chown(p, Some(65534), Some(65534)).unwrap();
            }
        }
        let script = format!(
            "{} && mv \"$RUNWS_ROOT/restores/ddd4.json\" {rec}/ && rmdir \"$RUNWS_ROOT/restores\" && ln -s {rec} \"$RUNWS_ROOT/restores\" && rm -rf \"$RUNWS_ROOT/archive\" && ln -s {else_} \"$RUNWS_ROOT/archive\"",
            forge_record("ddd4", &elsewhere.join(".c.restore-ddd4")),
            rec = records.display(),
            else_ = elsewhere.display(),
        );
        let out =
            runws_as(&env, who, &["run", "--run-id", "evil", "--", "sh", "-c", &script]).output_retrying();
        Out::from(out).ok();
        let reaped = Out::from(runws_as(&env, who, &["reap"]).output_retrying());
        for f in [".a.1.2.ab.tmp", "sub/.b.1.2.ab.partial", ".c.restore-ddd4/f"] {
            assert!(
                elsewhere.join(f).exists(),
                "{who:?}: reap removed `{f}` through a symlink\n{}",
                reaped.stdout
            );
        }
    }
}

/// A process of the user's that keeps removing `ROOT/restores` (empty
/// between restores) while restores start: each restore ends, restored or
/// refused, instead of retrying its record in a directory that is gone.
#[test]
fn a_restore_whose_records_directory_is_removed_meanwhile_ends() {
    let env = Env::new();
    env.sh("s", "echo hi | runws put o").ok();
    env.run(&["seal", "s"]).ok();
    let archive = env.root.join("archive/sh/s.tar.zst");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let remover = {
        let (stop, dir) = (stop.clone(), env.root.join("restores"));
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = std::fs::remove_dir(&dir);
            }
        })
    };
    let mut hung = None;
    for i in 0..12 {
        let to = env.path(&format!("out{i}"));
        let mut c = env.cmd(&["restore", archive.to_str().unwrap(), "--to", to.to_str().unwrap()]);
        let mut child =
            c.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while child.try_wait().unwrap().is_none() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        if child.try_wait().unwrap().is_none() {
            let _ = child.kill();
            let _ = child.wait();
            hung = Some(i);
            break;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    remover.join().unwrap();
    assert_eq!(hung, None, "a restore was still running 20 s later");
}
