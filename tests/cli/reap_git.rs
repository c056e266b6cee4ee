//! The reaper acts only on the worktrees and branches a run provably owns:
//! a worktree inside the run's own directory that its repository lists, a
//! branch runws made for the run or named after it, and never a branch
//! whose commits no other ref holds (unless `--drop-unmerged`). Claims that
//! break these rules are refused when made and again when reaped (a plain
//! run can edit its own manifest).

use std::path::{Path, PathBuf};

use crate::git_safety::{git, repo};
use crate::harness::*;
use crate::sandbox::{Retry, Who, everyone, runws_as, skip};

/// A worktree of `repo` outside any run, on branch `precious`, holding
/// uncommitted work.
fn precious_worktree(env: &Env, repo: &Path) -> PathBuf {
    let wt = env.path("host-wt");
    git(repo, &["worktree", "add", "-q", "-b", "precious", wt.to_str().unwrap()]);
    std::fs::write(wt.join("uncommitted"), "work in progress\n").unwrap();
    wt
}

#[track_caller]
fn assert_precious_intact(repo: &Path, wt: &Path) {
    assert_eq!(
        std::fs::read_to_string(wt.join("uncommitted")).ok().as_deref(),
        Some("work in progress\n"),
        "the host worktree lost its work"
    );
    assert!(git(repo, &["branch", "--list", "precious"]).contains("precious"), "branch `precious` deleted");
}

fn add_claims(env: &Env, id: &str, claims: &[(&str, &str, &Path)]) {
    let path = env.run_dir(id).join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    if m["claims"].is_null() {
        m["claims"] = serde_json::json!([]);
    }
    for (kind, value, repo) in claims {
        m["claims"].as_array_mut().unwrap().push(serde_json::json!({
            "kind": kind, "value": value, "repo": repo, "claimed_at": "2024-01-01T00:00:00.000Z",
            "made_by_runws": true,
        }));
    }
    std::fs::write(&path, serde_json::to_vec(&m).unwrap()).unwrap();
}

#[test]
fn a_sandboxed_run_cannot_claim_a_host_worktree_or_branch() {
    for who in everyone() {
        if skip(who, "claim_host_worktree") {
            continue;
        }
        let env = Env::new();
        let repo = repo(&env, Who::Me);
        let wt = precious_worktree(&env, &repo);
        if who == Who::Nobody {
            for p in [&repo, &wt] {
                std::process::Command::new("chown").args(["-R", "65534:65534"]).arg(p).status().unwrap();
            }
        }
        let script = format!(
            r#"runws claim worktree '{w}' --repo '{r}' 2>&1 && echo CLAIMED-worktree
               runws claim branch precious --repo '{r}' 2>&1 && echo CLAIMED-branch
               true"#,
            w = wt.display(),
            r = repo.display()
        );
        let out = Out::from(
            runws_as(&env, who, &["run", "--run-id", "sb", "--sandbox", "--", "sh", "-c", &script])
                .output_retrying(),
        );
        out.ok();
        assert!(!out.stdout.contains("CLAIMED"), "{who:?}: a claim was accepted:\n{}", out.stdout);
        assert!(out.stdout.contains("cannot claim worktree"), "{}", out.stdout);
        assert!(out.stdout.contains("cannot claim branch"), "{}", out.stdout);
        Out::from(runws_as(&env, who, &["reap"]).output_retrying()).ok();
        assert_precious_intact(&repo, &wt);
    }
}

