//! A git worktree per run: the command works on its own branch and index of
//! a shared repository.
//!
//! `git worktree add` puts the repository at `ROOT/runs/<id>/repo` on a new
//! branch `runws/<id>`. Adding worktrees and setting `gc.auto=0` (so a `git
//! gc` in one run cannot prune objects another run's worktree needs) both
//! write the repository's shared files, so they are serialised per
//! repository with a lock under `ROOT/store/locks/`. Both the worktree and
//! the branch are recorded as claims, so `reap` removes exactly them.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use nix::fcntl::{Flock, FlockArg};
use sha2::Digest;

use crate::error::{Error, IoContext, Result};
use crate::fingerprint::hex;

/// Runs `git -C repo ARGS`; its trimmed stdout, or an error with git's stderr.
pub(crate) fn git(repo: &Path, args: &[&str]) -> Result<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| Error::Other(format!("cannot run git: {e}")))?;
    if !out.status.success() {
        return Err(Error::Other(format!(
            "git {} in `{}` failed: {}",
            args.join(" "),
            repo.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// What `add` made.
pub struct Added {
    pub repo: PathBuf,
    /// The repository's shared `.git` directory (objects, refs).
    pub common_dir: PathBuf,
    pub path: PathBuf,
    pub branch: String,
    pub base: String,
}

/// Adds a worktree of `repo` at `path` on the new branch `branch` from `base`.
pub fn add(repo: &Path, path: &Path, branch: &str, base: &str, locks: &Path) -> Result<Added> {
    let top = git(repo, &["rev-parse", "--show-toplevel"])
        .map_err(|e| Error::Usage(format!("--worktree `{}` is not a git repository: {e}", repo.display())))?;
    let top = PathBuf::from(top);
    let common = git(&top, &["rev-parse", "--path-format=absolute", "--git-common-dir"])?;
    let base_commit = git(&top, &["rev-parse", "--verify", &format!("{base}^{{commit}}")])
        .map_err(|_| Error::Usage(format!("--base `{base}` is not a commit of `{}`", top.display())))?;

    std::fs::create_dir_all(locks).ctx("cannot create", locks)?;
    let lock_path = locks.join(format!("git-{}", &hex(&sha2::Sha256::digest(common.as_bytes()))[..16]));
    let lock_file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .ctx("cannot open", &lock_path)?;
    let _lock = Flock::lock(lock_file, FlockArg::LockExclusive)
        .map_err(|(_, e)| Error::io("cannot lock", &lock_path, e.into()))?;

    if git(&top, &["config", "--get", "gc.auto"]).ok().as_deref() != Some("0") {
        git(&top, &["config", "gc.auto", "0"])?;
    }
    let p = path.to_str().ok_or_else(|| Error::Usage("the run directory is not valid UTF-8".into()))?;
    git(&top, &["worktree", "add", "--quiet", "-b", branch, p, &base_commit])?;
    Ok(Added {
        repo: top,
        common_dir: PathBuf::from(common),
        path: path.to_path_buf(),
        branch: branch.to_string(),
        base: base_commit,
    })
}
