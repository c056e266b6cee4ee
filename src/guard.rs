//! The guard: what a command calls, from inside its run, to write outputs
//! stamped with its run id and to read only its own.
//!
//! `runws put/get/has/import/info/claim` and this library share one
//! implementation, the trait [`Calls`], performed one of two ways, chosen
//! when the run is opened: [`Local`], by the calling process itself (a plain
//! run), or [`Remote`], by runws over the run's socket (a sandboxed run,
//! whose command can neither see runws nor write its manifest). Every call
//! first proves it belongs to a live run: the environment's `RUNWS_DIR` and
//! `RUNWS_RUN_ID` agree, the manifest there names that run, the run is `running`, its runws process is alive (pid and
//! start time), and the caller descends from that process (each parent
//! checked by its start time, so a reused pid is no ancestor; runws is a
//! child subreaper, so the command's orphans stay its descendants). Sitting
//! in the command's process group proves nothing: another run's process of
//! the same session can join it. A spoofed `RUNWS_RUN_ID`, a process of
//! another run, or a leftover process from an earlier run is refused. Every
//! file is reached with `O_NOFOLLOW` relative to the run directory, and
//! writes are temp-then-rename, so nothing the command planted (a symlink
//! as `outputs/` or as an output file) makes the guard write or read
//! outside the run.
//!
//! Reading another run's output is refused, except through `import`: the
//! one explicit cross-run read, recorded in the inputs and the fingerprint,
//! and held to the run's `--allow-import` list when it has one (always
//! inside a sandbox; see [`crate::allowlist`]).
//!
//! ```no_run
//! let guard = runws::guard::Guard::from_env()?;
//! guard.put_bytes("report.json", b"{}")?;
//! assert!(guard.has("report.json")?);
//! # Ok::<(), runws::error::Error>(())
//! ```

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::manifest::{Claim, ClaimKind, InputRecord, Manifest};

pub(crate) mod calls;
mod elsewhere;
pub(crate) mod local;
pub(crate) mod remote;
pub(crate) mod wire;

use calls::Calls;
pub use calls::Written;
use local::Local;
pub(crate) use local::verified_output;
pub use local::{MAX_CLAIM_BYTES, MAX_CLAIMS};
use remote::Remote;

/// A handle on the current run, for the command running inside it.
#[derive(Debug)]
pub struct Guard {
    via: Via,
}

/// Who performs the calls.
#[derive(Debug)]
enum Via {
    Local(Local),
    Remote(Remote),
}

fn env_str(key: &str) -> Result<Option<String>> {
    match std::env::var_os(key) {
        None => Ok(None),
        Some(v) if v.is_empty() => Ok(None),
        Some(v) => v
            .into_string()
            .map(Some)
            .map_err(|_| Error::NotInRun { why: format!("{key} is not valid UTF-8") }),
    }
}

impl Guard {
    /// The current run, from `RUNWS_DIR`, `RUNWS_RUN_ID` and `RUNWS_ROOT`.
    pub fn from_env() -> Result<Guard> {
        let id = env_str("RUNWS_RUN_ID")?.ok_or_else(|| Error::NotInRun {
            why: "RUNWS_RUN_ID is not set (run the command under `runws run`)".into(),
        })?;
        let dir = env_str("RUNWS_DIR")?.ok_or_else(|| Error::NotInRun {
            why: "RUNWS_DIR is not set (run the command under `runws run`)".into(),
        })?;
        let root = env_str("RUNWS_ROOT")?.map(PathBuf::from);
        Guard::open(Path::new(&dir), &id, root.as_deref())
    }

