//! Every git process runws starts, started one way: nothing a run wrote
//! into a repository is ever executed by runws.
//!
//! A run can write a repository's `.git` (a plain `--worktree` run can
//! write anything its user can), and git executes programs named by a
//! repository's files: hooks, `core.fsmonitor`, `core.hooksPath`, filter
//! drivers selected by `.gitattributes`, and many keys used only by
//! commands runws never runs (pagers, editors, transports, credential
//! helpers, signing, external diffs). runws runs git later on the same
//! repositories: `run --worktree`, `reap`, `lane` commands. The policy:
//!
//! - **An environment built from empty.** `PATH` (runws's own), `HOME` and
//!   `XDG_CONFIG_HOME` set to `/dev/null` (no user configuration can exist
//!   below it), `LC_ALL=C`, no system or global configuration
//!   (`GIT_CONFIG_NOSYSTEM`, `GIT_CONFIG_GLOBAL=/dev/null`), no system
//!   attributes (`GIT_ATTR_NOSYSTEM`), no prompts, no replace objects, no
//!   lazy fetch of missing objects, no transport at all
//!   (`GIT_ALLOW_PROTOCOL` empty), `cat` as pager and `true` as editor. So
//!   `GIT_DIR`, `GIT_CONFIG_*`, `GIT_EXEC_PATH` or a `GIT_SSH_COMMAND` in
//!   runws's own environment never reach git either.
//! - **Command-line configuration, which outranks the repository's.** Every
//!   key that names one program is set on the command line (`-c`), where it
//!   wins over anything in `.git/config` or its includes, and is handed on
//!   to every git git itself starts: `core.hooksPath=/dev/null` (no hook
//!   runs, wherever it lives), `core.fsmonitor=false`, `core.pager`,
//!   `core.editor`, `core.sshCommand`, `core.askPass`, `core.gitProxy`,
//!   `core.alternateRefsCommand`, `core.attributesFile=/dev/null`,
//!   `sequence.editor`, `gpg.program` (and its `ssh`/`x509` forms), an
//!   empty `credential.helper` list, `protocol.allow=never`,
//!   `submodule.recurse=false`, `gc.auto=0` and `maintenance.auto=false`
//!   (so no `git gc` starts behind a command, with its `gc.*Hook`s), and
//!   signing off. `--no-pager` is always given.
//! - **Named drivers, neutralised by name.** Filter drivers
//!   (`filter.<name>.clean`, `smudge`, `process`) cannot be overridden by
//!   one key: attributes (`.gitattributes` in the tree, `.git/info/
//!   attributes`) pick any name. Before a command that converts file
//!   contents (`worktree add`, `add`), runws reads the repository's
//!   configuration files itself, with includes off (`git config --file F
//!   --no-includes --list`, the shared `config` and both `config.worktree`
//!   files, found through `rev-parse --git-common-dir`, so a `commondir`
//!   file pointing elsewhere is followed as git follows it), and sets every
//!   filter name it finds to empty commands with `required=false`: the file
//!   is checked out or added as it is stored. A configuration that includes
//!   another file (`include.*`, `includeIf.*`) is refused, since what it
//!   includes could name more drivers. Diff and merge drivers only run in
//!   commands runws never runs (runws's diffs pass `--no-ext-diff
//!   --no-textconv`; it never merges).
//! - **Ownership is git's to check.** `safe.directory` is never set: a
//!   repository owned by another user is refused by git itself, and the
//!   step that needed it fails and says so. That check exists for exactly
//!   this threat, and costs nothing for a user's own repositories.
//!
//! What remains: a live process that rewrites a repository's configuration
//! between runws's reading it and git's may add a filter name (the window is
//! one `git` start; with `--sandbox --worktree` the configuration is
//! read-only to the run). Git LFS files are checked out as their pointers,
//! as the user's global configuration (where `git lfs install` puts its
//! filter) is never read.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::error::{Error, Result};
use crate::fsx::walk::{Entry, Failure, Kind, Order, Visit, Visitor, Walk};

