//! Prepared: everything between creating the run directory and forking the
//! command. The first record is assembled, its final record's space is
//! reserved, then the inputs are copied, the ports reserved, the
//! environment built, the worktree added and the isolation prepared; each is
//! recorded in the manifest as it is made.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::Context;
use nix::sys::signal::SigSet;
use nix::sys::signalfd::SignalFd;

use super::end::record_failure;
use super::isolation::Preparing;
use super::lease::RunLease;
use super::request::{Checked, Request, Stdin};
use crate::capture::Capture;
use crate::child::{self, Spec};
use crate::envbuild::{self, RunPaths};
use crate::error::{Error, IoContext};
use crate::fingerprint;
use crate::fsx::{DirLock, Reserved};
use crate::manifest::{self, Claim, ClaimKind, EnvRecord, Manifest, ProcessRecord, Status};
use crate::ports::{self, Ports};
use crate::procinfo;
use crate::workspace::{self, Root, RunDir};

/// A run whose directory, record and command are ready: the next step is
/// the fork.
pub(super) struct Prepared<'r> {
    pub run: &'r RunDir,
    pub req: Request,
    pub root: Root,
    pub m: Manifest,
    /// The final record's temp file, its space reserved (see
    /// [`manifest::reserve`]); `None` once used.
    pub final_slot: Option<Reserved<'r>>,
    pub spec: Spec,
    /// The command's working directory, as the host sees it.
    pub cwd: PathBuf,
    pub capture: Option<Capture>,
    pub ports: Ports,
    pub lease: Option<RunLease>,
    pub signals: SignalFd,
    /// The lock that marks the run directory as being made, held until the
    /// first record exists (see [`RunDir::creating`]).
    pub creating: Option<DirLock>,
    /// The run's control group, when it has limits.
    pub group: Option<crate::cgroup::Group>,
}

/// This process as the supervisor of a run, until dropped: not dumpable, a
/// subreaper, the forwarded signals blocked and read from a signalfd.
/// Dropping it puts the signal mask and the subreaper flag back as they
/// were, so a caller that goes on after the run (`lane review`) can be
/// stopped as usual; it stays non-dumpable, having held the command's
/// environment.
pub(super) struct Supervisor {
    mask: SigSet,
    was_subreaper: bool,
}

impl Supervisor {
    /// Takes over; returns the descriptor the forwarded signals arrive on.
    pub(super) fn start() -> anyhow::Result<(Supervisor, SignalFd)> {
        // The command's environment may hold secrets: keep same-user
        // processes (the command among them) from reading ours through
        // /proc/<pid>/environ.
        nix::sys::prctl::set_dumpable(false).ctx("cannot make runws non-dumpable", "prctl")?;
        // The command's orphans are reparented to runws instead of init, so
        // they keep their descent from runws, which is what makes a process
        // part of the run for the guard (see `child::watch` for their reaping).
        let was_subreaper = nix::sys::prctl::get_child_subreaper().unwrap_or(false);
        nix::sys::prctl::set_child_subreaper(true).ctx("cannot make runws a subreaper", "prctl")?;
        let mask = SigSet::thread_get_mask().ctx("cannot read the signal mask", "runws")?;
        let signals = child::block_signals()?;
        Ok((Supervisor { mask, was_subreaper }, signals))
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        let _ = self.mask.thread_set_mask();
        if !self.was_subreaper {
            let _ = nix::sys::prctl::set_child_subreaper(false);
        }
    }
}

