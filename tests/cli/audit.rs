//! `runws audit`: what a command does outside its run is reported, and
//! none of it happens.

use crate::harness::*;
use crate::sandbox::{Retry, Who, everyone, runws_as, skip};

#[test]
fn audit_reports_home_cache_tmp_and_a_deletion_and_none_of_them_happened() {
    for who in everyone() {
        if skip(who, "audit") {
            continue;
        }
        let env = Env::new();
        let doomed = env.home.join("old-notes.txt");
        std::fs::write(&doomed, "keep me\n").unwrap();
        if who == Who::Nobody {
            // As for a real user, the home (and the directory holding it)
            // belongs to the user: an unprivileged layer cannot copy up a
            // directory owned by someone else.
            for p in [env.tmp.path(), &env.home, &doomed] {
                std::os::unix::fs::chown(p, Some(65534), Some(65534)).unwrap();
            }
        }
        let tmp_name = format!("runws-audit-{}", uuid::Uuid::now_v7().simple());
        let script = r#"printf '[user]\n\tname = audited\n' > "$HOME/.gitconfig"
            mkdir -p "$HOME/.cache/x" && echo y > "$HOME/.cache/x/y"
            echo z > "/tmp/$1"
            rm "$HOME/old-notes.txt"
            echo w > "$RUNWS_DIR/work/inside""#;
        let out = Out::from(
            runws_as(
                &env,
                who,
                &["audit", "--json", "--run-id", "a", "--", "sh", "-c", script, "sh", &tmp_name],
            )
            .output_retrying(),
        );
        out.ok();
        let report: serde_json::Value =
            serde_json::from_str(&out.stdout).expect("the report is JSON on stdout");
        let home = std::fs::canonicalize(&env.home).unwrap().display().to_string();
        let find =
            |path: &str| report["changes"].as_array().unwrap().iter().find(|c| c["path"] == path).cloned();
        let expect = [
            (format!("{home}/.gitconfig"), "created"),
            (format!("{home}/.cache"), "created"),
            (format!("{home}/.cache/x/y"), "created"),
            (format!("/tmp/{tmp_name}"), "created"),
            (format!("{home}/old-notes.txt"), "deleted"),
        ];
        for (path, change) in &expect {
            let c = find(path).unwrap_or_else(|| panic!("{who:?}: {path} missing from {report:#}"));
            assert_eq!(c["change"], *change, "{path}");
        }
        // The workspace is not audited.
        assert!(
            report["changes"]
                .as_array()
                .unwrap()
                .iter()
                .all(|c| !c["path"].as_str().unwrap().contains("/runs/a"))
        );
        // Nothing happened on the real file system; the workspace write did.
        assert!(!env.home.join(".gitconfig").exists());
        assert!(!env.home.join(".cache").exists());
        assert!(!std::path::Path::new("/tmp").join(&tmp_name).exists());
        assert_eq!(std::fs::read_to_string(&doomed).unwrap(), "keep me\n");
        assert_eq!(std::fs::read_to_string(env.run_dir("a").join("work/inside")).unwrap(), "w\n");
        // The manifest holds the same report.
        let m = env.manifest("a");
        assert_eq!(m["audit"], report);
        assert_eq!(m["sandbox"]["kind"], "audit");
    }
}

#[test]
fn audit_prints_a_list_and_changes_to_existing_files_are_told_apart() {
    if skip(Who::Me, "audit_list") {
        return;
    }
    let env = Env::new();
    std::fs::write(env.home.join(".profile"), "a\n").unwrap();
    std::fs::write(env.home.join(".touched"), "t\n").unwrap();
    let out = env.run(&[
        "audit",
        "--",
        "sh",
        "-c",
        "echo b >> $HOME/.profile; touch $HOME/.touched; chmod 600 $HOME/.touched",
    ]);
    out.ok()
        .stderr_has("runws: audit of run")
        .stderr_has("none reached the file system")
        .stderr_has(".profile (content)")
        .stderr_has(".touched (mode");
    assert_eq!(std::fs::read_to_string(env.home.join(".profile")).unwrap(), "a\n");
    // A run that changes nothing says so; audit and --sandbox do not mix.
    env.run(&["audit", "--", "true"]).ok().stderr_has("no changes outside the run");
    env.run(&["audit", "--sandbox", "--", "true"]).code(125).one_line_error();
}

/// A mount whose point is not UTF-8 in the mount table (a user's FUSE
/// mount on the host) does not make the audit refuse: it read the table
/// as text and gave up on any byte that was not UTF-8.
#[test]
fn a_mount_named_in_bytes_that_are_not_utf8_does_not_refuse_the_audit() {
    if !is_root() || skip(Who::Me, "audit_odd_mount") {
        return;
    }
    let env = Env::new();
    let out = crate::limits::with_a_mount_named_in_bytes(
        &env,
        &["audit", "--run-id", "odd", "--", "sh", "-c", "echo x > \"$HOME/touched\""],
    );
    out.ok();
    assert!(!env.home.join("touched").exists(), "the audited write reached the home");
    assert!(out.stderr.contains("touched"), "the audit did not report the write: {out:?}");
}