/// Keys that name one program, each set on the command line to something
/// that runs nothing of the repository's.
const OVERRIDES: &[&str] = &[
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.pager=cat",
    "core.editor=true",
    "core.sshCommand=false",
    "core.askPass=false",
    "core.gitProxy=false",
    "core.alternateRefsCommand=true",
    "core.attributesFile=/dev/null",
    "sequence.editor=true",
    "gpg.program=false",
    "gpg.ssh.program=false",
    "gpg.x509.program=false",
    "credential.helper=",
    "protocol.allow=never",
    "submodule.recurse=false",
    "gc.auto=0",
    "maintenance.auto=false",
    "commit.gpgSign=false",
    "tag.gpgSign=false",
    "log.showSignature=false",
];

/// `git -C dir` with the policy of the module docs; add arguments and run.
pub(crate) fn command(dir: &Path) -> Command {
    let mut c = Command::new("git");
    c.env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into()))
        .env("HOME", "/dev/null")
        .env("XDG_CONFIG_HOME", "/dev/null")
        .env("LC_ALL", "C")
        .env("LANG", "C")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_SYSTEM", "/dev/null")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_ATTR_NOSYSTEM", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_OPTIONAL_LOCKS", "0")
        .env("GIT_NO_REPLACE_OBJECTS", "1")
        .env("GIT_NO_LAZY_FETCH", "1")
        .env("GIT_ALLOW_PROTOCOL", "")
        .env("GIT_PROTOCOL_FROM_USER", "0")
        .env("GIT_PAGER", "cat")
        .env("PAGER", "cat")
        .env("GIT_EDITOR", "true")
        .env("GIT_SEQUENCE_EDITOR", "true")
        .arg("--no-pager")
        .arg("-C")
        .arg(dir)
        .stdin(Stdio::null());
    for kv in OVERRIDES {
        c.arg("-c").arg(kv);
    }
    c
}

/// Runs `c` to its end, holding [`crate::child::OWN_CHILD`] so that a watch
/// loop reaping the command's orphans in runws does not take git's exit.
fn wait_for(mut c: Command) -> std::io::Result<std::process::Output> {
    let _own = crate::child::OWN_CHILD.lock().unwrap_or_else(|e| e.into_inner());
    c.output()
}

/// Runs `c`; its stdout, right-trimmed, or an error with git's stderr.
pub(crate) fn output(c: Command, what: &str) -> Result<String> {
    let out = wait_for(c).map_err(|e| Error::Other(format!("cannot run git to {what}: {e}")))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(Error::Other(format!("git failed to {what}: {}", err.trim().replace('\n', "; "))));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim_end().to_string())
}