/// Prepares the run in `run`, just created. A failure is recorded in the
/// run's manifest (when there is room for one) before it is returned.
pub(super) fn prepare<'r>(
    run: &'r RunDir,
    creating: Option<DirLock>,
    checked: Checked,
    lease: Option<RunLease>,
    signals: SignalFd,
) -> anyhow::Result<Prepared<'r>> {
    let Checked { mut req, id, job, root, invoked_from, grants } = checked;
    let mut m = first_record(&req, &id, job, &invoked_from);
    // Before the first record: a run with a record is in the index (or,
    // made by an older runws, found by the next reader of the index).
    crate::runindex::record(
        &root,
        &id,
        &m.job,
        manifest::parse_time(&m.started_at).unwrap_or_else(SystemTime::now),
        run.runs_before.as_ref(),
    );
    if let Some(l) = &lease {
        m.lease = Some(l.record());
    }
    // The final record's temp file, with its disk space, before anything
    // else needs space: a run that could not record its end never starts
    // (see [`manifest::reserve`]); nothing has run in the directory yet.
    let final_slot = match manifest::reserve(&run.dir, &m) {
        Ok(slot) => slot,
        Err(e) => {
            if let Err(w) = run.discard() {
                eprintln!("runws: warning: cannot remove the run directory: {w}");
            }
            return Err(e).with_context(|| format!("cannot reserve the record of run `{id}`"));
        }
    };
    // The group is made right here, on this thread: a thread of its own
    // cost more to start and join than the few directories and limit files
    // it made (see BENCHMARKS.md, "Limits").
    let made_group = make_group(&req, &root, &id);
    let mut ports = Ports::none();
    let made = make(&mut req, grants, lease.as_ref(), run, &root, &invoked_from, &mut m, &mut ports);
    let group = match record_group(made_group, &req, &mut m) {
        Ok(g) => g,
        Err(e) => return Err(record_failure(run, m, e, Some(final_slot))),
    };
    // Inputs, ports and the environment are recorded now: room for them.
    let grown = final_slot.allocate(m.to_json().len() as u64 + manifest::FINAL_ROOM);
    let (spec, capture, cwd) = match (made, grown) {
        (Ok(p), Ok(())) => p,
        (Err(e), _) | (Ok(_), Err(e)) => return Err(record_failure(run, m, e, Some(final_slot))),
    };
    Ok(Prepared {
        run,
        req,
        root,
        m,
        final_slot: Some(final_slot),
        spec,
        cwd,
        capture,
        ports,
        lease,
        signals,
        creating,
        group,
    })
}

/// The run's control group (`None` without limits), or why it could not be
/// made (see [`crate::cgroup::Group::create`]).
fn make_group(req: &Request, root: &Root, id: &str) -> Result<Option<crate::cgroup::Group>, String> {
    if !req.limits.any() {
        return Ok(None);
    }
    crate::cgroup::Group::create(&crate::cgroup::name(root.path(), id), &req.limits)
}

/// The run's control group, recorded when it has limits; with
/// `--limits=try`, a group that could not be made is recorded as missing.
fn record_group(
    made: Result<Option<crate::cgroup::Group>, String>,
    req: &Request,
    m: &mut Manifest,
) -> Result<Option<crate::cgroup::Group>, Error> {
    let limits = &req.limits;
    if !limits.any() {
        return Ok(None);
    }
    let mut record = manifest::ResourcesRecord {
        memory_limit: limits.memory,
        pids_limit: limits.pids,
        cpu_limit: limits.cpu,
        ..Default::default()
    };
    let group = match made {
        Ok(g) => g,
        Err(why) if limits.try_mode => {
            eprintln!("runws: warning: running without limits: {why}");
            record.missing = Some(why);
            None
        }
        Err(why) => return Err(Error::Usage(format!("cannot limit the run: {why}"))),
    };
    record.group = group.as_ref().map(|g| g.kind().to_string());
    record.group_dirs = group.as_ref().map(|g| g.dirs()).unwrap_or_default();
    m.resources = Some(record);
    Ok(group)
}

