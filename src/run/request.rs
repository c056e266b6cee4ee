//! What a run was asked for, and the checks that create nothing.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;

use super::defaults;
use super::isolation::{Isolation, Plain};
use crate::envbuild::{self, Grant};
use crate::error::{Error, IoContext};
use crate::workspace::{self, Root};

/// The command's standard input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stdin {
    /// runws's own (and, when it is runws's terminal, the terminal's
    /// foreground for the command).
    Inherit,
    /// `/dev/null`: the command reads nothing, and never takes a terminal.
    Null,
}

/// One run, as `runws run`, `runws audit`, `lane run` and `lane review` ask
/// for it. [`Request::new`] gives the defaults of `runws run`.
pub struct Request {
    /// ROOT as given (`--root`); else `RUNWS_ROOT` or the default.
    pub root: Option<PathBuf>,
    /// The lease store's URL (`--store`), else ROOT's file store.
    pub store: Option<String>,
    /// The run id to use instead of a new one.
    pub run_id: Option<String>,
    /// The job name (default: from the command's file name).
    pub job: Option<String>,
    /// The command and its arguments; never empty.
    pub command: Vec<OsString>,
    /// `--env KEY=VALUE`.
    pub env: Vec<String>,
    /// `--pass KEY` or `--pass GLOB`.
    pub pass: Vec<String>,
    /// `--env-file FILE`.
    pub env_file: Vec<PathBuf>,
    /// PATH after the run's own `bin/`.
    pub path: String,
    pub ports: u16,
    pub port_host: String,
    /// Hand the listening sockets to the command.
    pub listen: bool,
    pub inputs: Vec<PathBuf>,
    pub fingerprint: Option<String>,
    pub allow_import: Vec<String>,
    /// No timeout when `None` or zero.
    pub timeout: Option<Duration>,
    pub kill_after: Option<Duration>,
    pub lease_ttl: Duration,
    /// The lease KEY to hold while the command runs.
    pub lease: Option<String>,
    /// How long to wait for that lease.
    pub wait: Duration,
    pub capture: bool,
    /// `--json-status-fd`: the descriptor the final record is written to
    /// when the run ends.
    pub json_status_fd: Option<i32>,
    /// The repository to give the run a worktree of.
    pub worktree: Option<PathBuf>,
    pub base: String,
    /// The command's working directory (default: the run's `work/`).
    pub cwd: Option<PathBuf>,
    pub stdin: Stdin,
    /// `--ping URL`: the healthchecks-style URL told of the start and end.
    pub ping: Option<String>,
    /// How long one attempt of a ping may take.
    pub ping_timeout: Duration,
    /// `--metrics-dir DIR`: where the job's Prometheus textfile goes.
    pub metrics_dir: Option<PathBuf>,
    pub isolation: Box<dyn Isolation>,
    /// Where relative paths of the command are taken from, instead of the
    /// current directory (a replay's: the original's).
    pub invoked_from: Option<PathBuf>,
    /// Files copied into `inputs/` as the recorded imports of another run,
    /// each checked against its record (a replay's).
    pub imports: Option<crate::fingerprint::Recorded>,
    /// The records the inputs must come out as, or the run fails before its
    /// command starts (a replay's: the original's inputs).
    pub expect_inputs: Option<Vec<crate::manifest::InputRecord>>,
    /// Recorded as the run's `replay_of`.
    pub replay_of: Option<crate::manifest::ReplayOf>,
    /// `--memory`, `--pids`, `--cpu`, `--limits=try`.
    pub limits: crate::cgroup::Limits,
}

impl Request {
    /// `command` as `runws run -- COMMAND` runs it: every option at its
    /// default, no isolation.
    pub fn new(command: Vec<OsString>) -> Request {
        Request {
            root: None,
            store: None,
            run_id: None,
            job: None,
            command,
            env: Vec::new(),
            pass: Vec::new(),
            env_file: Vec::new(),
            path: defaults::PATH.into(),
            ports: defaults::PORTS,
            port_host: defaults::PORT_HOST.into(),
            listen: false,
            inputs: Vec::new(),
            fingerprint: None,
            allow_import: Vec::new(),
            timeout: None,
            kill_after: None,
            lease_ttl: defaults::LEASE_TTL,
            lease: None,
            wait: defaults::LEASE_WAIT,
            capture: false,
            json_status_fd: None,
            worktree: None,
            base: defaults::BASE.into(),
            cwd: None,
            stdin: Stdin::Inherit,
            ping: None,
            ping_timeout: defaults::PING_TIMEOUT,
            metrics_dir: None,
            isolation: Box::new(Plain),
            invoked_from: None,
            imports: None,
            expect_inputs: None,
            replay_of: None,
            limits: crate::cgroup::Limits::default(),
        }
    }
}

