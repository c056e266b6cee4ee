//! `runws run`: create the run, build its world, start the command, watch it,
//! record how it ended.
//!
//! Order matters. Everything that can be checked without touching disk (the
//! run id, grants, env files) is checked first, so a bad invocation creates
//! nothing. Then the run directory is created exclusively; from there on a
//! failure is recorded in the run's manifest before runws exits 125 (or
//! 126/127 when the command cannot run).

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::{Duration, SystemTime};

use anyhow::Context;

mod end;

use end::{exit_code, finish, not_started, record_failure};

use super::lease::RunLease;
use crate::capture::Capture;
use crate::child::{self, Outcome, Spec, Watch};
use crate::cli::{AuditArgs, RunArgs};
use crate::envbuild::{self, Grant, RunPaths};
use crate::error::{Error, IoContext};
use crate::exit;
use crate::fingerprint;
use crate::manifest::{self, ChildRecord, Manifest, ProcessRecord, Status};
use crate::ports::{self, Ports};
use crate::procinfo;
use crate::sandbox;
use crate::workspace::{self, RunDir};

/// How long a command runs before its first manifest is synced to disk.
const FIRST_SYNC_DELAY: Duration = Duration::from_millis(20);

/// A job name: the id alphabet, so it is safe as a path component later.
fn job_name(args: &RunArgs) -> Result<String, Error> {
    if let Some(job) = &args.job {
        workspace::check_job(job)?;
        return Ok(job.clone());
    }
    let base =
        Path::new(&args.command[0]).file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
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

/// `--run-id`, else `RUNWS_RUN_ID` as a scheduler sets it. Inside a run
/// (RUNWS_DIR set) that variable is the enclosing run's own id, so a nested
/// `runws run` gets a new id instead of colliding with its parent.
fn requested_run_id(args: &RunArgs) -> Option<String> {
    if let Some(id) = &args.run_id {
        return Some(id.clone());
    }
    if std::env::var_os("RUNWS_DIR").is_some() {
        return None;
    }
    std::env::var_os("RUNWS_RUN_ID").map(|v| v.to_string_lossy().into_owned())
}

fn collect_grants(args: &RunArgs) -> Result<Vec<Grant>, Error> {
    let mut grants = Vec::new();
    for f in &args.env_file {
        grants.extend(envbuild::read_env_file(f)?);
    }
    for e in &args.env {
        grants.push(envbuild::parse_env_arg(e)?);
    }
    for key in &args.pass {
        envbuild::check_key(key)?;
        grants.push(Grant::Pass { key: key.clone() });
    }
    Ok(grants)
}

fn lossy(args: &[OsString]) -> Vec<String> {
    args.iter().map(|a| a.to_string_lossy().to_string()).collect()
}

pub fn run(args: RunArgs, root: Option<&Path>, store: Option<&str>) -> anyhow::Result<u8> {
    let isolation = sandbox::Options::for_run(&args);
    run_in(args, root, store, isolation)
}

/// `runws audit`: a run whose command sees the real file system through a
/// copy-on-write layer (see [`crate::sandbox::audit`]).
pub fn audit(args: AuditArgs, root: Option<&Path>, store: Option<&str>) -> anyhow::Result<u8> {
    let isolation = sandbox::Options::for_audit(&args.run, args.json)?;
    run_in(args.run, root, store, Some(isolation))
}

fn run_in(
    mut args: RunArgs,
    root: Option<&Path>,
    store: Option<&str>,
    isolation: Option<sandbox::Options>,
) -> anyhow::Result<u8> {
    // Checks that create nothing.
    let id = match requested_run_id(&args) {
        Some(id) => {
            workspace::check_run_id(&id)?;
            id
        }
        None => workspace::new_run_id()?,
    };
    // `--timeout 0` is no timeout at all, as for `timeout(1)`.
    args.timeout = args.timeout.filter(|t| !t.is_zero());
    if args.lease_ttl < Duration::from_millis(30) {
        return Err(Error::Usage("--lease-ttl must be at least 30ms".into()).into());
    }
    if args.listen && usize::from(args.ports) > child::MAX_LISTEN {
        return Err(Error::Usage(format!("--listen hands over at most {} sockets", child::MAX_LISTEN)).into());
    }
    let root = workspace::resolve_root(root)?;
    let invoked_from = std::env::current_dir().context("cannot read the current directory")?;
    let job = job_name(&args)?;
    crate::allowlist::check(&args.allow_import)?;
    let grants = collect_grants(&args)?;
    for input in &args.inputs {
        std::fs::metadata(input).ctx("cannot read input", input)?;
    }

    // Like `flock -n`: a held lease stops the run before anything exists.
    let mut lease = match &args.lease {
        Some(key) => Some(RunLease::acquire(&root, store, key, &id, args.lease_ttl, args.wait)?),
        None => None,
    };

    // The command's environment may hold secrets: keep same-user processes
    // (the command among them) from reading ours through /proc/<pid>/environ.
    nix::sys::prctl::set_dumpable(false).ctx("cannot make runws non-dumpable", "prctl")?;
    // The command's orphans are reparented to runws instead of init, so
    // they keep their descent from runws, which is what makes a process
    // part of the run for the guard (see `child::watch` for their reaping).
    nix::sys::prctl::set_child_subreaper(true).ctx("cannot make runws a subreaper", "prctl")?;
    let signals = child::block_signals()?;

    let mut run = RunDir::create(&root, &id)?;
    let me = std::process::id() as i32;
    let mut m = Manifest {
        schema: manifest::SCHEMA,
        run_id: id.clone(),
        job: job.clone(),
        argv: lossy(&args.command),
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
        lease_ttl_ms: args.lease_ttl.as_millis() as u64,
        lease_until: manifest::now_plus(args.lease_ttl),
        timeout_ms: args.timeout.map(|t| t.as_millis() as u64),
        env: Vec::new(),
        ports: Vec::new(),
        listen: args.listen,
        capture: args.capture,
        inputs: Vec::new(),
        input_fingerprint: fingerprint::combine(&[]),
        fingerprint: args.fingerprint.clone(),
        outputs: Vec::new(),
        claims: Vec::new(),
        reap: None,
        allow_import: None,
        audit: None,
        checkpoint: None,
        held: None,
        lease: None,
        refused: None,
        restored: None,
        sandbox: None,
        truncated: None,
        worktree: None,
        extra: Default::default(),
    };

    if let Some(l) = &lease {
        m.lease = Some(l.record());
    }
    // The final record's temp file, with its disk space, before anything
    // else needs space: a run that could not record its end never starts
    // (see [`manifest::reserve`]); nothing has run in the directory yet.
    let mut final_slot = match manifest::reserve(&run.dir, &m) {
        Ok(slot) => Some(slot),
        Err(e) => {
            if let Err(w) = run.discard() {
                eprintln!("runws: warning: cannot remove the run directory: {w}");
            }
            return Err(e).with_context(|| format!("cannot reserve the record of run `{id}`"));
        }
    };
    let mut ports = Ports::none();
    let fence = lease.as_ref().map(|l| (l.key.clone(), l.token, l.url.clone()));
    let prepared = prepare(
        &args,
        grants,
        fence,
        &run,
        &root,
        &job,
        &invoked_from,
        &mut m,
        &mut ports,
        isolation.as_ref(),
    );
    // Inputs, ports and the environment are recorded now: room for them.
    let grown = final_slot.as_ref().map(|s| s.allocate(m.to_json().len() as u64 + manifest::FINAL_ROOM));
    let (spec, capture, mut isolated) = match (prepared, grown) {
        (Ok(p), None | Some(Ok(()))) => p,
        (Err(e), _) | (Ok(_), Some(Err(e))) => return record_failure(&run, m, e, final_slot.take()),
    };
    let program = spec.program.clone();
    let took_terminal = spec.foreground;
    // The terminal's modes as runws found them: the command may change
    // them (raw mode, echo off) and end without putting them back.
    let terminal_modes =
        if took_terminal { nix::sys::termios::tcgetattr(std::io::stdin()).ok() } else { None };

    // Fork, record the child, then let it exec.
    let bracket = procinfo::Bracket::open();
    let paused = match child::spawn_paused(spec) {
        Ok(p) => p,
        Err(e) => return record_failure(&run, m, e, final_slot.take()),
    };
    let pid = paused.pid();
    let start_time =
        bracket.start_time().or_else(|| procinfo::stat(pid.as_raw()).map(|s| s.start_time)).unwrap_or(0);
    m.child = Some(ChildRecord { pid: pid.as_raw(), pgid: pid.as_raw(), start_time });
    // The record must exist before the command runs; reaching the disk
    // happens while it runs.
    let first_sync = match manifest::write_first(&run.dir, &m) {
        Ok(t) => t,
        Err(e) => {
            paused.abandon();
            // The command never ran: say why in its reserved record.
            return record_failure(&run, m, e, final_slot.take())
                .with_context(|| format!("cannot record run `{id}`"));
        }
    };
    // The record names the run now: the creation lock goes. Dropping it
    // unlocks the open file description, so a copy of the descriptor in a
    // child that has not executed yet (a sandbox's init never does) holds
    // nothing.
    drop(run.creating.take());
    // From here on every write of runws's puts back the fields it owns: the
    // command may have edited the file (see [`manifest::Owner`]).
    let mut record = manifest::Owner::new(m);
    if !args.listen {
        // The command binds these ports itself; the ledger still holds them.
        ports.close_sockets();
    }
    let started = match paused.open_gate(&program) {
        Ok(s) => s,
        Err(e) => return Ok(not_started(&run, &mut record, e, final_slot.take())),
    };
    // --- sandbox: guard calls from inside reach runws over the run's socket
    // (listening already: a call made before this thread runs waits for it).
    if let Some(broker) = isolated.as_mut().and_then(|s| s.broker.take()) {
        // The run's lease as runws took it: all a sandboxed command's
        // `publish` and `lease` calls can reach.
        let leased = lease.as_ref().map(|l| sandbox::broker::RunLease {
            url: l.url.clone(),
            key: l.key.clone(),
            holder: l.holder.clone(),
            token: l.token,
            ttl: l.ttl,
        });
        broker.serve(run.path().to_path_buf(), id.clone(), root.clone(), args.allow_import.clone(), leased);
    }
    // --- end sandbox
    // While the command starts on another core: the temp file of the final
    // record is made durable now, so that only its bytes remain to write
    // when the command ends.
    if let Some(Err(e)) = final_slot.as_ref().map(|s| s.sync_entry()) {
        eprintln!("runws: warning: the final record's temp file of run `{id}` did not reach the disk: {e}");
    }
    // --- sandbox: the init reports a refused setup, or each protection
    // `--sandbox=try` went without, before the command runs.
    if let Some(setup) = isolated.as_mut() {
        match setup.wait_started() {
            Ok(missing) if !missing.is_empty() => {
                let r = record.update(&run.dir, false, |m| {
                    sandbox::note_missing(m, &missing);
                    Ok(())
                });
                if let Err(e) = r {
                    eprintln!("runws: warning: cannot record the missing protections of run `{id}`: {e}");
                }
            }
            Ok(_) => {}
            Err(e) => {
                let _ = nix::sys::wait::waitpid(pid, None);
                return Ok(not_started(&run, &mut record, e, final_slot.take()));
            }
        }
    }
    // --- end sandbox
    let tees = capture.map(|c| c.start());

    let ttl = args.lease_ttl;
    let run_dir = &run.dir;
    let mut warned = false;
    let mut renew = || {
        let lost_at = lease.as_mut().and_then(|l| l.renew());
        // Never blocked for long by a lock the command holds (see
        // `Owner::update_within`): a skipped renewal is tried again next time.
        let r = record.update_within(run_dir, RENEW_LOCK_WAIT, |m| {
            if m.status == Status::Running {
                m.lease_until = manifest::now_plus(ttl);
            }
            if let (Some(at), Some(rec)) = (&lost_at, m.lease.as_mut()) {
                rec.lost_at = Some(at.clone());
            }
            Ok(())
        });
        if let (Err(e), false) = (r, warned) {
            warned = true;
            eprintln!("runws: warning: cannot renew the lease of run `{}`: {e}", run_dir.path().display());
        }
    };
    let outcome = child::watch(
        pid,
        Watch {
            signals: &signals,
            timeout: args.timeout,
            kill_after: args.kill_after,
            renew_every: ttl / 3,
            // The first record reaches the disk once the command has run a
            // moment; a command that ends sooner is covered by the final,
            // durable record instead.
            once_after: Some((
                FIRST_SYNC_DELAY,
                Box::new(|| {
                    if let Err(e) = first_sync.sync() {
                        eprintln!(
                            "runws: warning: the first record of run `{id}` did not reach the disk: {e}"
                        );
                    }
                }),
            )),
            renew: &mut renew,
            ended: isolated.as_ref().and_then(|s| s.ended()),
        },
    );
    if took_terminal {
        restore_foreground(terminal_modes.as_ref());
    }
    if let Some(tees) = tees {
        tees.join(Duration::from_secs(2));
    }
    let mut outcome = outcome?;
    if let Some(e) = started.exec_error(&program) {
        return Ok(not_started(&run, &mut record, e, final_slot.take()));
    }
    // --- sandbox: a child that was the sandbox's PID 1 reports the command's status.
    if let Some(raw) = isolated.as_mut().and_then(|s| s.command_status()) {
        outcome = Outcome::from_wait_status(raw, outcome.timed_out);
    }
    // --- end sandbox
    // --- sandbox: nothing of the run is alive any more; what it left in the
    // parts of REPO's `.git` it could write, for a later git to follow, goes.
    if let Some(common) = isolated.as_ref().and_then(|s| s.git_common.as_ref()) {
        for p in crate::git::remove_planted(common) {
            eprintln!("runws: warning: removed `{}`: run `{id}` left it there", p.display());
        }
    }
    // --- end sandbox
    let code = exit_code(&outcome);
    // --- sandbox: record and show what an audit found.
    if let Some(setup) = isolated.as_ref()
        && let Err(e) = setup.finish(&run)
    {
        // The command's end is recorded all the same.
        eprintln!("runws: warning: cannot record the audit of run `{id}`: {e}");
    }
    // --- end sandbox
    // A lease lost while the command ran is found now at the latest, however
    // quickly the command ended after runws was stopped or starved.
    let lease_lost_at = lease.as_mut().and_then(|l| l.renew());
    finish(&run, &mut record, outcome, None, final_slot.take(), lease_lost_at)
        .with_context(|| format!("cannot record the end of run `{id}`"))?;
    if record.record().restored.is_some() {
        eprintln!(
            "runws: warning: the manifest of run `{id}` was changed by its command; runws put back what it records itself (see `restored` in the manifest)"
        );
    }
    ports.release();
    drop(lease);
    if args.seal {
        // The command's own failure is the one a caller must see first; the
        // seal's outcome is on stderr and in the manifest either way.
        let sealed = super::seal::seal_run(&run, &super::seal::options(&args.seal_opts))?;
        if code == exit::OK {
            return Ok(sealed);
        }
    }
    Ok(code)
}

/// Everything between creating the directory and forking: inputs, ports,
/// environment, program. Fills in `m`.
#[allow(clippy::too_many_arguments)]
fn prepare(
    args: &RunArgs,
    grants: Vec<Grant>,
    fence: Option<(String, u64, String)>,
    run: &RunDir,
    root: &Path,
    job: &str,
    invoked_from: &Path,
    m: &mut Manifest,
    ports: &mut Ports,
    isolation: Option<&sandbox::Options>,
) -> Result<(Spec, Option<Capture>, Option<sandbox::Setup>), Error> {
    let exe = std::env::current_exe().ctx("cannot find the runws binary", "/proc/self/exe")?;
    run.sub("bin")?.symlink(&exe, "runws")?;

    let inputs = run.sub("inputs")?;
    m.inputs = fingerprint::copy_inputs(&args.inputs, &inputs)?;
    m.input_fingerprint = fingerprint::combine(&m.inputs);

    *ports = ports::reserve(args.ports, &args.port_host, &root.join("store").join(ports::LEDGER))?;
    m.ports = ports.records.clone();

    let prefix = workspace::prefix_for(&run.id);
    let paths = RunPaths {
        run_id: &run.id,
        run_dir: run.path(),
        root,
        job,
        prefix: &prefix,
        path_tail: &args.path,
        ports: &ports.records,
    };
    let mut env = envbuild::build(&paths, grants)?;
    if let Some((key, token, store_url)) = fence {
        // The command publishes with this token, so it must reach the same
        // store the token came from (the URL's value is never recorded). A
        // sandboxed command reaches it through runws instead, and never sees
        // the URL, whose password it could otherwise read.
        let mut vars = vec![("RUNWS_FENCE", token.to_string()), ("RUNWS_LEASE_KEY", key)];
        if isolation.is_none() {
            vars.push(("RUNWS_STORE", store_url));
        }
        for (name, value) in vars {
            env.vars.insert(name.into(), value.into());
            env.record.push(crate::manifest::EnvRecord {
                name: name.into(),
                granted: false,
                source: "runws".into(),
                present: true,
            });
        }
        env.record.sort_by(|a, b| a.name.cmp(&b.name));
    }
    let mut listen: Vec<OwnedFd> = Vec::new();
    if args.listen {
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
    let mut worktree_common_dir: Option<std::path::PathBuf> = None;
    if let Some(repo) = &args.worktree {
        let added = crate::worktree::add(
            &invoked_from.join(repo),
            &run.path().join("repo"),
            &format!("runws/{}", run.id),
            &args.base,
            &root.join("store").join("locks"),
        )?;
        let now = manifest::format_time(SystemTime::now());
        let repo = Some(added.repo.display().to_string());
        for (kind, value) in
            [("worktree", added.path.display().to_string()), ("branch", added.branch.clone())]
        {
            m.claims.push(crate::manifest::Claim {
                kind: kind.into(),
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
        worktree_common_dir = Some(added.common_dir.clone());
        cwd = added.path;
    }
    if let Some(c) = &args.cwd {
        cwd = invoked_from.join(c);
    }
    m.cwd = cwd.display().to_string();
    let path_var = env.vars.get("PATH").cloned().unwrap_or_default();
    let program = if args.command[0] == "runws" {
        exe.clone()
    } else {
        child::resolve(&args.command[0], &path_var, invoked_from)?
    };
    m.program = Some(program.display().to_string());

    let capture = if args.capture { Some(Capture::open(run)?) } else { None };
    let (stdout, stderr) = match &capture {
        Some(c) => (
            Some(c.out_w.try_clone().ctx("cannot duplicate", "pipe")?),
            Some(c.err_w.try_clone().ctx("cannot duplicate", "pipe")?),
        ),
        None => (None, None),
    };
    let mut spec = Spec {
        program,
        argv: args.command.clone(),
        env: env.vars.into_iter().collect(),
        cwd,
        listen,
        stdout,
        stderr,
        foreground: foreground(),
        keep: Vec::new(),
        in_process: None,
        in_process_keep: Vec::new(),
        pid_namespace: false,
    };
    // --- sandbox: the child executes the sandbox init, which runs the command.
    let isolated = match isolation {
        Some(opts) => {
            let mut opts = opts.clone();
            // A sandboxed run's worktree commits into the repository's
            // shared object store, refs and logs: those stay writable.
            if let Some(common) = &worktree_common_dir
                && opts.kind == sandbox::Kind::Sandbox
            {
                let (rw, ro) = git_writable(common, &run.path().join("repo"), &opts)?;
                opts.rw.extend(rw);
                opts.ro.extend(ro);
            }
            let mut setup = sandbox::prepare(&opts, &mut spec, run, root, &exe, m)?;
            if opts.kind == sandbox::Kind::Sandbox {
                setup.git_common = worktree_common_dir.clone();
            }
            if let Some(rec) = m.sandbox.as_mut() {
                rec.allow_import = Some(args.allow_import.clone());
            }
            Some(setup)
        }
        None => {
            if !args.allow_import.is_empty() {
                m.allow_import = Some(args.allow_import.clone());
            }
            None
        }
    };
    // --- end sandbox
    Ok((spec, capture, isolated))
}

/// True when runws owns the terminal on stdin: the command is then made the
/// terminal's foreground group, so it can read the terminal and gets ^C.
fn foreground() -> bool {
    let stdin = std::io::stdin();
    rustix::termios::isatty(&stdin)
        && rustix::termios::tcgetpgrp(&stdin).is_ok_and(|group| group == rustix::process::getpgrp())
}

/// Takes the terminal back after the command's group held it. SIGTTOU is
/// blocked in runws, so this cannot stop runws.
/// How long a lease renewal waits for the run directory's lock.
const RENEW_LOCK_WAIT: Duration = Duration::from_millis(100);

fn restore_foreground(modes: Option<&nix::sys::termios::Termios>) {
    let _ = rustix::termios::tcsetpgrp(std::io::stdin(), rustix::process::getpgrp());
    if let Some(modes) = modes {
        let _ = nix::sys::termios::tcsetattr(std::io::stdin(), nix::sys::termios::SetArg::TCSADRAIN, modes);
    }
}

/// What of REPO a sandboxed worktree run may write: what a commit on its
/// own branch writes (the shared `objects/`, `refs/` and `logs/`, and the
/// worktree's own directory under `worktrees/`) and the worktree itself;
/// every other part of the shared `.git` stays read-only (and visible, even
/// under a hidden home). Git reads programs to run from many files there
/// (`config`, `config.worktree`, `hooks/`, `info/attributes`, the same under
/// `modules/` for each submodule and under `worktrees/` for every other
/// worktree), and the worktree's own `commondir`, `gitdir` and
/// `config.worktree` stay read-only too: a run could otherwise plant one for
/// the user's next git, or runws's. Returns the paths for `--rw` and `--ro`; one the user named
/// with `--rw`, `--ro` or `--hide` is left to that flag. A symlink among
/// them is refused: it could be replaced from inside, the mount staying on
/// its target.
fn git_writable(
    common: &Path,
    worktree: &Path,
    opts: &sandbox::Options,
) -> Result<(Vec<std::path::PathBuf>, Vec<std::path::PathBuf>), Error> {
    let named: Vec<std::path::PathBuf> = opts
        .rw
        .iter()
        .chain(&opts.ro)
        .chain(&opts.hide)
        .filter_map(|p| std::fs::canonicalize(p).ok())
        .collect();
    let plain_dir = |p: &Path| -> Result<std::path::PathBuf, Error> {
        if std::fs::symlink_metadata(p).is_err() {
            std::fs::create_dir(p).ctx("cannot create", p)?;
        }
        if !std::fs::symlink_metadata(p).ctx("cannot read", p)?.is_dir() {
            return Err(Error::Usage(format!(
                "`{}` is not a plain directory (a symlink could be replaced from inside a sandboxed worktree run)",
                p.display()
            )));
        }
        std::fs::canonicalize(p).ctx("cannot resolve", p)
    };
    // The worktree's own directory, as its `.git` file names it (runws just
    // made it with `git worktree add`): it must lie in `common/worktrees/`.
    let link = std::fs::read_to_string(worktree.join(".git")).ctx("cannot read", worktree.join(".git"))?;
    let admin = link
        .strip_prefix("gitdir: ")
        .map(|p| std::path::PathBuf::from(p.trim_end()))
        .filter(|p| {
            p.parent() == Some(common.join("worktrees").as_path())
                && matches!(p.components().next_back(), Some(std::path::Component::Normal(_)))
        })
        .ok_or_else(|| {
            Error::Other(format!(
                "`{}` does not name a directory under `{}/worktrees`",
                worktree.display(),
                common.display()
            ))
        })?;
    let mut rw = vec![worktree.to_path_buf()];
    for p in [common.join("objects"), common.join("refs"), common.join("logs"), admin.clone()] {
        rw.push(plain_dir(&p)?);
    }
    let mut ro = vec![plain_dir(common)?];
    // In the worktree's own directory, what tells git where the repository
    // is (`commondir`, `gitdir`) and the worktree's own configuration: a
    // run that rewrote them would choose the configuration, and so the
    // programs, of every later git in its worktree. `config.worktree` is
    // made empty where missing, so it cannot be created from inside.
    for name in ["commondir", "gitdir", "config.worktree"] {
        let p = admin.join(name);
        if name == "config.worktree" && std::fs::symlink_metadata(&p).is_err() {
            std::fs::write(&p, "").ctx("cannot create", &p)?;
        }
        if !std::fs::symlink_metadata(&p).ctx("cannot read", &p)?.is_file() {
            return Err(Error::Usage(format!("`{}` is not a plain file", p.display())));
        }
        ro.push(p);
    }
    let keep = |v: Vec<std::path::PathBuf>| v.into_iter().filter(|p| !named.contains(p)).collect();
    Ok((keep(rw), keep(ro)))
}
