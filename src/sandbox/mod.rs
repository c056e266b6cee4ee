//! `runws run --sandbox` and `runws audit` (Linux): the command runs behind
//! kernel boundaries instead of conventions.
//!
//! How a sandboxed run starts. runws prepares the run as usual, then forks
//! its child exactly as for a plain run (process group, start gate, manifest
//! written before anything runs). Past the gate the child becomes the init.
//! When runws had a single thread at the fork, it runs the init directly
//! (after closing every close-on-exec descriptor, as an exec would, and
//! staying non-dumpable, as runws is); otherwise it executes runws itself
//! as the hidden `__sandbox-init` with the [`Plan`] on a descriptor. Not as
//! root, the init needs a user namespace with its maps written, which a
//! non-dumpable process cannot write for itself: runws makes that namespace
//! before it becomes non-dumpable, while it holds nothing of the run yet
//! (`ns::own_user_namespace`), and the init enters it; when runws could not,
//! the init is the executed `__sandbox-init`, a fresh dumpable process that
//! makes its own. Either way the init is a single-threaded process, so
//! namespaces and mounts are set up with ordinary code instead of
//! async-signal-safe code between fork and exec:
//!
//! ```text
//! as root:   runws ─fork into a new PID namespace─> init (PID 1: unshare mount, net, ipc;
//!                                     mounts, /proc, lo up) ─fork─> command (PID 2)
//! otherwise: runws ─fork─> init (outer) ─enter user; unshare mount, pid, net, ipc─
//!                  └─fork─> init (PID 1: mounts, /proc, lo up) ─fork─> command (PID 2)
//! ```
//!
//! The outer init waits for PID 1 and ends the way the command ended (its
//! exit code, or the same signal), so runws records the command's own
//! status; a PID 1 that is runws's own child cannot end by a signal, so it
//! writes the command's wait status on a report pipe instead. PID 1 reaps
//! orphans and, when the command exits, ends: the kernel then kills every
//! process left in the namespace. The command stays in runws's process
//! group, so signals runws forwards and `--timeout` reach it as they would
//! without a sandbox; the inits block those signals.
//!
//! Setup problems travel back over a status pipe (one JSON line per
//! [`Report`]) that closes when the command has been executed, so runws can
//! still tell a refused sandbox (exit 125, with the reason), a missing
//! command (127) and a command that cannot be executed (126) apart, and
//! record every protection `--sandbox=try` had to go without.
//!
//! The guard inside a sandbox cannot check ancestry itself (runws is not
//! visible from inside the PID namespace) and cannot write the manifest (it
//! is read-only there), so guard calls go to runws over a socket in the
//! run's `run/` directory; see [`broker`].

pub mod audit;
pub mod broker;
pub mod init;
mod isolated;
mod kernel;
pub mod landlock;
mod landlock_plan;
mod landlock_walk;
pub mod mounts;
pub mod ns;
mod plan;
mod refused;
mod seccomp;

use std::ffi::OsString;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use crate::manifest::sandbox::{
    Backend, Enforced, Kind, LandlockRecord, Missing, Net, SandboxRecord as Record,
};
pub use isolated::Isolated;
pub use plan::{Choice, Options, mode, prepare};

use crate::error::{Error, Result};
use crate::manifest::Manifest;
use mounts::MountOp;

/// The hidden subcommand the child executes.
pub const INIT_COMMAND: &str = "__sandbox-init";

/// Everything the init needs, passed as one JSON argument.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Plan {
    pub kind: Kind,
    pub try_mode: bool,
    pub net: Net,
    /// Enter a user namespace first (runws is not root).
    pub user_namespace: bool,
    pub uid: u32,
    pub gid: u32,
    /// The runws process: the outer init dies with it.
    pub runws_pid: i32,
    pub program: PathBuf,
    pub cwd: PathBuf,
    pub run_dir: PathBuf,
    /// The sandbox's mount layout, parents first.
    #[serde(default)]
    pub mounts: Vec<MountOp>,
    /// `--allow-userns`: no filter against nested user namespaces.
    #[serde(default)]
    pub allow_userns: bool,
    /// As root: the user namespace (an inherited descriptor) whose uid 0
    /// the command becomes, an unprivileged id on the host.
    #[serde(default)]
    pub unprivileged: Option<Unprivileged>,
    /// Not as root: the user namespace runws made before it became
    /// non-dumpable (an inherited descriptor), entered instead of making
    /// one; see `ns::own_user_namespace`.
    #[serde(default)]
    pub own_userns_fd: Option<i32>,
    /// As root with `--net none`: a network namespace runws made already
    /// (an inherited descriptor), entered instead of making one.
    #[serde(default)]
    pub net_fd: Option<i32>,
    /// Where PID 1 reports the command's wait status to runws (an inherited
    /// descriptor); see [`crate::child::Watch::ended`].
    #[serde(default)]
    pub report_fd: Option<i32>,
    /// The Landlock backend: the rules the command's process enforces on
    /// itself, in place of every namespace and mount above.
    #[serde(default)]
    pub landlock: Option<landlock::Rules>,
}

