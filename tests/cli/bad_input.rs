//! Hostile and broken input: a clear error, and nothing already written is
//! lost or corrupted.

use crate::harness::*;

#[test]
fn bad_run_ids_are_refused_before_anything_is_created() {
    let env = Env::new();
    let long = "x".repeat(200);
    for id in ["..", ".", "a/b", "/abs", "", "-dash", "sp ace", long.as_str()] {
        let arg = format!("--run-id={id}");
        env.run(&["run", &arg, "--", "true"]).code(125).one_line_error().stderr_has("invalid run id");
    }
    // `last` names the newest run wherever a run is named: reserved.
    env.run(&["run", "--run-id", "last", "--", "true"]).code(125).one_line_error().stderr_has("reserved");
    let out =
        Out::from(env.cmd(&["run", "--", "true"]).env("RUNWS_RUN_ID", "../../escape").output().unwrap());
    out.code(125).stderr_has("invalid run id");
    assert!(!env.root.join("runs").exists() || env.run_ids().is_empty());
    assert!(!env.tmp.path().join("escape").exists());
}

#[test]
fn reopening_an_existing_run_id_is_refused_and_changes_nothing() {
    let env = Env::new();
    env.sh("once", "printf v1 | runws put out").ok();
    let before = tree(&env.run_dir("once"));
    let manifest = std::fs::read(env.run_dir("once").join("manifest.json")).unwrap();
    env.sh("once", "printf v2 | runws put out").code(125).one_line_error().stderr_has("already exists");
    let out2 = Out::from(env.cmd(&["run", "--", "true"]).env("RUNWS_RUN_ID", "once").output().unwrap());
    out2.code(125);
    assert_eq!(tree(&env.run_dir("once")), before);
    assert_eq!(std::fs::read(env.run_dir("once").join("manifest.json")).unwrap(), manifest);
    assert_eq!(std::fs::read(env.run_dir("once").join("outputs/out.once")).unwrap(), b"v1");
}

#[test]
fn traversal_names_are_refused() {
    let env = Env::new();
    let long = "n".repeat(201);
    let script = format!(
        r#"
        for n in ../escape a/b .. . "" "{long}"; do
          printf x | runws put "$n"; echo "put[$n]=$?"
          runws get "$n"; echo "get[$n]=$?"
        done
        "#
    );
    let out = env.sh("t", &script);
    out.ok();
    for line in out.stdout.lines() {
        assert!(line.ends_with("=125"), "accepted: {line}\n{}", out.stderr);
    }
    assert!(!env.run_dir("t").join("escape").exists());
    assert!(!env.root.join("runs/escape").exists());
    assert!(env.manifest("t")["outputs"].as_array().unwrap().is_empty());
}

#[test]
fn planted_symlinks_in_outputs_are_never_followed() {
    let env = Env::new();
    let outside = env.path("outside.txt");
    std::fs::write(&outside, "precious").unwrap();
    let outside_dir = env.path("outside-dir");
    std::fs::create_dir_all(&outside_dir).unwrap();
    let script = format!(
        r#"
        ln -s '{o}' "$RUNWS_DIR/outputs/report.$RUN_ID"
        printf new | runws put report || exit 1
        test -L "$RUNWS_DIR/outputs/report.$RUN_ID" && exit 2
        runws get report; echo
        # now replace outputs/ itself with a symlink to a directory outside
        mv "$RUNWS_DIR/outputs" "$RUNWS_DIR/outputs.real"
        ln -s '{d}' "$RUNWS_DIR/outputs"
        printf x | runws put other; echo PUT=$?
        runws get report; echo GET=$?
        "#,
        o = outside.display(),
        d = outside_dir.display()
    );
    let out = env.sh("sym", &script);
    out.ok()
        .stdout_has("new")
        .stdout_has("PUT=125")
        .stdout_has("GET=125")
        .stderr_has("refused to follow the symlink");
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "precious");
    assert!(tree(&outside_dir).is_empty(), "wrote outside: {:?}", tree(&outside_dir));
}

#[test]
fn a_symlink_planted_as_an_output_is_refused_on_read() {
    let env = Env::new();
    let outside = env.path("outside.txt");
    std::fs::write(&outside, "secret").unwrap();
    let script = format!(
        r#"
        printf mine | runws put r || exit 1
        rm "$RUNWS_DIR/outputs/r.$RUN_ID"
        ln -s '{o}' "$RUNWS_DIR/outputs/r.$RUN_ID"
        runws get r; echo GET=$?
        "#,
        o = outside.display()
    );
    let out = env.sh("s2", &script);
    out.ok().stdout_has("GET=125");
    assert!(!out.stdout.contains("secret"));
}

