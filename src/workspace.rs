//! ROOT's layout, and the run directory: where it lives, how its id is
//! checked, and how it is created exactly once.
//!
//! [`Root`] names every place runws keeps under ROOT; no other module spells
//! them. `ROOT/runs/<run_id>/` holds evidence (`manifest.json`, `inputs/`,
//! `outputs/`, `work/`, `logs/`) and scratch (`home/`, `tmp/`, `cache/`,
//! `run/`, `bin/`). The directory is made with one `mkdir`, which fails when
//! anything is already there: a reused id is refused before a single byte of
//! the old run changes.

use std::ops::Deref;
use std::path::{Path, PathBuf};

use crate::error::{Error, IoContext, Result};
use crate::fsx::{Dir, DirLock};

/// Evidence: kept by the reaper and packed by a seal.
pub const EVIDENCE: [&str; 4] = ["inputs", "outputs", "work", "logs"];
/// Scratch: the child's private home, temp, caches, runtime dir and tools.
pub const SCRATCH: [&str; 5] = ["home", "tmp", "cache", "run", "bin"];
pub const MANIFEST: &str = "manifest.json";
/// The temp file runws makes for the run's final record while the command
/// runs; it becomes `manifest.json` when the command ends. Left behind only
/// by a runws that was killed, and then removed by the reaper.
pub const FINAL_TEMP: &str = ".manifest.json.final";
pub const MAX_RUN_ID: usize = 128;
/// Checks a run id against `[A-Za-z0-9][A-Za-z0-9._-]{0,127}`.
pub fn check_run_id(id: &str) -> Result<()> {
    let bad = |why| Err(Error::InvalidRunId { id: id.escape_debug().to_string(), why });
    let bytes = id.as_bytes();
    if bytes.is_empty() {
        return bad("a run id cannot be empty");
    }
    if bytes.len() > MAX_RUN_ID {
        return bad("a run id is at most 128 characters");
    }
    if !bytes[0].is_ascii_alphanumeric() {
        return bad("a run id starts with a letter or digit");
    }
    if !bytes.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-')) {
        return bad("a run id holds only letters, digits, `.`, `_` and `-`");
    }
    Ok(())
}

/// Checks a job name: the run id's alphabet, so that it is safe as the one
/// path component it becomes (`ROOT/archive/<job>`). The same rule holds
/// for `--job` and for a job read back from a manifest.
pub fn check_job(job: &str) -> Result<()> {
    check_run_id(job).map_err(|_| {
        Error::Usage(format!(
            "invalid job name `{}`: use letters, digits, `.`, `_` and `-`, starting with a letter or digit",
            job.escape_debug()
        ))
    })
}

/// A new run id: a UUIDv7, so ids sort by the time they were made. Its
/// random bits come from getrandom(2); where that is refused (a seccomp
/// profile), the run fails with a clear error instead of a panic.
pub fn new_run_id() -> Result<String> {
    let mut random = [0u8; 10];
    // A short read of 10 bytes does not happen (getrandom(2) blocks only
    // before the pool is initialised); treat it as a refusal all the same.
    let got = rustix::rand::getrandom(&mut random[..], rustix::rand::GetRandomFlags::empty());
    match got.map_err(std::io::Error::from) {
        Ok(n) if n == random.len() => {}
        Ok(_) => return Err(Error::Other("cannot get random bytes for a run id: short read".into())),
        Err(e) => return Err(Error::Other(format!("cannot get random bytes for a run id: {e}"))),
    }
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    Ok(uuid::Builder::from_unix_timestamp_millis(millis, &random).into_uuid().to_string())
}

/// A short prefix for names the run makes outside its directory
/// (containers, branches, sockets): `rw-` and 10 hex digits of the id's
/// 64-bit FNV-1a hash. Not SHA-256: a run without inputs then hashes
/// nothing with it, and skips detecting the CPU's SHA instructions (tens of
/// microseconds on a virtual machine, where each CPUID traps).
pub fn prefix_for(run_id: &str) -> String {
    let hash = run_id
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3));
    format!("rw-{:010x}", hash >> 24)
}