/// See [`Plan::unprivileged`].
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Unprivileged {
    pub userns_fd: i32,
}

/// One line on the status pipe, from the init to runws.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Report {
    /// `--sandbox=try` went on without this protection.
    Missing(Missing),
    /// Setup failed; the run is refused.
    Failed(String),
    /// `execve` of the command failed with this errno.
    ExecFailed(i32),
}

/// The parent's side of a sandboxed run, from preparation to the end.
pub struct Setup {
    /// Shared locks on the `--cache` directories, held until the run ends.
    pub _cache_locks: Vec<crate::cache::CacheLock>,
    pub kind: Kind,
    status: Option<OwnedFd>,
    /// The command's wait status, from an init that runws forked as PID 1.
    report: Option<OwnedFd>,
    /// That status, once the watch loop has read it.
    reported: std::cell::Cell<Option<i32>>,
    pub broker: Option<broker::Server>,
    pub program: PathBuf,
    pub json: bool,
    /// What `--sandbox=try` went without before the init started.
    missing: Vec<Missing>,
    /// With `--worktree`: REPO's shared `.git`, parts of which the run could
    /// write (see `git::remove_planted`).
    pub git_common: Option<PathBuf>,
    /// The Landlock backend: the command may change the modes of what its
    /// user owns, the run directory's top level included (see
    /// [`restore_top_modes`]).
    pub landlock: bool,
    /// The Landlock backend: the ruleset the walk's thread is still
    /// filling, finished before the command's gate opens.
    pub filling: Option<landlock_walk::Filling>,
    /// `--net allow`, `audit --net`: the proxy's socket, listening in the
    /// run's network namespace, until the run is opened.
    pub proxy: Option<crate::egress::Pending>,
}

/// Puts back the modes of the run directory and its manifest files, which
/// a command under Landlock may change (it owns them; Landlock restricts no
/// `chmod`) to keep runws from recording its end. The top level holds only
/// runws's entries there (the command can create, remove or replace none),
/// so the names are runws's own files.
pub fn restore_top_modes(run_dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let set = |p: &Path, mode: u32| {
        if let Ok(m) = std::fs::symlink_metadata(p)
            && !m.file_type().is_symlink()
            && m.permissions().mode() & 0o7777 != mode
        {
            let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode));
        }
    };
    set(run_dir, 0o700);
    for name in [crate::workspace::MANIFEST, crate::workspace::FINAL_TEMP] {
        set(&run_dir.join(name), 0o644);
    }
}

impl Setup {
    /// Waits until the command has been executed (the status pipe closes)
    /// and returns what `--sandbox=try` went without. A refused setup is an
    /// error (125); a failed exec is 127 or 126 as for a plain run.
    pub fn wait_started(&mut self) -> Result<Vec<Missing>> {
        let Some(fd) = self.status.take() else { return Ok(std::mem::take(&mut self.missing)) };
        let mut text = String::new();
        std::fs::File::from(fd)
            .read_to_string(&mut text)
            .map_err(|e| Error::io("cannot read the sandbox status of", &self.program, e))?;
        let mut missing = std::mem::take(&mut self.missing);
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let report: Report = serde_json::from_str(line)
                .map_err(|e| Error::Sandbox(format!("unreadable status from the sandbox init: {e}")))?;
            match report {
                Report::Missing(m) => missing.push(m),
                Report::Failed(why) => return Err(Error::Sandbox(why)),
                Report::ExecFailed(errno) => return Err(crate::child::exec_failed(&self.program, errno)),
            }
        }
        Ok(missing)
    }
}