/// The run's first record: who asked for what, nothing made yet.
fn first_record(req: &Request, id: &str, job: String, invoked_from: &Path) -> Manifest {
    let me = std::process::id() as i32;
    Manifest {
        schema: manifest::SCHEMA,
        run_id: id.to_string(),
        job,
        argv: req.command.iter().map(|a| a.to_string_lossy().to_string()).collect(),
        program: None,
        cwd: String::new(),
        invoked_from: invoked_from.display().to_string(),
        host: procinfo::hostname(),
        uid: nix::unistd::getuid().as_raw(),
        runws: ProcessRecord { pid: me, start_time: procinfo::stat(me).map(|s| s.start_time).unwrap_or(0) },
        child: None,
        started_at: manifest::format_time(SystemTime::now()),
        finished_at: None,
        status: Status::Running,
        exit_code: None,
        signal: None,
        error: None,
        lease_ttl_ms: req.lease_ttl.as_millis() as u64,
        lease_until: manifest::now_plus(req.lease_ttl),
        timeout_ms: req.timeout.map(|t| t.as_millis() as u64),
        env: Vec::new(),
        ports: Vec::new(),
        listen: req.listen,
        capture: req.capture,
        inputs: Vec::new(),
        input_fingerprint: fingerprint::combine(&[]),
        fingerprint: req.fingerprint.clone(),
        outputs: Vec::new(),
        claims: Vec::new(),
        reap: None,
        allow_import: None,
        audit: None,
        checkpoint: None,
        held: None,
        lease: None,
        pings: None,
        refused: None,
        replay: None,
        replay_of: req.replay_of.clone(),
        resources: None,
        restored: None,
        net: None,
        sandbox: None,
        truncated: None,
        worktree: None,
        extra: Default::default(),
    }
}

/// Everything the command needs, made in the run directory and recorded in
/// `m`: inputs, ports, environment, worktree, working directory, program,
/// capture, isolation.
#[allow(clippy::too_many_arguments)]
fn make(
    req: &mut Request,
    grants: Vec<envbuild::Grant>,
    lease: Option<&RunLease>,
    run: &RunDir,
    root: &Root,
    invoked_from: &Path,
    m: &mut Manifest,
    ports: &mut Ports,
) -> Result<(Spec, Option<Capture>, PathBuf), Error> {
    let exe = std::env::current_exe().ctx("cannot find the runws binary", "/proc/self/exe")?;
    run.sub("bin")?.symlink(&exe, "runws")?;

    let inputs = run.sub("inputs")?;
    m.inputs = fingerprint::copy_inputs(&req.inputs, &inputs)?;
    if let Some(recorded) = &req.imports {
        m.inputs.extend(fingerprint::copy_recorded(recorded, &inputs)?);
        m.inputs.sort_by(|a, b| a.path.cmp(&b.path));
    }
    m.input_fingerprint = fingerprint::combine(&m.inputs);
    if let Some(expected) = &req.expect_inputs {
        fingerprint::check_same(expected, &m.inputs, inputs.path())?;
    }

    *ports = ports::reserve(req.ports, &req.port_host, &root.ports_ledger())?;
    m.ports = ports.records.clone();

    let prefix = workspace::prefix_for(&run.id);
    let paths = RunPaths {
        run_id: &run.id,
        run_dir: run.path(),
        root,
        job: &m.job,
        prefix: &prefix,
        path_tail: &req.path,
        ports: &ports.records,
    };
    let mut env = envbuild::build(&paths, grants)?;
    let mut vars = Vec::new();
    if let Some(l) = lease {
        // The command publishes with this token, so it must reach the same
        // store the token came from (the URL's value is never recorded),
        // unless its isolation reaches the store for it.
        vars = vec![("RUNWS_FENCE", l.token.to_string()), ("RUNWS_LEASE_KEY", l.key.clone())];
        if req.isolation.shows_store() {
            vars.push(("RUNWS_STORE", l.url.clone()));
        }
    } else if let Some(url) = req.store.as_deref().filter(|u| crate::fleet::keeps_fleet(Some(u)))
        && !req.allow_import.is_empty()
        && req.isolation.shows_store()
    {
        // A plain run that says whose outputs it imports reaches the fleet
        // view for a run of another host (an isolated one's runws does).
        vars.push(("RUNWS_STORE", url.to_string()));
    }
    // With the store, the archive store such an import may read.
    if vars.iter().any(|(k, _)| *k == "RUNWS_STORE")
        && let Ok(Some(crate::archive_store::Place::S3(store))) = crate::archive_store::configured(None)
    {
        vars.push((crate::archive_store::ENV, store.url()));
    }
    if !vars.is_empty() {
        for (name, value) in vars {
            env.vars.insert(name.into(), value.into());
            env.record.push(EnvRecord {
                name: name.into(),
                granted: false,
                source: "runws".into(),
                present: true,
            });
        }
        env.record.sort_by(|a, b| a.name.cmp(&b.name));
    }
    let mut listen: Vec<OwnedFd> = Vec::new();
    if req.listen {
        for s in std::mem::take(&mut ports.sockets) {
            listen.push(OwnedFd::from(s));
        }
        env.vars.insert("LISTEN_FDS".into(), listen.len().to_string().into());
        let names: Vec<&str> = ports.records.iter().map(|p| p.var.as_str()).collect();
        env.vars.insert("LISTEN_FDNAMES".into(), names.join(":").into());
        env.record.extend(envbuild::listen_record());
        env.record.sort_by(|a, b| a.name.cmp(&b.name));
    }
    m.env = env.record;

    let mut cwd = run.path().join("work");
    let worktree = match &req.worktree {
        Some(repo) => {
            let added = add_worktree(&invoked_from.join(repo), &req.base, run, root, m)?;
            cwd = added.path.clone();
            Some(added)
        }
        None => None,
    };
    if let Some(c) = &req.cwd {
        cwd = invoked_from.join(c);
    }
    m.cwd = cwd.display().to_string();
    let path_var = env.vars.get("PATH").cloned().unwrap_or_default();
    let program = if req.command[0] == "runws" {
        exe.clone()
    } else {
        child::resolve(&req.command[0], &path_var, invoked_from)?
    };
    m.program = Some(program.display().to_string());
    envbuild::size::check(&env.vars, &m.env, &program, &req.command)?;

    let capture = if req.capture { Some(Capture::open(run)?) } else { None };
    let (stdout, stderr) = match &capture {
        Some(c) => (
            Some(c.out_w.try_clone().ctx("cannot duplicate", "pipe")?),
            Some(c.err_w.try_clone().ctx("cannot duplicate", "pipe")?),
        ),
        None => (None, None),
    };
    let stdin = match req.stdin {
        Stdin::Inherit => None,
        Stdin::Null => Some(OwnedFd::from(std::fs::File::open("/dev/null").ctx("cannot open", "/dev/null")?)),
    };
    let mut spec = Spec {
        program,
        argv: req.command.clone(),
        env: env.vars.into_iter().collect(),
        cwd: cwd.clone(),
        listen,
        stdin,
        stdout,
        stderr,
        foreground: req.stdin == Stdin::Inherit && foreground(),
        keep: Vec::new(),
        in_process: None,
        in_process_keep: Vec::new(),
        pid_namespace: false,
        own_memory: false,
        confine: None,
        join_groups: Vec::new(),
    };
    let at = Preparing { run, root, exe: &exe, allow_import: &req.allow_import, worktree: worktree.as_ref() };
    req.isolation.prepare(&at, &mut spec, m)?;
    Ok((spec, capture, cwd))
}