/// Finds ROOT: `--root` or `RUNWS_ROOT` (given as `flag`), else
/// `$XDG_STATE_HOME/runws`, else `~/.local/state/runws`. Always absolute.
pub fn resolve_root(flag: Option<&Path>) -> Result<Root> {
    let chosen = match flag {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => match std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
            Some(state) if Path::new(&state).is_absolute() => PathBuf::from(state).join("runws"),
            _ => match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
                Some(home) => PathBuf::from(home).join(".local/state/runws"),
                None => {
                    return Err(Error::Usage(
                        "cannot find a root: set --root, RUNWS_ROOT, XDG_STATE_HOME or HOME".into(),
                    ));
                }
            },
        },
    };
    if chosen.is_absolute() {
        Ok(Root(chosen))
    } else {
        let cwd = std::env::current_dir().ctx("cannot read the current directory", ".")?;
        Ok(Root(cwd.join(chosen)))
    }
}

/// `ROOT/runs`: one directory per run.
const RUNS: &str = "runs";
/// `ROOT/runs.index`: the index of runs, a hint (see `crate::runindex`).
const RUN_INDEX: &str = "runs.index";
/// `ROOT/store`: the default file store, its locks and the ports ledger.
pub const STORE: &str = "store";
/// `ROOT/archive`: sealed runs, one directory per job, and lanes' kits.
pub const ARCHIVE: &str = "archive";
/// A quarantine: where evidence that failed the secret scan is kept, under
/// an archive directory (and `ROOT/quarantine`). An archive under such a
/// directory is never trusted as clean.
pub const QUARANTINE: &str = "quarantine";
/// `ROOT/restores`: restores in progress, and the scratch of lane reviews
/// and promotions.
pub const RESTORES: &str = "restores";
/// `ROOT/uploads`: seals on their way to an archive store, staged on this
/// disk (see `crate::seal::remote`).
const UPLOADS: &str = "uploads";
/// `ROOT/fleet-queue`: fleet records waiting for the store (see `crate::fleet`).
const FLEET_QUEUE: &str = "fleet-queue";

/// ROOT: the directory holding everything runws keeps, laid out as its
/// methods name it. Reads as the path it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Root(PathBuf);

impl Deref for Root {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Root {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Root {
    /// Refuses a ROOT that does not exist, for commands that only read runs
    /// back (`ls`, `show`): a mistyped `--root` is not an empty list.
    pub fn must_exist(&self) -> Result<()> {
        match std::fs::symlink_metadata(&self.0) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(Error::Other(format!("no root at `{}`: it does not exist", crate::shown::path(&self.0))))
            }
            _ => Ok(()),
        }
    }

    /// The ROOT of which `run_dir` is `runs/<run_id>`, judged by its path
    /// alone (absolute, and named so); `None` for any other path.
    pub fn of_run_dir(run_dir: &Path, run_id: &str) -> Option<Root> {
        if !run_dir.is_absolute() || run_dir.file_name().and_then(|n| n.to_str()) != Some(run_id) {
            return None;
        }
        let runs = run_dir.parent()?;
        if runs.file_name().and_then(|n| n.to_str()) != Some(RUNS) {
            return None;
        }
        Some(Root(runs.parent()?.to_path_buf()))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// `ROOT/runs`, created (private, no symlink followed) on first use.
    pub fn runs_dir(&self, create: bool) -> Result<Dir> {
        let runs = self.0.join(RUNS);
        let opened = Dir::open(&runs);
        if create
            && matches!(&opened, Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound)
        {
            crate::fsx::create_private_dirs(&runs).ctx("cannot create", &runs)?;
            return Dir::open(&runs);
        }
        match opened {
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                Err(Error::Other(format!("no runs under `{}`", self.0.display())))
            }
            other => other,
        }
    }

    /// `ROOT/runs`, as a path (to stat it; [`Root::runs_dir`] opens it).
    pub fn runs_path(&self) -> PathBuf {
        self.0.join(RUNS)
    }

    /// `ROOT/runs.index`: the append-only index of runs (a hint; see
    /// `crate::runindex`).
    pub fn run_index(&self) -> PathBuf {
        self.0.join(RUN_INDEX)
    }

    /// `ROOT/store`: the default file store.
    pub fn store(&self) -> PathBuf {
        self.0.join(STORE)
    }

    /// `ROOT/store/locks`: locks runws takes on things outside ROOT (a
    /// repository's worktrees).
    pub fn store_locks(&self) -> PathBuf {
        self.store().join("locks")
    }

    /// `ROOT/store/ports.ledger`: the ports runs have reserved.
    pub fn ports_ledger(&self) -> PathBuf {
        self.store().join("ports.ledger")
    }

    /// `ROOT/archive/<job>`: where a run of `job` is sealed by default.
    pub fn job_archive(&self, job: &str) -> PathBuf {
        self.0.join(ARCHIVE).join(job)
    }

