//! `runws run` and `runws audit`: the command line turned into a
//! [`Request`] for the run pipeline ([`crate::run`]), and `--seal` after it.

use std::path::Path;

use crate::cli::{AuditArgs, RunArgs};
use crate::error::Error;
use crate::exit;
use crate::run::{self, Isolation, Plain, Request};
use crate::sandbox::{self, Isolated, Kind};

pub fn run(args: RunArgs, root: Option<&Path>, store: Option<&str>) -> anyhow::Result<u8> {
    if args.sandbox.is_none() && (args.net.is_some() || !args.resolve.is_empty()) {
        let what = if args.net.is_some() { "--net" } else { "--resolve" };
        return Err(Error::Usage(format!(
            "{what} needs --sandbox: without the sandbox's network namespace nothing would enforce it"
        ))
        .into());
    }
    let isolation: Box<dyn Isolation> = match sandbox_options(&args)? {
        Some(opts) => Box::new(Isolated::new(opts)),
        None => Box::new(Plain),
    };
    run_with(args, root, store, isolation)
}

/// `runws audit`: a run whose command sees the real file system through a
/// copy-on-write layer (see [`crate::sandbox::audit`]).
pub fn audit(args: AuditArgs, root: Option<&Path>, store: Option<&str>) -> anyhow::Result<u8> {
    if args.run.sandbox.is_some() {
        return Err(Error::Usage("`runws audit` cannot be combined with --sandbox".into()).into());
    }
    let (net, egress) =
        crate::egress::choose(args.run.net.as_deref(), &args.run.resolve, true).map_err(Error::Usage)?;
    let opts = sandbox::Options {
        kind: Kind::Audit,
        try_mode: false,
        net,
        egress,
        rw: Vec::new(),
        ro: Vec::new(),
        hide: Vec::new(),
        caches: Vec::new(),
        json: args.json,
        allow_userns: true,
        backend: sandbox::Choice::Namespaces,
    };
    run_with(args.run, root, store, Box::new(Isolated::new(opts)))
}

/// The sandbox options of `run`, or `None` without `--sandbox`.
fn sandbox_options(args: &RunArgs) -> Result<Option<sandbox::Options>, Error> {
    let Some(mode) = args.sandbox.as_deref() else { return Ok(None) };
    let (try_mode, backend) = sandbox::mode(mode);
    let (net, egress) =
        crate::egress::choose(args.net.as_deref(), &args.resolve, false).map_err(Error::Usage)?;
    Ok(Some(sandbox::Options {
        kind: Kind::Sandbox,
        try_mode,
        backend,
        net,
        egress,
        rw: args.rw.clone(),
        ro: args.ro.clone(),
        hide: args.hide.clone(),
        caches: args.cache.clone(),
        json: false,
        allow_userns: args.allow_userns,
    }))
}

fn run_with(
    args: RunArgs,
    root: Option<&Path>,
    store: Option<&str>,
    isolation: Box<dyn Isolation>,
) -> anyhow::Result<u8> {
    // A bad `--to` or archive store is refused before the command runs.
    let seal = args.seal.then(|| super::seal::options(&args.seal_opts)).transpose()?;
    let in_work = args.cwd.is_none() && args.worktree.is_none();
    let command = args.command.clone();
    let finished = run::run(request(args, root, store, isolation))?;
    if finished.started
        && finished.code != exit::OK
        && finished.interrupted.is_none()
        && let Some(hint) = super::hint::misplaced(&command, &finished.invoked_from, &finished.cwd, in_work)
    {
        eprintln!("runws: {hint}");
    }
    // A command that never ran left nothing to seal.
    let Some(opts) = seal.filter(|_| finished.started) else { return Ok(finished.code) };
    // The command's own failure is the one a caller must see first; the
    // seal's outcome is on stderr and in the manifest either way.
    let sealed = super::seal::seal_run(&finished.run, &opts, store)?;
    Ok(if finished.code == exit::OK { sealed } else { finished.code })
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

fn request(
    args: RunArgs,
    root: Option<&Path>,
    store: Option<&str>,
    isolation: Box<dyn Isolation>,
) -> Request {
    Request {
        root: root.map(Path::to_path_buf),
        store: store.map(str::to_string),
        run_id: requested_run_id(&args),
        job: args.job,
        env: args.env,
        pass: args.pass,
        env_file: args.env_file,
        path: args.path,
        ports: args.ports,
        port_host: args.port_host,
        listen: args.listen,
        inputs: args.inputs,
        fingerprint: args.fingerprint,
        allow_import: args.allow_import,
        timeout: args.timeout,
        kill_after: args.kill_after,
        lease_ttl: args.lease_ttl,
        capture: args.capture,
        json_status_fd: args.json_status_fd,
        worktree: args.worktree,
        base: args.base,
        cwd: args.cwd,
        lease: args.lease,
        wait: args.wait,
        stdin: run::Stdin::Inherit,
        ping: args.ping,
        ping_timeout: args.ping_timeout,
        metrics_dir: args.metrics_dir,
        isolation,
        command: args.command,
        invoked_from: None,
        imports: None,
        expect_inputs: None,
        replay_of: None,
        limits: crate::cgroup::Limits {
            memory: args.memory,
            pids: args.pids,
            cpu: args.cpu,
            try_mode: args.limits.as_deref() == Some("try"),
        },
    }
}
