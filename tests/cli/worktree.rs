//! A git worktree per run: ten runs on one repository at once.

use std::path::Path;

use crate::harness::*;

fn git(repo: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git").arg("-C").arg(repo).args(args).output().unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn repo(env: &Env) -> std::path::PathBuf {
    let repo = env.path("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("README"), "base\n").unwrap();
    git(&repo, &["add", "README"]);
    git(&repo, &["-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "-m", "base"]);
    repo
}

#[test]
fn ten_concurrent_worktree_runs_each_get_a_branch_and_reap_removes_them() {
    let env = Env::new();
    let repo = repo(&env);
    let script = r#"set -e
        test "$(pwd)" = "$RUNWS_DIR/repo"
        echo "$RUN_ID" > "file-$RUN_ID"
        git add "file-$RUN_ID"
        git -c user.name=run -c user.email=run@example.invalid commit -q -m "run $RUN_ID"
        git gc --auto --quiet"#;
    let children: Vec<_> = (0..10)
        .map(|i| {
            env.cmd(&["run", "--run-id", &format!("w{i}"), "--worktree", "repo", "--", "sh", "-c", script])
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        Out::from(c.wait_with_output().unwrap()).ok();
    }
    let branches = git(&repo, &["branch", "--list", "runws/*", "--format=%(refname:short)"]);
    let mut names: Vec<&str> = branches.lines().collect();
    names.sort();
    assert_eq!(names, (0..10).map(|i| format!("runws/w{i}")).collect::<Vec<_>>());
    for i in 0..10 {
        let files = git(&repo, &["ls-tree", "--name-only", &format!("runws/w{i}")]);
        assert!(files.contains(&format!("file-w{i}")) && files.contains("README"), "{files}");
        assert_eq!(files.lines().count(), 2, "another run's file leaked into w{i}: {files}");
        assert_eq!(env.manifest(&format!("w{i}"))["worktree"]["branch"], format!("runws/w{i}"));
    }
    assert_eq!(git(&repo, &["config", "gc.auto"]).trim(), "0");
    // The user's own checkout is untouched.
    assert_eq!(git(&repo, &["status", "--porcelain"]).trim(), "");
    // Each branch holds a commit no other ref holds: kept, unless asked.
    env.run(&["reap"]).ok().stdout_has("removed worktree").stdout_has("kept branch");
    assert_eq!(git(&repo, &["branch", "--list", "runws/*"]).lines().count(), 10);
    for i in 0..10 {
        git(&repo, &["branch", "-D", &format!("runws/w{i}")]);
    }
    assert_eq!(git(&repo, &["worktree", "list"]).lines().count(), 1);
}

#[test]
fn keep_branch_keeps_the_work_and_bad_repos_are_refused() {
    let env = Env::new();
    let repo = repo(&env);
    env.run(&[
        "run",
        "--run-id",
        "kb",
        "--worktree",
        repo.to_str().unwrap(),
        "--base",
        "main",
        "--",
        "sh",
        "-c",
        "echo x > x",
    ])
    .ok();
    env.run(&["reap", "--keep-branch"]).ok().stdout_has("kept branch");
    assert!(git(&repo, &["branch", "--list", "runws/kb"]).contains("runws/kb"));
    assert!(!env.run_dir("kb").join("repo").exists());
    env.run(&["run", "--worktree", env.tmp.path().to_str().unwrap(), "--", "true"])
        .code(125)
        .one_line_error()
        .stderr_has("not a git repository");
    env.run(&["run", "--worktree", "repo", "--base", "no-such-ref", "--", "true"])
        .code(125)
        .one_line_error()
        .stderr_has("is not a commit");
}

#[test]
fn a_sandboxed_worktree_run_can_commit_and_nothing_else_of_the_repo_is_writable() {
    if crate::sandbox::skip(crate::sandbox::Who::Me, "sandboxed_worktree") {
        return;
    }
    let env = Env::new();
    let repo = repo(&env);
    let script = format!(
        r#"set -e
           echo hi > f && git add f && git -c user.name=r -c user.email=r@example.invalid commit -q -m inside
           echo x > '{}/README' 2>/dev/null || true"#,
        repo.display()
    );
    env.run(&["run", "--run-id", "sb", "--sandbox", "--worktree", "repo", "--", "sh", "-c", &script]).ok();
    assert!(git(&repo, &["log", "--oneline", "runws/sb"]).contains("inside"));
    assert_eq!(std::fs::read_to_string(repo.join("README")).unwrap(), "base\n");
}