    /// `ROOT/archive/lanes`: lanes' kits, their receipts, and the final
    /// cards.
    pub fn kits(&self) -> PathBuf {
        self.0.join(ARCHIVE).join("lanes")
    }

    /// `ROOT/lanes`: one directory per open lane.
    pub fn lanes(&self) -> PathBuf {
        self.0.join("lanes")
    }

    /// `ROOT/lanes/<name>`.
    pub fn lane(&self, name: &str) -> PathBuf {
        self.lanes().join(name)
    }

    /// `ROOT/worktrees/<lane>`: where a promoted lane's worktree goes unless
    /// told otherwise.
    pub fn lane_worktree(&self, lane: &str) -> PathBuf {
        self.0.join("worktrees").join(lane)
    }

    /// `ROOT/restores`.
    pub fn restores(&self) -> PathBuf {
        self.0.join(RESTORES)
    }

    /// `ROOT/uploads`.
    pub fn uploads(&self) -> PathBuf {
        self.0.join(UPLOADS)
    }

    /// `ROOT/fleet-queue`: the fleet view's records its store could not
    /// take yet (see `crate::fleet`).
    pub fn fleet_queue_path(&self) -> PathBuf {
        self.0.join(FLEET_QUEUE)
    }

    /// `ROOT/fleet-queue`, opened (made first with `create`); never through
    /// a symlink planted in its place. `None` when it does not exist.
    pub fn fleet_queue(&self, create: bool) -> Result<Option<Dir>> {
        let queue = self.fleet_queue_path();
        if create {
            crate::fsx::create_private_dirs(&queue).ctx("cannot create", &queue)?;
        }
        let root = match Dir::open(&self.0) {
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                return Ok(None);
            }
            other => other?,
        };
        match root.sub(FLEET_QUEUE) {
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => Ok(None),
            other => other.map(Some),
        }
    }
}

/// The process's umask (read by setting it and putting it back).
fn current_umask() -> u32 {
    use nix::sys::stat::{Mode, umask};
    let old = umask(Mode::from_bits_truncate(0o022));
    umask(old);
    old.bits()
}

/// One run's directory, open.
pub struct RunDir {
    pub id: String,
    pub root: Root,
    pub dir: Dir,
    /// Held by the runws that made the directory until its first manifest
    /// exists: a directory without a manifest whose lock is free was left
    /// by a runws that died first; `reap` removes it.
    pub creating: Option<DirLock>,
    /// `ROOT/runs` as it was just before this run's directory was made
    /// (for the index of runs, see [`crate::runindex::record`]).
    pub runs_before: Option<nix::sys::stat::FileStat>,
}

impl std::fmt::Debug for RunDir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunDir").field("id", &self.id).field("dir", &self.dir).finish()
    }
}