    /// The run in `run_dir`, which must be `ROOT/runs/<run_id>`. A run with
    /// a `sandbox` record is served by runws over its socket; any other
    /// must count this process among its own.
    pub fn open(run_dir: &Path, run_id: &str, root: Option<&Path>) -> Result<Guard> {
        let (run, m) = match local::locate(run_dir, run_id, root) {
            Ok(found) => found,
            Err(e) => {
                let Some((id, dir)) = local::locate_sandboxed(run_dir, run_id, root) else { return Err(e) };
                return Ok(Guard { via: Via::Remote(Remote::at(id, dir)) });
            }
        };
        let via = if m.sandbox.is_some() {
            Via::Remote(Remote::new(&run))
        } else {
            Via::Local(Local::for_this(run, &m)?)
        };
        Ok(Guard { via })
    }

    fn calls(&self) -> &dyn Calls {
        match &self.via {
            Via::Local(l) => l,
            Via::Remote(r) => r,
        }
    }

    /// The socket runws serves this run on, when the run is sandboxed: it
    /// also carries the run's `publish` and `lease` calls.
    pub(crate) fn into_remote(self) -> Option<Remote> {
        match self.via {
            Via::Remote(r) => Some(r),
            Via::Local(_) => None,
        }
    }

    pub fn run_id(&self) -> &str {
        self.calls().run_id()
    }

    pub fn dir(&self) -> &Path {
        self.calls().dir()
    }

    /// The current manifest, after checking that the caller belongs to this
    /// live run.
    pub fn manifest(&self) -> Result<Manifest> {
        self.calls().manifest()
    }

    /// Writes output `name` from `reader`: `outputs/<name>.<run_id>`,
    /// atomically, recorded with its bytes and sha256.
    pub fn put(&self, name: impl AsRef<OsStr>, reader: &mut (impl Read + Send)) -> Result<Written> {
        self.calls().put(name.as_ref(), reader)
    }

    /// [`Guard::put`] from a byte slice.
    pub fn put_bytes(&self, name: impl AsRef<OsStr>, bytes: &[u8]) -> Result<Written> {
        self.put(name, &mut std::io::Cursor::new(bytes))
    }

    /// Copies output `name` of this run to `out`. `from` may only name this
    /// run: reading another run's output is refused.
    pub fn get(&self, name: impl AsRef<OsStr>, from: Option<&str>, out: &mut impl Write) -> Result<u64> {
        self.calls().get(name.as_ref(), from, out)
    }

    /// The bytes of output `name` of this run.
    pub fn read(&self, name: impl AsRef<OsStr>) -> Result<Vec<u8>> {
        let mut v = Vec::new();
        self.get(name, None, &mut v)?;
        Ok(v)
    }

    /// True only if this run recorded `name` and its bytes still match.
    pub fn has(&self, name: impl AsRef<OsStr>) -> Result<bool> {
        self.calls().has(name.as_ref())
    }

    /// Copies output `name` of the finished run `run` into
    /// `inputs/<run>/<name>`, and records it (with the producer run) in the
    /// inputs and the input fingerprint. Only from the runs the run's
    /// `--allow-import` names, when it has such a list (see
    /// [`crate::allowlist`]); a refusal is exit 3 and recorded.
    pub fn import(&self, run: &str, name: impl AsRef<OsStr>) -> Result<InputRecord> {
        self.calls().import(run, name.as_ref())
    }

    /// Records something this run created outside plain files of its own
    /// directory (`path`, `branch`, `worktree`, `pgid`), for `reap`. A
    /// worktree must lie inside the run's directory and be listed by its
    /// repository; a branch must carry the run's id or `RUNWS_PREFIX` in its
    /// name (see [`crate::worktree`]); a process group is accepted only when
    /// its leader is alive and it and every member descend from this run's
    /// runws; anything else is refused here, and again by the reaper.
    /// Inside a sandbox a `pgid` claim is accepted but not recorded: its
    /// numbers mean nothing outside the PID namespace, and every process of
    /// a sandboxed run ends with the run anyway.
    pub fn claim(&self, kind: &str, value: &str, repo: Option<&Path>) -> Result<Claim> {
        self.calls().claim(&ClaimKind::from(kind), value, repo)
    }
}
