//! A git worktree per run: the command works on its own branch and index of
//! a shared repository.
//!
//! `git worktree add` puts the repository at `ROOT/runs/<id>/repo` on a new
//! branch `runws/<id>`. Adding worktrees and setting `gc.auto=0` (so a `git
//! gc` in one run cannot prune objects another run's worktree needs) both
//! write the repository's shared files, so they are serialised per
//! repository with a lock under `ROOT/store/locks/`. Both the worktree and
//! the branch are recorded as claims (marked as made by runws), so `reap`
//! removes exactly them. This module also holds the rules by which a claimed
//! worktree or branch is a run's own, for `claim` and `reap` alike.

use std::path::{Component, Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use sha2::Digest;

use crate::error::{Error, IoContext, Result};
use crate::git;
use crate::hex::encode as hex;
use crate::workspace::RunDir;

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
    let top = git::run(repo, &["rev-parse", "--show-toplevel"])
        .map_err(|e| Error::Usage(format!("--worktree `{}` is not a git repository: {e}", repo.display())))?;
    let top = PathBuf::from(top);
    let common = git::run(&top, &["rev-parse", "--path-format=absolute", "--git-common-dir"])?;
    let base_commit = git::run(&top, &["rev-parse", "--verify", &format!("{base}^{{commit}}")])
        .map_err(|_| Error::Usage(format!("--base `{base}` is not a commit of `{}`", top.display())))?;

    // What an earlier sandboxed run may have left for this git to follow.
    for p in git::remove_planted(Path::new(&common)) {
        eprintln!("runws: warning: removed `{}` from `{common}`: a run left it there", p.display());
    }
    crate::fsx::create_private_dirs(locks).ctx("cannot create", locks)?;
    let lock_path = locks.join(format!("git-{}", &hex(&sha2::Sha256::digest(common.as_bytes()))[..16]));
    let lock_file = crate::fsx::open_lock_file(&lock_path).ctx("cannot open", &lock_path)?;
    let _lock = Flock::lock(lock_file, FlockArg::LockExclusive)
        .map_err(|(_, e)| Error::io("cannot lock", &lock_path, e.into()))?;

    if git::run(&top, &["config", "--local", "--get", "gc.auto"]).ok().as_deref() != Some("0") {
        git::run(&top, &["config", "--local", "gc.auto", "0"])?;
    }
    let p = path.to_str().ok_or_else(|| Error::Usage("the run directory is not valid UTF-8".into()))?;
    // Checking files out runs the filters the repository names: see `git`.
    git::run_converting(&top, &["worktree", "add", "--quiet", "-b", branch, p, &base_commit])?;
    Ok(Added {
        repo: top,
        common_dir: PathBuf::from(common),
        path: path.to_path_buf(),
        branch: branch.to_string(),
        base: base_commit,
    })
}

/// Where a claimed worktree stands, once it is proven the run's own.
#[derive(Debug)]
pub(crate) enum Owned {
    /// Inside the run's directory and listed by its repository: the path
    /// relative to the run directory, and as git lists it.
    Present { rel: Vec<String>, listed: PathBuf },
    /// Not on disk, but still listed by the repository.
    Registered { listed: PathBuf },
    /// Neither on disk nor listed.
    Gone,
}

/// Why a claimed worktree is not removed.
#[derive(Debug)]
pub(crate) enum NotOwned {
    /// It is not proven the run's: kept on purpose.
    Refused(String),
    /// The proof could not be made (git or the file system failed).
    Failed(String),
}

impl NotOwned {
    pub(crate) fn message(&self) -> &str {
        match self {
            NotOwned::Refused(m) | NotOwned::Failed(m) => m,
        }
    }
}

/// Proves that `path` is a worktree of `repo` lying inside run `run`'s own
/// directory: a plain path below it (after resolving the run directory,
/// with no symlink on the way and never the run's evidence), which `git
/// worktree list` of `repo` names. The error says why it is not.
pub(crate) fn owned(run: &RunDir, path: &str, repo: &Path) -> std::result::Result<Owned, NotOwned> {
    let refused = |why: &str| NotOwned::Refused(why.to_string());
    let path = Path::new(path);
    let real_run = std::fs::canonicalize(run.path())
        .map_err(|e| NotOwned::Failed(format!("cannot resolve the run directory: {e}")))?;
    let rel = path
        .strip_prefix(run.path())
        .or_else(|_| path.strip_prefix(&real_run))
        .map_err(|_| NotOwned::Refused(format!("not inside the run directory `{}`", run.path().display())))?;
    let mut parts = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(p) => parts.push(p.to_str().ok_or_else(|| refused("not UTF-8"))?.to_string()),
            _ => return Err(refused("not a plain path inside the run directory")),
        }
    }
    match parts.first().map(String::as_str) {
        None => return Err(refused("that is the run directory itself")),
        Some("manifest.json" | "inputs" | "outputs" | "logs") => {
            return Err(refused("the run's evidence is never a worktree"));
        }
        Some(_) => {}
    }
    let mut dir = run.sub(".").map_err(|e| NotOwned::Failed(e.to_string()))?;
    let mut present = true;
    for p in &parts {
        dir = match dir.sub(p) {
            Ok(d) => d,
            Err(Error::Symlink { .. }) => return Err(refused("a symlink is on the way")),
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                present = false;
                break;
            }
            Err(e) => return Err(NotOwned::Failed(e.to_string())),
        };
    }
    let real = parts.iter().fold(real_run, |p, c| p.join(c));
    let list = match git::run(repo, &["worktree", "list", "--porcelain"]) {
        Ok(l) => l,
        // Nothing of the run's is left on disk, and the repository cannot
        // be asked (it may be gone itself): nothing to do.
        Err(_) if !present => return Ok(Owned::Gone),
        Err(e) => return Err(NotOwned::Failed(e.to_string())),
    };
    let listed = list
        .lines()
        .filter_map(|l| l.strip_prefix("worktree "))
        .map(PathBuf::from)
        .find(|l| *l == real || l == path);
    match (present, listed) {
        (true, Some(listed)) => Ok(Owned::Present { rel: parts, listed }),
        (true, None) => Err(NotOwned::Refused(format!("not a worktree of `{}`", repo.display()))),
        (false, Some(listed)) => Ok(Owned::Registered { listed }),
        (false, None) => Ok(Owned::Gone),
    }
}

/// True when branch `name` is one runws gives run `run_id`: `runws/<id>`,
/// any name with a `/`-separated part that starts with the run's
/// `RUNWS_PREFIX`, or a name of two parts or more one of which is the run
/// id (a bare run id could be any branch: `main`).
pub(crate) fn branch_is_the_runs(run_id: &str, name: &str) -> bool {
    let prefix = crate::workspace::prefix_for(run_id);
    let parts: Vec<&str> = name.split('/').collect();
    parts.iter().any(|p| p.starts_with(&prefix)) || (parts.len() > 1 && parts.contains(&run_id))
}

/// A branch name runws will pass to git: no option, no `..`, no space or
/// control character, not empty.
pub(crate) fn plain_branch_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('-')
        && !name.contains("..")
        && !name.chars().any(|c| c.is_whitespace() || c.is_control())
}