/// Adds the run's worktree of `repo` at `<run>/repo` on the branch
/// `runws/<run id>`, and records it, and its branch, as claims runws made.
fn add_worktree(
    repo: &Path,
    base: &str,
    run: &RunDir,
    root: &Root,
    m: &mut Manifest,
) -> Result<crate::worktree::Added, Error> {
    let added = crate::worktree::add(
        repo,
        &run.path().join("repo"),
        &format!("runws/{}", run.id),
        base,
        &root.store_locks(),
    )?;
    let now = manifest::format_time(SystemTime::now());
    let repo = Some(added.repo.display().to_string());
    for (kind, value) in
        [(ClaimKind::Worktree, added.path.display().to_string()), (ClaimKind::Branch, added.branch.clone())]
    {
        m.claims.push(Claim {
            kind,
            value,
            repo: repo.clone(),
            start_time: None,
            claimed_at: now.clone(),
            made_by_runws: true,
        });
    }
    m.worktree = Some(manifest::WorktreeRecord {
        base: added.base.clone(),
        branch: added.branch.clone(),
        path: added.path.display().to_string(),
        repo: added.repo.display().to_string(),
        extra: Default::default(),
    });
    Ok(added)
}

/// True when runws owns the terminal on stdin: the command is then made the
/// terminal's foreground group, so it can read the terminal and gets ^C.
fn foreground() -> bool {
    let stdin = std::io::stdin();
    rustix::termios::isatty(&stdin)
        && rustix::termios::tcgetpgrp(&stdin).is_ok_and(|group| group == rustix::process::getpgrp())
}