#[test]
fn a_run_cannot_claim_a_live_runs_worktree_and_an_edited_manifest_is_rechecked() {
    let env = Env::new();
    let repo = repo(&env, Who::Me);
    let wt = precious_worktree(&env, &repo);
    let go = env.path("go");
    let up = env.path("up");
    let live = env
        .cmd(&[
            "run",
            "--run-id",
            "b",
            "--worktree",
            "repo",
            "--",
            "sh",
            "-c",
            &format!(
                "echo mine > mine; touch '{}'; while ! test -e '{}'; do sleep 0.05; done",
                up.display(),
                go.display()
            ),
        ])
        .spawn()
        .unwrap();
    // However the test ends, the live run is let go and waited for.
    struct Release(PathBuf, std::process::Child);
    impl Drop for Release {
        fn drop(&mut self) {
            let _ = std::fs::write(&self.0, "");
            let _ = self.1.wait();
        }
    }
    let _release = Release(go.clone(), live);
    while !up.exists() {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let b_wt = env.run_dir("b").join("repo");
    let script = format!(
        r#"runws claim worktree '{b}' --repo '{r}' 2>&1 && echo CLAIMED-b
           runws claim branch runws/b --repo '{r}' 2>&1 && echo CLAIMED-b-branch
           runws claim branch precious --repo '{r}' 2>&1 && echo CLAIMED-precious
           runws claim worktree '{w}' --repo '{r}' 2>&1 && echo CLAIMED-host
           true"#,
        b = b_wt.display(),
        w = wt.display(),
        r = repo.display()
    );
    let out = env.sh("a", &script);
    out.ok();
    assert!(!out.stdout.contains("CLAIMED"), "a claim was accepted:\n{}", out.stdout);
    // The command edits its own manifest (it can, without a sandbox).
    add_claims(
        &env,
        "a",
        &[
            ("worktree", b_wt.to_str().unwrap(), &repo),
            ("branch", "runws/b", &repo),
            ("branch", "precious", &repo),
            ("worktree", wt.to_str().unwrap(), &repo),
        ],
    );
    let out = env.run(&["reap", "--drop-unmerged", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let a = v.as_array().unwrap().iter().find(|r| r["run_id"] == "a").unwrap().to_string();
    assert!(a.contains("not inside the run directory"), "{a}");
    assert!(a.contains("not a name runws gives this run"), "{a}");
    assert_precious_intact(&repo, &wt);
    assert_eq!(std::fs::read_to_string(b_wt.join("mine")).unwrap(), "mine\n", "run b's worktree was touched");
    assert!(git(&repo, &["branch", "--list", "runws/b"]).contains("runws/b"));
}

#[test]
fn a_branch_with_commits_no_other_ref_holds_is_kept_unless_drop_unmerged() {
    let env = Env::new();
    let repo = repo(&env, Who::Me);
    let commit =
        "echo x > x && git add x && git -c user.name=r -c user.email=r@example.invalid commit -q -m work";
    env.run(&["run", "--run-id", "r1", "--worktree", "repo", "--", "sh", "-c", commit]).ok();
    env.run(&["run", "--run-id", "r2", "--worktree", "repo", "--", "true"]).ok();
    let out = env.run(&["reap"]);
    out.ok().stdout_has("kept branch `runws/r1`").stdout_has("deleted branch `runws/r2`");
    assert!(git(&repo, &["branch", "--list", "runws/r1"]).contains("runws/r1"));
    assert!(!env.run_dir("r1").join("repo").exists(), "the worktree itself is removed");
    env.run(&["run", "--run-id", "r3", "--worktree", "repo", "--", "sh", "-c", commit]).ok();
    env.run(&["reap", "--drop-unmerged"]).ok().stdout_has("deleted branch `runws/r3`");
    assert!(git(&repo, &["branch", "--list", "runws/r3"]).trim().is_empty());
    // A branch named after the run (not made by runws) is also the run's.
    let script = format!(
        r#"set -e
           git -C '{r}' branch "$RUNWS_PREFIX-topic" main
           git -C '{r}' branch "feature/$RUN_ID" main
           runws claim branch "$RUNWS_PREFIX-topic" --repo '{r}'
           runws claim branch "feature/$RUN_ID" --repo '{r}'
           runws claim branch "$RUN_ID" --repo '{r}' 2>&1 || echo REFUSED-bare"#,
        r = repo.display()
    );
    env.sh("named", &script).ok().stdout_has("REFUSED-bare");
    env.run(&["reap"]).ok();
    assert!(git(&repo, &["branch", "--list", "feature/*", "rw-*"]).trim().is_empty());
}

#[test]
fn dry_run_lists_every_step_and_changes_nothing() {
    let env = Env::new();
    let _repo = repo(&env, Who::Me);
    env.run(&[
        "run",
        "--run-id",
        "d",
        "--worktree",
        "repo",
        "--",
        "sh",
        "-c",
        "mkdir -p $RUNWS_DIR/work/junk && runws claim path $RUNWS_DIR/work/junk && touch $HOME/h",
    ])
    .ok();
    // Its worktree still has the branch checked out: the plan is still
    // what the reap will find once the worktree is gone.
    let commit =
        "echo x > x && git add x && git -c user.name=r -c user.email=r@example.invalid commit -q -m work";
    env.run(&["run", "--run-id", "e", "--worktree", "repo", "--", "sh", "-c", commit]).ok();
    let before = tree(&env.root);
    let out = env.run(&["reap", "--dry-run", "--json"]);
    out.ok();
    assert_eq!(tree(&env.root), before, "a dry run changed something");
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let steps = v[0]["steps"].to_string();
    for want in [
        "would remove worktree",
        "would delete branch `runws/d`",
        "would remove path",
        "would remove scratch",
        "process group",
    ] {
        assert!(steps.contains(want), "{want:?} missing: {steps}");
    }
    let steps = v[1]["steps"].to_string();
    assert!(steps.contains("kept branch `runws/e`: commit"), "{steps}");
    env.run(&["reap", "--dry-run"]).ok().stdout_has("would remove worktree");
}

#[test]
fn keep_tears_a_run_down_before_removing_it() {
    let env = Env::new();
    let repo = repo(&env, Who::Me);
    env.run(&["run", "--run-id", "k", "--worktree", "repo", "--", "true"]).ok();
    env.run(&["reap", "--keep", "0s"]).ok().stdout_has("removed");
    assert!(!env.run_dir("k").exists());
    assert_eq!(git(&repo, &["worktree", "list", "--porcelain"]).matches("worktree ").count(), 1);
    assert!(git(&repo, &["branch", "--list", "runws/k"]).trim().is_empty());

    // A teardown that fails keeps the run.
    env.sh("bad", "true").ok();
    let path = env.run_dir("bad").join("manifest.json");
    let mut m: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    // (A claim every reader accepts, but whose repository cannot be asked.)
    let inside = env.run_dir("bad").join("work").join("wt");
    std::fs::create_dir(&inside).unwrap();
    let gone = env.path("no-such-repository");
    m["claims"] = serde_json::json!([{
        "kind": "worktree",
        "value": inside.display().to_string(),
        "repo": gone.display().to_string(),
        "claimed_at": "2024-01-01T00:00:00.000Z"
    }]);
    std::fs::write(&path, serde_json::to_vec(&m).unwrap()).unwrap();
    env.run(&["reap", "--keep", "0s"]).code(125).stdout_has("cannot remove worktree");
    assert!(env.run_dir("bad").exists());
}
