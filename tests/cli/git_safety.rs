//! Nothing a run writes into a git repository is executed by a later runws
//! command: each test plants one of git's ways to run a program (a hook, a
//! config key, an attributes file) from inside a run, then drives the
//! runws commands that run git on that repository (`run --worktree`,
//! `reap`, `lane review`, `lane promote`) and checks that the planted
//! program never ran (it would have created a marker file).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::harness::*;
use crate::sandbox::{Retry, Who, everyone, runws_as};

pub fn git(repo: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "core.hooksPath=/dev/null"])
        .args(["-c", "safe.directory=*"])
        .args(args)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A repository with one committed file, `a`, on `main`.
pub fn repo(env: &Env, who: Who) -> PathBuf {
    let repo = env.path("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("a"), "a\n").unwrap();
    git(&repo, &["add", "a"]);
    git(&repo, &["commit", "-q", "-m", "base"]);
    if who == Who::Nobody {
        chown_tree(&repo);
    }
    repo
}

fn chown_tree(p: &Path) {
    let st = std::process::Command::new("chown").args(["-R", "65534:65534"]).arg(p).status().unwrap();
    assert!(st.success());
}

/// A directory anyone may write markers into.
fn marks(env: &Env) -> PathBuf {
    let m = env.path("marks");
    std::fs::create_dir_all(&m).unwrap();
    std::fs::set_permissions(&m, std::fs::Permissions::from_mode(0o777)).unwrap();
    m
}

#[track_caller]
fn assert_no_marks(marks: &Path, what: &str) {
    let found = tree(marks);
    assert!(found.is_empty(), "{what}: a planted program ran: {found:?}");
}

fn runws(env: &Env, who: Who, args: &[&str]) -> Out {
    Out::from(runws_as(env, who, args).output_retrying())
}

/// The preamble of every planting script: `$G` is the repository's shared
/// `.git`, `$MARK` the marker directory, `prog NAME` prints a program that
/// creates the marker NAME.
fn script(marks: &Path, body: &str) -> String {
    format!(
        r#"set -e
        G=$(git rev-parse --path-format=absolute --git-common-dir)
        MARK='{}'
        prog() {{ printf '#!/bin/sh\ntouch %s/%s\ncat\n' "$MARK" "$1"; }}
        {body}"#,
        marks.display()
    )
}

/// Run `p1` (plain, `--worktree`) plants `body`; then a second worktree run
/// on the same repository, one based on p1's branch, and the reaper all
/// run git there. Nothing planted may run.
fn planted_never_runs(who: Who, body: &str) -> (Env, PathBuf, Out) {
    let env = Env::new();
    let repo = repo(&env, who);
    let marks = marks(&env);
    let plant = script(&marks, body);
    runws(&env, who, &["run", "--run-id", "p1", "--worktree", "repo", "--", "sh", "-c", &plant]).ok();
    // The planting itself runs the programs once (git in the run's own
    // worktree, as the command): only what runws does afterwards counts.
    for f in tree(&marks) {
        std::fs::remove_file(marks.join(f)).unwrap();
    }
    let later = runws(
        &env,
        who,
        &["run", "--run-id", "p2", "--worktree", "repo", "--base", "runws/p1", "--", "true"],
    );
    runws(&env, who, &["reap", "--drop-unmerged"]);
    assert_no_marks(&marks, &format!("{who:?}"));
    (env, repo, later)
}

#[test]
fn a_hook_planted_in_the_repository_never_runs() {
    for who in everyone() {
        let (_env, _repo, later) = planted_never_runs(
            who,
            r#"for h in reference-transaction post-checkout pre-auto-gc post-index-change; do
                   prog "$h" > "$G/hooks/$h"; chmod +x "$G/hooks/$h"
               done"#,
        );
        later.ok();
    }
}

#[test]
fn a_planted_core_hooks_path_never_runs() {
    for who in everyone() {
        let (_env, _repo, later) = planted_never_runs(
            who,
            r#"mkdir -p "$RUNWS_DIR/work/hooks"
               for h in reference-transaction post-checkout; do
                   prog "$h" > "$RUNWS_DIR/work/hooks/$h"; chmod +x "$RUNWS_DIR/work/hooks/$h"
               done
               git config core.hooksPath "$RUNWS_DIR/work/hooks""#,
        );
        later.ok();
    }
}

#[test]
fn a_planted_fsmonitor_never_runs() {
    for who in everyone() {
        let (_env, _repo, later) = planted_never_runs(
            who,
            r#"prog fsmonitor > "$RUNWS_DIR/work/fsm"; chmod +x "$RUNWS_DIR/work/fsm"
               git config core.fsmonitor "$RUNWS_DIR/work/fsm""#,
        );
        later.ok();
    }
}

#[test]
fn a_filter_selected_by_info_attributes_never_runs() {
    for who in everyone() {
        let (_env, _repo, later) = planted_never_runs(
            who,
            r#"for k in smudge clean; do prog "$k" > "$RUNWS_DIR/work/$k"; chmod +x "$RUNWS_DIR/work/$k"; done
               git config filter.x.smudge "$RUNWS_DIR/work/smudge"
               git config filter.x.clean "$RUNWS_DIR/work/clean"
               git config filter.x.required true
               echo '* filter=x' > "$G/info/attributes""#,
        );
        later.ok();
    }
}

#[test]
fn a_filter_selected_by_a_committed_gitattributes_never_runs() {
    for who in everyone() {
        let (_env, _repo, later) = planted_never_runs(
            who,
            r#"echo '* filter=y' > .gitattributes
               git add .gitattributes
               git -c user.name=r -c user.email=r@example.invalid commit -q -m attrs
               prog process > "$RUNWS_DIR/work/process"; chmod +x "$RUNWS_DIR/work/process"
               git config filter.y.process "$RUNWS_DIR/work/process""#,
        );
        later.ok();
    }
}

#[test]
fn a_filter_hidden_in_an_included_file_never_runs_and_the_repository_is_refused() {
    for who in everyone() {
        let (_env, _repo, later) = planted_never_runs(
            who,
            r#"prog smudge > "$RUNWS_DIR/work/smudge"; chmod +x "$RUNWS_DIR/work/smudge"
               printf '[filter "z"]\n\tsmudge = %s\n' "$RUNWS_DIR/work/smudge" > "$RUNWS_DIR/work/inc"
               git config include.path "$RUNWS_DIR/work/inc"
               echo '* filter=z' > "$G/info/attributes""#,
        );
        later.code(125).one_line_error().stderr_has("include");
    }
}

/// Keys that run a program in commands runws never runs (network, pager,
/// editor, signing, diffs): set them all, and nothing runs either.
#[test]
fn other_program_keys_planted_in_the_config_never_run() {
    for who in everyone() {
        let (_env, _repo, later) = planted_never_runs(
            who,
            r#"P="$RUNWS_DIR/work/p"; prog other > "$P"; chmod +x "$P"
               for k in core.pager core.editor core.sshCommand core.askPass core.gitProxy \
                        core.alternateRefsCommand diff.external diff.x.command diff.x.textconv \
                        merge.x.driver credential.helper gpg.program gpg.ssh.program \
                        uploadpack.packObjectsHook sequence.editor pager.branch pager.worktree \
                        gc.recentObjectsHook; do
                   git config "$k" "$P"
               done
               git config gc.auto 1
               git config commit.gpgSign true
               echo '* diff=x merge=x' > "$G/info/attributes""#,
        );
        later.ok();
    }
}

/// runws started from inside a git hook of another repository (GIT_DIR and
/// friends set) still works on the repository it was given.
#[test]
fn git_variables_in_runws_environment_are_ignored() {
    let env = Env::new();
    let repo = repo(&env, Who::Me);
    let other = env.path("other");
    std::fs::create_dir_all(&other).unwrap();
    git(&other, &["init", "-q", "-b", "main"]);
    git(&other, &["commit", "-q", "--allow-empty", "-m", "other"]);
    let marks = marks(&env);
    let hooks = env.path("hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    let hook = hooks.join("post-checkout");
    std::fs::write(&hook, format!("#!/bin/sh\ntouch {}/env-hook\n", marks.display())).unwrap();
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut c = env.cmd(&["run", "--run-id", "e", "--worktree", "repo", "--", "true"]);
    c.env("GIT_DIR", other.join(".git"))
        .env("GIT_WORK_TREE", &other)
        .env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", "core.hooksPath")
        .env("GIT_CONFIG_VALUE_0", &hooks);
    Out::from(c.output().unwrap()).ok();
    assert_no_marks(&marks, "environment");
    assert!(git(&repo, &["branch", "--list", "runws/e"]).contains("runws/e"));
    assert!(git(&other, &["branch", "--list", "runws/e"]).trim().is_empty());
}

/// A lane's operator makes the kit's `.git` borrow its configuration from
/// a directory of the kit (`commondir`): the review's own configuration is
/// then never read, and the kit's filter would run on `git add`.
#[test]
fn a_kit_borrowing_its_git_config_runs_nothing_at_review() {
    let env = Env::new();
    let marks = marks(&env);
    let lane = crate::lane::claim(&env);
    let script = format!(
        r#"set -e
           echo hi > hello && git add hello && git commit -qm hello
           cp -r .git .evil
           rm -rf .git/objects .git/refs && mkdir .git/objects .git/refs
           echo ../.evil > .git/commondir
           printf '#!/bin/sh\ntouch {m}/kit-filter\ncat\n' > .evil/clean && chmod +x .evil/clean
           git config -f .evil/config filter.k.clean "$PWD/.evil/clean"
           echo 'hello filter=k' > .gitattributes"#,
        m = marks.display()
    );
    crate::lane::work(&env, &lane, &script).ok();
    for f in tree(&marks) {
        std::fs::remove_file(marks.join(f)).unwrap();
    }
    crate::lane::edit_replay(&env, &lane);
    let out = crate::lane::seal(&env, &lane);
    out.ok();
    let kit = PathBuf::from(out.stdout.trim());
    crate::lane::review(&env, &kit);
    assert_no_marks(&marks, "lane review");
}

/// `lane promote` runs git in the user's repository: a hook or a filter a
/// run planted there never runs.
#[test]
fn a_promotion_runs_nothing_planted_in_the_target_repository() {
    let env = Env::new();
    let marks = marks(&env);
    let repo = repo(&env, Who::Me);
    let plant = script(
        &marks,
        r#"for h in post-checkout reference-transaction; do prog "$h" > "$G/hooks/$h"; chmod +x "$G/hooks/$h"; done
           prog smudge > "$RUNWS_DIR/work/smudge"; chmod +x "$RUNWS_DIR/work/smudge"
           git config filter.x.smudge "$RUNWS_DIR/work/smudge"
           echo '* filter=x' > "$G/info/attributes""#,
    );
    env.run(&["run", "--run-id", "plant", "--worktree", "repo", "--", "sh", "-c", &plant]).ok();
    for f in tree(&marks) {
        std::fs::remove_file(marks.join(f)).unwrap();
    }
    let lane = crate::lane::claim(&env);
    crate::lane::work(&env, &lane, "echo hi > hello && git add hello && git commit -qm hello").ok();
    crate::lane::edit_replay(&env, &lane);
    let out = crate::lane::seal(&env, &lane);
    out.ok();
    let kit = PathBuf::from(out.stdout.trim());
    crate::lane::review(&env, &kit).ok();
    env.run(&["lane", "stamp", &lane, "approve", "--reviewer", "Cy"]).ok();
    let out = env.run(&["lane", "promote", &lane, "--repo", repo.to_str().unwrap()]);
    out.ok();
    assert_no_marks(&marks, "lane promote");
    let wt = PathBuf::from(out.stdout.trim());
    assert_eq!(std::fs::read_to_string(wt.join("hello")).unwrap(), "hi\n");
}

/// With `--sandbox --worktree` the run commits, but every place in REPO's
/// `.git` from which git takes a program stays read-only: config, hooks and
/// info/ (attributes, excludes), `config.worktree`, a submodule's config
/// and hooks under `modules/`, another worktree's directory; a repository
/// without `hooks/` or `info/` cannot have them created from inside.
#[test]
fn a_sandboxed_worktree_run_cannot_change_the_repositorys_config_hooks_or_attributes() {
    for who in everyone() {
        if crate::sandbox::skip(who, "sandboxed_worktree_config") {
            continue;
        }
        let env = Env::new();
        let repo = repo(&env, who);
        std::fs::remove_dir_all(repo.join(".git/hooks")).unwrap();
        std::fs::remove_dir_all(repo.join(".git/info")).unwrap();
        // What runws itself sets before the run.
        git(&repo, &["config", "gc.auto", "0"]);
        // Where git also finds configuration and hooks: a submodule's
        // repository, the main worktree's own config, another worktree.
        for d in [".git/modules/sub/hooks", ".git/worktrees/other"] {
            std::fs::create_dir_all(repo.join(d)).unwrap();
        }
        for f in [".git/modules/sub/config", ".git/config.worktree", ".git/worktrees/other/config.worktree"] {
            std::fs::write(repo.join(f), "").unwrap();
        }
        if who == Who::Nobody {
            chown_tree(&repo.join(".git"));
        }
        let config = std::fs::read(repo.join(".git/config")).unwrap();
        let script = r#"G=$(git rev-parse --path-format=absolute --git-common-dir)
            for f in "$G/hooks/post-checkout" "$G/config" "$G/info/attributes" "$G/info/exclude" \
                     "$G/config.worktree" "$G/modules/sub/config" "$G/modules/sub/hooks/post-checkout" \
                     "$G/worktrees/other/config.worktree" "$G/packed-refs" \
                     "$(git rev-parse --git-dir)/commondir" "$(git rev-parse --git-dir)/gitdir" \
                     "$(git rev-parse --git-dir)/config.worktree"; do
                if (echo x >> "$f") 2>/dev/null; then echo "WROTE $f"; fi
            done
            for d in hooks info modules; do
                mkdir -p "$G/$d" 2>/dev/null && touch "$G/$d/x" 2>/dev/null && echo "PLANTED $d"
                mv "$G/$d" "$G/$d.old" 2>/dev/null && echo "MOVED $d"
            done
            git config core.hooksPath /tmp 2>/dev/null && echo WROTE-config
            echo hi > f && git add f && git -c user.name=r -c user.email=r@example.invalid commit -q -m inside && echo COMMITTED"#;
        let out = runws(
            &env,
            who,
            &["run", "--run-id", "sb", "--sandbox", "--worktree", "repo", "--", "sh", "-c", script],
        );
        out.ok().stdout_has("COMMITTED");
        for bad in ["WROTE", "PLANTED", "MOVED"] {
            assert!(!out.stdout.contains(bad), "{who:?}:\n{}", out.stdout);
        }
        assert!(git(&repo, &["log", "--oneline", "runws/sb"]).contains("inside"));
        assert_eq!(std::fs::read(repo.join(".git/config")).unwrap(), config, "{who:?}: config changed");
        assert!(tree(&repo.join(".git/hooks")).is_empty() && tree(&repo.join(".git/info")).is_empty());
        assert_eq!(tree(&repo.join(".git/modules")), vec!["sub", "sub/config", "sub/hooks"]);
    }
}

/// A sandboxed worktree run writes REPO's `objects/`, `refs/` and `logs/`
/// to commit; symlinks it leaves there (to directories it cannot even see)
/// are removed once it ends, so neither the user's next commit nor runws's
/// next worktree or reap writes or deletes through them.
#[test]
fn symlinks_a_sandboxed_worktree_run_plants_in_git_are_never_followed() {
    for who in everyone() {
        if crate::sandbox::skip(who, "planted_git_symlinks") {
            continue;
        }
        let env = Env::new();
        let repo = repo(&env, who);
        let outside = env.path("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("file"), "precious\n").unwrap();
        std::fs::write(outside.join("passwd"), "keep\n").unwrap();
        let o = outside.display().to_string();
        let script = format!(
            r#"C=$(git rev-parse --git-common-dir); P=$RUNWS_PREFIX
            git branch "$P/passwd" HEAD
            runws claim branch "$P/passwd" --repo '{r}' && echo CLAIMED
            rm -rf "$C/logs/refs/heads/$P" && ln -s '{o}' "$C/logs/refs/heads/$P" && echo PLANTED
            rm -f "$C/logs/HEAD" && ln -s '{o}/file' "$C/logs/HEAD"
            ln -s '{o}' "$C/refs/heads/planted"; mkfifo "$C/refs/heads/fifo""#,
            r = repo.display()
        );
        let out = runws(
            &env,
            who,
            &["run", "--run-id", "s", "--sandbox", "--worktree", "repo", "--", "sh", "-c", &script],
        );
        out.ok();
        assert!(
            out.stdout.contains("CLAIMED") && out.stdout.contains("PLANTED"),
            "{who:?}:\n{}\n{}",
            out.stdout,
            out.stderr
        );
        for p in ["logs/HEAD", "refs/heads/planted", "refs/heads/fifo"] {
            let m = std::fs::symlink_metadata(repo.join(".git").join(p));
            assert!(m.is_err() || m.unwrap().is_file(), "{who:?}: {p} is still there");
        }
        // The user's next commit, and runws's next worktree and reap.
        git(
            &repo,
            &[
                "-c",
                "user.name=u",
                "-c",
                "user.email=u@example.invalid",
                "commit",
                "-q",
                "--allow-empty",
                "-m",
                "user",
            ],
        );
        runws(&env, who, &["run", "--run-id", "t", "--worktree", "repo", "--", "true"]).ok();
        runws(&env, who, &["reap"]).ok();
        assert_eq!(std::fs::read_to_string(outside.join("file")).unwrap(), "precious\n", "{who:?}");
        assert_eq!(std::fs::read_to_string(outside.join("passwd")).unwrap(), "keep\n", "{who:?}");
        assert_eq!(tree(&outside), vec!["file", "passwd"], "{who:?}");
    }
}

/// What runws removes from REPO's `.git` before its own git: only beneath
/// the parts a sandboxed run could write, never in a dry run, and never a
/// part that is itself a symlink (a `git new-workdir` layout).
#[test]
fn planted_entries_are_removed_by_reap_but_not_by_a_dry_run_and_a_symlinked_layout_is_left() {
    let env = Env::new();
    let repo = repo(&env, Who::Me);
    // The user's own layout: `logs` lives elsewhere.
    let logs = env.path("shared-logs");
    std::fs::rename(repo.join(".git/logs"), &logs).unwrap();
    std::os::unix::fs::symlink(&logs, repo.join(".git/logs")).unwrap();
    runws(&env, Who::Me, &["run", "--run-id", "w", "--worktree", "repo", "--", "true"]).ok();
    // Left behind as if by a run whose runws died before it cleaned up.
    let planted = repo.join(".git/refs/heads/planted");
    std::os::unix::fs::symlink(env.path("outside"), &planted).unwrap();
    runws(&env, Who::Me, &["reap", "--dry-run"]).ok();
    assert!(std::fs::symlink_metadata(&planted).is_ok(), "a dry run removed `{}`", planted.display());
    runws(&env, Who::Me, &["reap"]).ok();
    assert!(std::fs::symlink_metadata(&planted).is_err(), "reap left `{}`", planted.display());
    let logs_link = std::fs::symlink_metadata(repo.join(".git/logs")).unwrap();
    assert!(logs_link.file_type().is_symlink(), "the user's symlinked logs/ was removed");
}