#[test]
fn spoofed_run_identity_is_refused() {
    let env = Env::new();
    // Another run that is alive while we try to write into it.
    let marker = env.path("victim-up");
    let victim = env
        .cmd(&[
            "run",
            "--run-id",
            "victim",
            "--",
            "sh",
            "-c",
            &format!("touch '{}'; sleep 3", marker.display()),
        ])
        .spawn()
        .unwrap();
    while !marker.exists() {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let script = r#"
        RUNWS_RUN_ID=victim runws put x </dev/null; echo ID_ONLY=$?
        RUNWS_RUN_ID=victim RUNWS_DIR="$RUNWS_ROOT/runs/victim" runws put x </dev/null; echo BOTH=$?
        RUNWS_RUN_ID=victim RUNWS_DIR="$RUNWS_ROOT/runs/victim" runws has x; echo HAS=$?
    "#;
    let out = env.sh("attacker", script);
    out.ok()
        .stdout_has("ID_ONLY=5")
        .stdout_has("BOTH=5")
        .stdout_has("HAS=5")
        .stderr_has("not part of run `victim`");
    Out::from(victim.wait_with_output().unwrap()).ok();
    assert!(env.manifest("victim")["outputs"].as_array().unwrap().is_empty());
    assert!(!env.run_dir("victim").join("outputs/x.victim").exists());
}

#[test]
fn corrupted_or_missing_manifest_gives_a_clear_error() {
    let env = Env::new();
    let out = env.sh(
        "c",
        r#"
        printf keep | runws put kept || exit 1
        cp "$RUNWS_DIR/manifest.json" "$TMPDIR/good"
        printf '{"schema":1,"run_id":' > "$RUNWS_DIR/manifest.json"
        printf x | runws put y; echo CORRUPT=$?
        rm "$RUNWS_DIR/manifest.json"
        printf x | runws put y; echo MISSING=$?
        cp "$TMPDIR/good" "$RUNWS_DIR/manifest.json"
        runws get kept
        "#,
    );
    out.ok().stdout_has("CORRUPT=125").stdout_has("MISSING=125").stdout_has("keep");
    out.stderr_has("is corrupt").stderr_has("is missing");
    // runws's own final write still lands on the restored manifest.
    assert_eq!(env.manifest("c")["status"], "succeeded");
}

#[test]
fn a_manifest_corrupted_at_the_end_is_rewritten_and_said_loudly() {
    let env = Env::new();
    env.sh("late", "printf garbage > \"$RUNWS_DIR/manifest.json\"")
        .ok()
        .one_line_error()
        .stderr_has("warning: the manifest of run `late` was changed by its command");
    let m = env.manifest("late");
    assert_eq!(m["status"], "succeeded");
    assert!(m["restored"][0]["why"].as_str().unwrap().contains("not JSON"), "{m}");
}

#[test]
fn a_read_only_root_is_a_clear_error() {
    let env = Env::new();
    if !is_root() {
        // As an ordinary user a mode-0555 directory is read-only.
        std::fs::create_dir_all(env.root.join("runs")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(env.root.join("runs"), std::fs::Permissions::from_mode(0o555)).unwrap();
        env.run(&["run", "--", "true"]).code(125).one_line_error().stderr_has("cannot create run directory");
        return;
    }
    std::fs::create_dir_all(&env.root).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "ro,size=1m", "tmpfs"])
        .arg(&env.root)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("skipped: cannot mount a read-only tmpfs here");
        return;
    }
    let out = env.run(&["run", "--", "true"]);
    let _ = std::process::Command::new("umount").arg(&env.root).status();
    out.code(125).one_line_error().stderr_has("Read-only file system");
}

#[test]
fn a_full_disk_loses_nothing_already_written() {
    let env = Env::new();
    if !is_root() {
        eprintln!("skipped: mounting a small tmpfs needs root");
        return;
    }
    std::fs::create_dir_all(&env.root).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=512k", "tmpfs"])
        .arg(&env.root)
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("skipped: cannot mount a small tmpfs here");
        return;
    }
    let out = env.sh(
        "full",
        r#"
        printf small | runws put kept || exit 1
        head -c 2000000 /dev/zero | runws put huge; echo HUGE=$?
        runws get kept; echo
        runws has huge; echo HAS_HUGE=$?
        ls "$RUNWS_DIR/outputs"
        "#,
    );
    let manifest = std::fs::read_to_string(env.run_dir("full").join("manifest.json"));
    let _ = std::process::Command::new("umount").arg(&env.root).status();
    out.ok()
        .stdout_has("HUGE=125")
        .stdout_has("small")
        .stdout_has("HAS_HUGE=1")
        .stderr_has("No space left on device");
    assert!(!out.stdout.contains(".tmp"), "a temp file was left: {}", out.stdout);
    let m: serde_json::Value = serde_json::from_str(&manifest.unwrap()).unwrap();
    assert_eq!(m["outputs"].as_array().unwrap().len(), 1);
    assert_eq!(m["status"], "succeeded");
}