/// A request that passed every check that creates nothing: the run id, the
/// job, the grants, the inputs exist.
pub(super) struct Checked {
    pub req: Request,
    pub id: String,
    pub job: String,
    pub root: Root,
    /// The directory runws was started from: relative paths are taken from it.
    pub invoked_from: PathBuf,
    pub grants: Vec<Grant>,
}

impl Request {
    /// Checks everything that can be checked without touching the disk
    /// (except to read what the request names), so that a bad request
    /// creates nothing.
    pub(super) fn check(mut self) -> anyhow::Result<Checked> {
        if self.command.is_empty() {
            return Err(Error::Usage("a run needs a command".into()).into());
        }
        let id = match &self.run_id {
            Some(id) => {
                workspace::check_run_id(id)?;
                // `show last`, `seal last` and `replay last` mean the newest
                // run: a run named `last` could never be named.
                if id == "last" {
                    return Err(Error::Usage(
                        "--run-id `last` is reserved: `last` names the newest run in show, seal and replay"
                            .into(),
                    )
                    .into());
                }
                id.clone()
            }
            None => workspace::new_run_id()?,
        };
        // A zero timeout is no timeout at all, as for `timeout(1)`.
        self.timeout = self.timeout.filter(|t| !t.is_zero());
        if self.lease_ttl < Duration::from_millis(30) {
            return Err(Error::Usage("--lease-ttl must be at least 30ms".into()).into());
        }
        if self.listen && usize::from(self.ports) > crate::child::MAX_LISTEN {
            return Err(Error::Usage(format!(
                "--listen hands over at most {} sockets",
                crate::child::MAX_LISTEN
            ))
            .into());
        }
        let root = workspace::resolve_root(self.root.as_deref())?;
        let invoked_from = match &self.invoked_from {
            Some(dir) => dir.clone(),
            None => std::env::current_dir().context("cannot read the current directory")?,
        };
        let job = job_name(self.job.as_deref(), &self.command[0])?;
        crate::allowlist::check(&self.allow_import)?;
        let grants = self.grants()?;
        if let Some(url) = &self.ping {
            crate::ping::parse(url)?;
            if self.ping_timeout.is_zero() {
                return Err(Error::Usage("--ping-timeout must be more than 0".into()).into());
            }
        }
        if let Some(dir) = &self.metrics_dir
            && !std::fs::metadata(dir).ctx("cannot read --metrics-dir", dir)?.is_dir()
        {
            return Err(Error::Usage(format!("--metrics-dir `{}` is not a directory", dir.display())).into());
        }
        for input in &self.inputs {
            std::fs::metadata(input).ctx("cannot read input", input)?;
        }
        limits_available(&self.limits)?;
        Ok(Checked { req: self, id, job, root, invoked_from, grants })
    }

    /// The variables granted to the command, in the order given: env files,
    /// then `--env`, then `--pass`.
    fn grants(&self) -> Result<Vec<Grant>, Error> {
        let mut grants = Vec::new();
        for f in &self.env_file {
            grants.extend(envbuild::read_env_file(f)?);
        }
        for e in &self.env {
            grants.push(envbuild::parse_env_arg(e)?);
        }
        for key in &self.pass {
            if envbuild::is_glob(key) {
                grants.extend(envbuild::expand_glob(key, std::env::vars_os().map(|(k, _)| k))?);
                continue;
            }
            envbuild::check_key(key)?;
            grants.push(Grant::Pass { key: key.clone() });
        }
        Ok(grants)
    }
}

/// A job name: the id alphabet, so it is safe as a path component later.
fn job_name(job: Option<&str>, program: &OsString) -> Result<String, Error> {
    if let Some(job) = job {
        workspace::check_job(job)?;
        return Ok(job.to_string());
    }
    let base = Path::new(program).file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
    let mut job: String = base
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' })
        .take(workspace::MAX_RUN_ID)
        .collect();
    if !job.chars().next().is_some_and(|c| c.is_ascii_alphanumeric()) {
        job.insert(0, 'j');
        job.truncate(workspace::MAX_RUN_ID);
    }
    Ok(job)
}

/// Refuses limits no control group can be made for here, unless `try`.
pub fn limits_available(limits: &crate::cgroup::Limits) -> Result<(), Error> {
    if limits.any()
        && !limits.try_mode
        && let Err(why) = crate::cgroup::available(limits)
    {
        return Err(Error::Usage(format!("cannot limit the run: {why}; --limits=try runs without")));
    }
    Ok(())
}