/// Runs `git -C repo ARGS`; its trimmed stdout, or an error with git's stderr.
pub(crate) fn run(repo: &Path, args: &[&str]) -> Result<String> {
    let mut c = command(repo);
    c.args(args);
    let out = wait_for(c).map_err(|e| Error::Other(format!("cannot run git: {e}")))?;
    if !out.status.success() {
        return Err(Error::Other(format!(
            "git {} in `{}` failed: {}",
            args.join(" "),
            repo.display(),
            String::from_utf8_lossy(&out.stderr).trim().replace('\n', "; ")
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The repository's own git directory and its shared one, absolute.
pub(crate) fn dirs(repo: &Path) -> Result<(PathBuf, PathBuf)> {
    let out = run(repo, &["rev-parse", "--path-format=absolute", "--git-dir", "--git-common-dir"])?;
    let mut lines = out.lines();
    match (lines.next(), lines.next()) {
        (Some(g), Some(c)) => Ok((PathBuf::from(g), PathBuf::from(c))),
        _ => Err(Error::Other(format!("git cannot name the git directory of `{}`", repo.display()))),
    }
}

/// The filter driver names a repository's configuration defines (see the
/// module docs); an include is refused.
fn filter_names(repo: &Path) -> Result<Vec<String>> {
    let (git_dir, common) = dirs(repo)?;
    let mut files = vec![common.join("config"), common.join("config.worktree")];
    if git_dir != common {
        files.push(git_dir.join("config.worktree"));
    }
    let mut names = Vec::new();
    for f in files.iter().filter(|f| f.is_file()) {
        let mut c = command(Path::new("/"));
        c.args(["config", "--no-includes", "--name-only", "--list", "-z", "--file"]).arg(f);
        let keys = output(c, &format!("read `{}`", f.display()))?;
        for key in keys.split('\0').filter(|k| !k.is_empty()) {
            let lower = key.to_ascii_lowercase();
            if lower.starts_with("include.") || lower.starts_with("includeif.") {
                return Err(Error::Usage(format!(
                    "git repository `{}` is refused: its configuration `{}` includes another file (`{key}`), which could name programs git would run",
                    repo.display(),
                    f.display()
                )));
            }
            // `filter.<name>.<key>`: the name is everything between.
            if let Some(rest) = key.strip_prefix("filter.").or_else(|| key.strip_prefix("FILTER."))
                && let Some((name, _)) = rest.rsplit_once('.')
            {
                if name.contains('=') || name.chars().any(char::is_control) {
                    return Err(Error::Usage(format!(
                        "git repository `{}` is refused: its configuration names a filter `{}`",
                        repo.display(),
                        name.escape_debug()
                    )));
                }
                if !names.iter().any(|n| n == name) {
                    names.push(name.to_string());
                }
            }
        }
    }
    Ok(names)
}

/// [`command`] for a command that converts file contents (checkout, add):
/// every filter the repository names is also set to run nothing.
pub(crate) fn converting(repo: &Path) -> Result<Command> {
    let names = filter_names(repo)?;
    let mut c = command(repo);
    for n in names {
        for (k, v) in [("clean", ""), ("smudge", ""), ("process", ""), ("required", "false")] {
            c.arg("-c").arg(format!("filter.{n}.{k}={v}"));
        }
    }
    Ok(c)
}

/// [`run`] through [`converting`].
pub(crate) fn run_converting(repo: &Path, args: &[&str]) -> Result<String> {
    let mut c = converting(repo)?;
    c.args(args);
    output(c, &format!("run `git {}` in `{}`", args.join(" "), repo.display()))
}

/// The parts of a repository's shared `.git` a sandboxed worktree run may
/// write (see `run --worktree`).
pub(crate) const RUN_WRITABLE: [&str; 4] = ["objects", "refs", "logs", "worktrees"];

/// Removes, from the parts of `common` (a repository's shared `.git`) that
/// a sandboxed worktree run may write, every entry that is neither a
/// regular file nor a directory: git makes none there, and git outside the
/// sandbox would follow a symlink a run left (a reflog appended to, or a
/// ref deleted, in a directory the run could not even see). Walks through
/// directory descriptors ([`crate::fsx::walk`]), never through a path, so a
/// directory swapped for a symlink meanwhile is refused, not followed;
/// every name counts, UTF-8 or not; returns what was removed.
pub(crate) fn remove_planted(common: &Path) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let Ok(top) = crate::fsx::Dir::open(common) else { return removed };
    for part in RUN_WRITABLE {
        // The parts themselves are never the run's to change (it writes
        // beneath them): one that is a symlink is the user's own layout (a
        // `git new-workdir` checkout, say), so it is left and not entered.
        let Ok(sub) = top.sub(part) else { continue };
        let walk = Walk::new().order(Order::AsListed).max_depth(64);
        let _ = walk.run_with(&sub, &mut Planted(&mut removed));
    }
    removed
}

/// The walk of [`remove_planted`]: a directory is walked (to a sane depth),
/// a regular file kept, anything else removed; what cannot be looked at is
/// passed over.
struct Planted<'a>(&'a mut Vec<PathBuf>);

impl Visitor for Planted<'_> {
    type Error = Error;

    fn entry(&mut self, e: &Entry<'_>) -> Result<Visit> {
        match e.kind() {
            Kind::Dir => return Ok(Visit::Descend),
            Kind::File | Kind::Gone => {}
            Kind::Symlink | Kind::Special => {
                if e.dir.unlink(e.name).is_ok() {
                    self.0.push(e.path());
                }
            }
        }
        Ok(Visit::Skip)
    }

    fn failed(&mut self, _: Failure) -> Result<()> {
        Ok(())
    }
}