impl RunDir {
    /// Creates `ROOT/runs/<id>/` and its subdirectories. Fails, changing
    /// nothing, when the directory already exists.
    pub fn create(root: &Root, id: &str) -> Result<RunDir> {
        check_run_id(id)?;
        let runs = root.runs_dir(true)?;
        let path = runs.join(id);
        let runs_before = nix::sys::stat::fstat(runs.borrow()).ok();
        // Private to its user: inputs, outputs, logs and the record are
        // nobody else's to read (see the README on sharing a run).
        match runs.mkdir(id, 0o700) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return Err(Error::RunExists { path });
            }
            Err(e) => return Err(Error::io("cannot create run directory", path, e)),
        }
        let dir = runs.sub(id)?;
        let creating = dir.lock_apart()?;
        if dir.is_removed() {
            // A reaper took the lock first, found no manifest, removed it.
            return Err(Error::Other(format!(
                "run directory `{}` was removed while it was being made; try again",
                path.display()
            )));
        }
        if let Err(e) = Self::fill(&dir) {
            // A full disk, say: no run is left that nothing could record
            // (this very directory only, never one made since under its name).
            let ours = nix::sys::stat::fstat(dir.borrow()).ok().map(|st| (st.st_dev, st.st_ino));
            if let (Some(ours), Ok(Some(now))) = (ours, runs.lstat(id))
                && (now.st_dev, now.st_ino) == ours
            {
                let _ = runs.remove_tree(id);
            }
            return Err(e);
        }
        Ok(RunDir { id: id.to_string(), root: root.clone(), dir, creating: Some(creating), runs_before })
    }

    /// Makes the subdirectories of a new run.
    fn fill(dir: &Dir) -> Result<()> {
        let umask = current_umask();
        for (name, mode) in [
            ("inputs", 0o755),
            ("outputs", 0o755),
            ("work", 0o755),
            ("logs", 0o755),
            ("home", 0o700),
            ("tmp", 0o700),
            ("cache", 0o755),
            ("run", 0o700),
            ("bin", 0o755),
        ] {
            dir.mkdir(name, mode).ctx("cannot create", dir.join(name))?;
            if mode & !umask != mode {
                // mkdir's mode is filtered by the umask; these must be exact.
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(dir.join(name), std::fs::Permissions::from_mode(mode))
                    .ctx("cannot set permissions of", dir.join(name))?;
            }
        }
        Ok(())
    }

    /// Opens an existing run; refuses a symlink in place of the run directory.
    pub fn open(root: &Root, id: &str) -> Result<RunDir> {
        check_run_id(id)?;
        let runs = root.runs_dir(false)?;
        if runs.lstat(id)?.is_none() {
            return Err(Error::NoSuchRun { run: id.to_string(), root: root.to_path_buf() });
        }
        let dir = runs.sub(id)?;
        Ok(RunDir { id: id.to_string(), root: root.clone(), dir, creating: None, runs_before: None })
    }

    /// Removes a run directory this runws has just created, before any
    /// command ran in it (a run it could not record).
    pub fn discard(&self) -> Result<()> {
        self.root.runs_dir(false)?.remove_tree(&self.id).map(drop)
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn sub(&self, name: &str) -> Result<Dir> {
        self.dir.sub(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids() {
        for ok in ["a", "0", "nightly-2026-11-30", "A.b_c-d", &"x".repeat(128)] {
            check_run_id(ok).unwrap();
        }
        for bad in
            ["", "..", ".", "-x", "_x", ".x", "a/b", "a\0b", "a b", "é", &"x".repeat(129), &"x".repeat(200)]
        {
            assert!(check_run_id(bad).is_err(), "{bad:?} accepted");
        }
        let id = new_run_id().unwrap();
        check_run_id(&id).unwrap();
        assert_eq!(uuid::Uuid::parse_str(&id).unwrap().get_version_num(), 7);
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert!(new_run_id().unwrap() > id, "a later id sorts after");
        let many: std::collections::BTreeSet<String> = (0..1000).map(|_| new_run_id().unwrap()).collect();
        assert_eq!(many.len(), 1000);
    }

    #[test]
    fn prefixes_are_short_stable_and_distinct() {
        // FNV-1a of "a" is 0xaf63dc4c8601ec8c.
        assert_eq!(prefix_for("a"), "rw-af63dc4c86");
        let ids: std::collections::BTreeSet<String> =
            (0..10_000).map(|i| prefix_for(&format!("run-{i}"))).collect();
        assert_eq!(ids.len(), 10_000);
        assert!(ids.iter().all(|p| p.len() == 13));
    }

    #[test]
    fn a_run_dir_names_its_root_by_its_path_alone() {
        let root = Root::of_run_dir(Path::new("/r/runs/id1"), "id1").unwrap();
        assert_eq!(root.path(), Path::new("/r"));
        for (dir, id) in
            [("r/runs/id1", "id1"), ("/r/runs/id1", "id2"), ("/r/other/id1", "id1"), ("/runs", "runs")]
        {
            assert!(Root::of_run_dir(Path::new(dir), id).is_none(), "{dir} accepted as run {id}");
        }
        assert_eq!(root.store_locks(), Path::new("/r/store/locks"));
        assert_eq!(root.ports_ledger(), Path::new("/r/store/ports.ledger"));
        assert_eq!(root.job_archive("nightly"), Path::new("/r/archive/nightly"));
        assert_eq!(root.kits(), Path::new("/r/archive/lanes"));
        assert_eq!(root.lane("lane-1-ab"), Path::new("/r/lanes/lane-1-ab"));
        assert_eq!(root.lane_worktree("lane-1-ab"), Path::new("/r/worktrees/lane-1-ab"));
        assert_eq!(root.restores(), Path::new("/r/restores"));
        assert_eq!(root.run_index(), Path::new("/r/runs.index"));
    }

    #[test]
    fn create_is_exclusive() {
        let tmp = tempfile::tempdir().unwrap();
        let root = resolve_root(Some(tmp.path())).unwrap();
        let run = RunDir::create(&root, "r1").unwrap();
        std::fs::write(run.path().join("work/keep"), b"x").unwrap();
        assert!(matches!(RunDir::create(&root, "r1"), Err(Error::RunExists { .. })));
        assert_eq!(std::fs::read(run.path().join("work/keep")).unwrap(), b"x");
    }
}