impl Setup {
    /// For the watch loop: the pipe on which PID 1 reports the command's
    /// end, when runws forked it (see [`crate::child::Watch::ended`]).
    pub fn ended(&self) -> Option<crate::child::Ended<'_>> {
        use std::os::fd::AsFd;
        Some(crate::child::Ended { fd: self.report.as_ref()?.as_fd(), status: &self.reported })
    }
}

impl Setup {
    /// Once the child has ended: how the command ended, when the child was
    /// PID 1 of the sandbox (a PID 1 cannot end by the command's signal, so
    /// it reports the status instead of passing it on). `None` when the
    /// child was the outer init, whose own status is the command's, or when
    /// PID 1 was killed before it could report.
    pub fn command_status(&mut self) -> Option<i32> {
        if let Some(raw) = self.reported.get() {
            return Some(raw);
        }
        let mut buf = [0u8; 4];
        // Every writer has ended (PID 1) or closed it at exec: no blocking.
        std::fs::File::from(self.report.take()?).read_exact(&mut buf).ok()?;
        Some(i32::from_ne_bytes(buf))
    }
}

/// Records the missing protections of a `--sandbox=try` run and warns once.
pub fn note_missing(m: &mut Manifest, missing: &[Missing]) {
    if missing.is_empty() {
        return;
    }
    if let Some(rec) = m.sandbox.as_mut() {
        rec.missing = missing.to_vec();
    }
    let names: Vec<&str> = missing.iter().map(|m| m.protection.as_str()).collect();
    eprintln!("runws: warning: --sandbox=try: running without {}", names.join(", "));
}

/// The init's argument list: the plan travels in a sealed-off memory file
/// (descriptor `plan_fd`), not in the arguments every `ps` shows.
pub fn init_argv(exe: &Path, status_fd: i32, plan_fd: i32, command: &[OsString]) -> Vec<OsString> {
    let mut argv: Vec<OsString> = vec![
        exe.as_os_str().to_owned(),
        INIT_COMMAND.into(),
        "--status-fd".into(),
        status_fd.to_string().into(),
        "--plan-fd".into(),
        plan_fd.to_string().into(),
        "--".into(),
    ];
    argv.extend(command.iter().cloned());
    argv
}

/// The plan as a memory file the init inherits.
pub fn plan_file(plan: &Plan) -> Result<OwnedFd> {
    use std::io::{Seek, Write};
    let json =
        serde_json::to_vec(plan).map_err(|e| Error::Sandbox(format!("cannot encode the plan: {e}")))?;
    let fd = rustix::fs::memfd_create(c"runws-plan", rustix::fs::MemfdFlags::CLOEXEC)
        .map_err(|e| Error::io("cannot create", "memfd", e.into()))?;
    let mut f = std::fs::File::from(fd);
    f.write_all(&json).and_then(|()| f.rewind()).map_err(|e| Error::io("cannot write", "memfd", e))?;
    Ok(OwnedFd::from(f))
}

impl Setup {
    /// After the command: an audit's report is recorded in the manifest and
    /// shown (a list on stderr, or JSON on stdout with `--json`).
    pub fn finish(&self, run: &crate::workspace::RunDir) -> Result<()> {
        if self.kind != Kind::Audit {
            return Ok(());
        }
        let logs = run.sub("logs")?;
        let Some(mut f) = logs.open_read("audit.json")? else {
            eprintln!("runws: audit: no report was written (the audit did not complete)");
            return Ok(());
        };
        let mut bytes = Vec::new();
        f.read_to_end(&mut bytes).map_err(|e| Error::io("cannot read", logs.join("audit.json"), e))?;
        let report: audit::Report = serde_json::from_slice(&bytes)
            .map_err(|e| Error::Sandbox(format!("unreadable audit report: {e}")))?;
        crate::manifest::update(&run.dir, false, |m| {
            m.audit = Some(report.clone());
            Ok(())
        })?;
        if self.json {
            println!("{}", String::from_utf8_lossy(&bytes));
        } else {
            eprint!("{}", audit::render(&report, &run.id));
        }
        Ok(())
    }
}
