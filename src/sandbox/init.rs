//! The init: the process between runws and the command (run in runws's
//! forked child, or as `runws __sandbox-init`; see [`super`]).
//!
//! As root, runws forks it as PID 1 of a new PID namespace and it does all
//! of PID 1's work below, reporting the command's wait status to runws on a
//! pipe. Otherwise it runs twice over, as two processes:
//!
//! * the outer init (runws's child, in runws's PID namespace) enters the
//!   namespaces and forks; it dies with runws (`PR_SET_PDEATHSIG`), waits for
//!   PID 1 and then ends exactly as the command ended: with its exit code,
//!   or killed by the same signal, so runws records the command's status;
//! * PID 1 (the first process of the new PID namespace) builds the mounts,
//!   mounts `/proc`, brings `lo` up, forks the command as PID 2, reaps every
//!   orphan, and, when the command has exited, kills whatever is left and
//!   exits. The kernel would kill the rest anyway once PID 1 is gone; doing
//!   it first lets an audit read its layers while nothing writes to them.
//!
//! Both inits block the signals runws forwards: runws sends them to the
//! process group, which the command shares, so the command gets each signal
//! once and the inits never die of one (PID 1 would ignore them anyway).
//! The command gets an empty signal mask and default `SIGPIPE`, as a plain
//! run does.
//!
//! The steps that shape the sandbox ([`enter_outer`], [`enter_as_pid1`],
//! [`set_up`], [`filter`], [`confine`]) ask the kernel for everything
//! through a [`Kernel`], so the tests run them, in order, against a
//! recording fake; the forks, pipes and waits around them do not take part.

use std::ffi::{CString, OsString};
use std::io::{Read, Write};
use std::os::fd::{BorrowedFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::libc;
use nix::sched::CloneFlags;

use super::kernel::{Kernel, Real};
use super::ns::{self, Refused};
use super::{Kind, Missing, Net, Plan, Report, audit, mounts};
use crate::child::FORWARDED;
use crate::exit;
use crate::sys;
use crate::sys::proc::{Forked, SingleThreaded, Termination};

/// The status pipe to runws.
struct Status {
    file: std::fs::File,
    try_mode: bool,
}

impl Status {
    fn send(&mut self, r: &Report) {
        if let Ok(mut line) = serde_json::to_vec(r) {
            line.push(b'\n');
            let _ = self.file.write_all(&line);
        }
    }

    /// In `--sandbox=try`, records the missing protection and goes on;
    /// otherwise the refusal stands.
    fn note(&mut self, r: Refused) -> Result<bool, Refused> {
        if !self.try_mode {
            return Err(r);
        }
        self.send(&Report::Missing(Missing { protection: r.protection.to_string(), why: r.why }));
        Ok(false)
    }

    fn attempt(&mut self, r: Result<(), Refused>) -> Result<bool, Refused> {
        match r {
            Ok(()) => Ok(true),
            Err(e) => self.note(e),
        }
    }
}

fn block_forwarded() {
    let mut set = nix::sys::signal::SigSet::empty();
    for s in FORWARDED {
        set.add(s);
    }
    let _ = nix::sys::signal::pthread_sigmask(nix::sys::signal::SigmaskHow::SIG_BLOCK, Some(&set), None);
}

/// What the init needs: its status pipe, the plan, and the command with
/// the environment built for it (never the init's own).
pub struct Start {
    pub status: OwnedFd,
    pub plan: Plan,
    pub command: Vec<OsString>,
    pub env: Vec<(OsString, OsString)>,
    /// Where PID 1 writes the command's wait status when runws itself is
    /// its parent (see [`run`]); else closed unused.
    pub report: Option<OwnedFd>,
    /// The gate runws opens once the run is recorded, when this process was
    /// forked to run the init in process; `None` when it is past it (an
    /// executed init is started only then).
    pub gate: Option<crate::child::Gate>,
}

/// The listening sockets runws placed at 3, 4, ...: only the command keeps them.
fn close_listen_fds(n: i32) {
    for fd in 3..3 + n.clamp(0, 1024) {
        // Inherited for the command; nothing in this process uses them.
        let _ = nix::unistd::close(fd);
    }
}

/// Entry point of `runws __sandbox-init --status-fd N --plan-fd M -- COMMAND...`
/// (the arguments after the subcommand's name); returns the exit code.
pub fn main_from_args(args: Vec<OsString>) -> u8 {
    let fd = |i: usize| args.get(i).and_then(|a| a.to_str()).and_then(|a| a.parse::<RawFd>().ok());
    let shape_ok = args.len() >= 5 && args[0] == "--status-fd" && args[2] == "--plan-fd" && args[4] == "--";
    match (shape_ok, fd(1), fd(3)) {
        (true, Some(status), Some(plan)) => main(status, plan, args[5..].to_vec()),
        _ => {
            eprintln!(
                "runws: {} is started by `runws run --sandbox` and `runws audit` only",
                super::INIT_COMMAND
            );
            exit::FAILURE
        }
    }
}

fn main(status_fd: RawFd, plan_fd: RawFd, command: Vec<OsString>) -> u8 {
    if status_fd < 3 || plan_fd < 3 || status_fd == plan_fd {
        eprintln!("runws: sandbox: invalid descriptors {status_fd}, {plan_fd}");
        return exit::FAILURE;
    }
    // runws handed these descriptors to this process for its own use.
    let Some(fd) = sys::fd::claim_inherited(status_fd) else { return exit::FAILURE };
    let _ = nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC));
    let mut status = Status { file: std::fs::File::from(fd), try_mode: false };
    let mut plan = String::new();
    let read = match sys::fd::claim_inherited(plan_fd) {
        Some(fd) => std::fs::File::from(fd).read_to_string(&mut plan),
        None => Err(std::io::Error::from_raw_os_error(libc::EBADF)),
    };
    if let Err(e) = read {
        status.send(&Report::Failed(format!("cannot read the plan: {e}")));
        return exit::FAILURE;
    }
    let plan: Plan = match serde_json::from_str(&plan) {
        Ok(p) => p,
        Err(e) => {
            status.send(&Report::Failed(format!("unreadable plan: {e}")));
            return exit::FAILURE;
        }
    };
    // Executed by runws, this process was given the command's environment.
    let env = std::env::vars_os().collect();
    let report = plan.report_fd.and_then(sys::fd::claim_inherited);
    run(Start { status: status.file.into(), plan, command, env, report, gate: None })
}

/// The init proper, entered after an exec of `runws __sandbox-init`, or
/// directly in the child runws forked (see [`crate::child::Spec::in_process`]);
/// returns the exit code of the process it ran as.
pub fn run(start: Start) -> u8 {
    // The Landlock backend confines this process before its gate, while
    // runws records the run, with runws's signals still blocked (until its
    // exec); every other path passes the gate first and then starts from
    // an empty mask, as an executed init does.
    let mut gate = start.gate;
    if start.plan.landlock.is_none()
        && let Some(g) = gate.take()
    {
        g.pass();
        let _ = nix::sys::signal::sigprocmask(
            nix::sys::signal::SigmaskHow::SIG_SETMASK,
            Some(&nix::sys::signal::SigSet::empty()),
            None,
        );
    }
    block_forwarded();
    // The command must not inherit the status pipe, nor the user namespace.
    let _ = nix::fcntl::fcntl(&start.status, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC));
    let handed = Handed::of(&start.plan);
    for ns in [handed.userns, handed.own_userns].into_iter().flatten() {
        let _ = nix::fcntl::fcntl(ns, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC));
    }
    if let Some(Ok(net)) = handed.net {
        let _ = nix::fcntl::fcntl(net, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC));
    }
    let status = Status { file: std::fs::File::from(start.status), try_mode: start.plan.try_mode };
    let listen_fds = start
        .env
        .iter()
        .find(|(k, _)| k == "LISTEN_FDS")
        .and_then(|(_, v)| v.to_str()?.parse().ok())
        .unwrap_or(0);
    // The init forks PID 1 and the command, each of which runs on: it never
    // starts a thread, so that a fork's child may do anything.
    let Some(single) = SingleThreaded::now() else {
        let mut status = status;
        status.send(&Report::Failed("the sandbox init is not single-threaded".into()));
        return exit::FAILURE;
    };
    let job = Job { listen_fds, command: start.command, env: start.env, single, handed, gate };
    // The Landlock backend: no namespace and no init of its own; this
    // process restricts itself and becomes the command.
    if start.plan.landlock.is_some() {
        let mut status = status;
        if let Err(r) = status.attempt(ns::no_new_privs(&Real)) {
            status.send(&Report::Failed(r.to_string()));
            return exit::FAILURE;
        }
        exec_command(&start.plan, status, None, job, None)
    }
    // runws forked this process straight into a new PID namespace: it is
    // PID 1 already, and runws, its parent, reads the command's status from
    // the report pipe. Otherwise it is the outer init, which makes PID 1.
    let result = match start.report {
        Some(report) if nix::unistd::getpid().as_raw() == 1 => as_pid1(&start.plan, status, report, job),
        notify => outer(&start.plan, status, job, notify),
    };
    match result {
        Ok(code) => code,
        Err((mut status, refused)) => {
            status.send(&Report::Failed(refused.to_string()));
            exit::FAILURE
        }
    }
}

/// The command to run and its environment.
struct Job {
    listen_fds: i32,
    command: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    single: SingleThreaded,
    handed: Handed<'static>,
    /// Passed right before `execve` (the Landlock backend, see [`run`]).
    gate: Option<crate::child::Gate>,
}

/// The namespaces runws handed to the init in the plan, as descriptors.
#[derive(Clone, Copy, Default)]
struct Handed<'a> {
    /// See [`Plan::unprivileged`]; `None` too when its number is not open.
    userns: Option<BorrowedFd<'a>>,
    /// See [`Plan::own_userns_fd`]; `None` too when its number is not open
    /// (the init then makes its user namespace itself).
    own_userns: Option<BorrowedFd<'a>>,
    /// See [`Plan::net_fd`]: the descriptor, or its number when that is not
    /// open.
    net: Option<Result<BorrowedFd<'a>, i32>>,
}

impl Handed<'static> {
    fn of(plan: &Plan) -> Handed<'static> {
        // runws handed these descriptors to the init, which keeps them open
        // (close-on-exec) until the command is executed.
        Handed {
            userns: plan.unprivileged.and_then(|u| sys::fd::borrow_inherited(u.userns_fd)),
            own_userns: plan.own_userns_fd.and_then(sys::fd::borrow_inherited),
            net: plan.net_fd.map(|fd| sys::fd::borrow_inherited(fd).ok_or(fd)),
        }
    }
}

/// Which namespaces were entered.
#[derive(Debug, PartialEq, Eq)]
struct Entered {
    mount: bool,
    pid: bool,
    net: bool,
}

/// The outer init; `notify` is runws's report pipe, handed to PID 1.
fn outer(
    plan: &Plan,
    mut status: Status,
    job: Job,
    notify: Option<OwnedFd>,
) -> Result<u8, (Status, Refused)> {
    if let Some(n) = &notify {
        let _ = nix::fcntl::fcntl(n, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC));
    }
    let entered = match enter_outer(&Real, plan, &mut status, job.handed) {
        Ok(Some(entered)) => entered,
        Ok(None) => return Ok(exit::FAILURE),
        Err(r) => return Err((status, r)),
    };
    let me = nix::unistd::getpid().as_raw();
    let (report_r, report_w) = match nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) {
        Ok(p) => p,
        Err(e) => return Err((status, Refused::new("PID namespace", format!("pipe: {e}")))),
    };
    match sys::proc::fork(&job.single) {
        Err(e) => Err((status, Refused::new("PID namespace", format!("fork: {e}")))),
        Ok(Forked::Child(_)) => {
            drop(report_r);
            Ok(pid1(plan, status, report_w, notify, &entered, me, job))
        }
        Ok(Forked::Parent(child)) => {
            // Only PID 1 writes runws's report: its end of file, should
            // PID 1 die first, is then PID 1's.
            drop((report_w, status, notify));
            close_listen_fds(job.listen_fds);
            Ok(relay(child.as_raw(), report_r))
        }
    }
}

/// The outer init's namespace steps, in order, up to its fork of PID 1:
/// which namespaces it entered, or `None` when runws is gone already.
/// Each step taken, or with `--sandbox=try` noted as missing; else the
/// refusal.
fn enter_outer<K: Kernel>(
    k: &K,
    plan: &Plan,
    status: &mut Status,
    handed: Handed<'_>,
) -> Result<Option<Entered>, Refused> {
    enter_namespaces(k, plan, status, Position::Outer(handed))
}

/// Where an init stands when it enters the namespaces.
enum Position<'a> {
    /// Outside them: it enters the user namespace (not as root: the one
    /// runws handed it, or else a new one), makes the PID namespace its
    /// child becomes PID 1 of, and enters the network namespace runws
    /// handed it or makes one.
    Outer(Handed<'a>),
    /// PID 1 already (runws forked it into a new PID namespace): it enters
    /// the network namespace runws made, when it was handed one.
    Pid1(Handed<'a>),
}

/// The namespace steps of either init, in one order: no new privileges,
/// (outer) the user namespace and the parent-death check, the mount, PID
/// and network namespaces, then IPC and UTS.
fn enter_namespaces<K: Kernel>(
    k: &K,
    plan: &Plan,
    status: &mut Status,
    at: Position<'_>,
) -> Result<Option<Entered>, Refused> {
    if plan.kind == Kind::Sandbox {
        status.attempt(ns::no_new_privs(k))?;
    }
    if let Position::Outer(handed) = at {
        if plan.user_namespace {
            status.attempt(match handed.own_userns {
                Some(userns) => ns::join_user_namespace(k, userns),
                None => ns::enter_user_namespace(k, plan.uid, plan.gid),
            })?;
        }
        // Set after entering the user namespace: a change of credentials
        // clears the parent-death signal.
        match ns::die_with_parent(k, plan.runws_pid) {
            Ok(true) => {}
            Ok(false) => return Ok(None),
            Err(e) => return Err(Refused::new("parent-death signal", e.to_string())),
        }
    }
    let mount = status.attempt(ns::unshare(k, CloneFlags::CLONE_NEWNS, "mount namespace"))?;
    let (pid, net) = match at {
        Position::Outer(handed) => (
            status.attempt(ns::unshare(k, CloneFlags::CLONE_NEWPID, "PID namespace"))?,
            network(k, plan, status, handed)?,
        ),
        Position::Pid1(handed) => (true, network(k, plan, status, handed)?),
    };
    if plan.kind == Kind::Sandbox {
        status.attempt(ns::unshare(k, CloneFlags::CLONE_NEWIPC, "IPC namespace"))?;
        status.attempt(ns::unshare(k, CloneFlags::CLONE_NEWUTS, "UTS namespace"))?;
    }
    Ok(Some(Entered { mount, pid, net }))
}

/// The init as PID 1 of the namespace runws forked it into: the outer
/// init's namespace steps without the PID namespace, then PID 1's work.
fn as_pid1(plan: &Plan, mut status: Status, report: OwnedFd, job: Job) -> Result<u8, (Status, Refused)> {
    let _ = nix::fcntl::fcntl(&report, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC));
    let entered = match enter_as_pid1(&Real, plan, &mut status, job.handed) {
        Ok(entered) => entered,
        Err(r) => return Err((status, r)),
    };
    // pid1 sets the parent-death signal (runws, outside: pid 0 from here).
    Ok(pid1(plan, status, report, None, &entered, 0, job))
}

/// The namespace steps of an init that is PID 1 already (as
/// [`enter_outer`], without the user and PID namespaces).
fn enter_as_pid1<K: Kernel>(
    k: &K,
    plan: &Plan,
    status: &mut Status,
    handed: Handed<'_>,
) -> Result<Entered, Refused> {
    match enter_namespaces(k, plan, status, Position::Pid1(handed))? {
        Some(entered) => Ok(entered),
        None => unreachable!("only the outer init looks for its parent while it enters the namespaces"),
    }
}

/// Waits for child `pid` (any child with `None`): its pid and raw status.
fn wait_raw(pid: Option<i32>) -> Option<(i32, i32)> {
    sys::proc::wait_raw(pid, true).ok().flatten()
}

/// The outer init: waits for PID 1 and ends as the command ended.
fn relay(pid1: i32, report: OwnedFd) -> u8 {
    let st = wait_raw(Some(pid1)).map(|(_, st)| st);
    let mut buf = [0u8; 4];
    let command = match std::fs::File::from(report).read_exact(&mut buf) {
        Ok(()) => Some(i32::from_ne_bytes(buf)),
        Err(_) => st,
    };
    match command.map(Termination::from_raw) {
        Some(Termination::Signaled(sig)) => die_by(sig),
        Some(ended) => ended.exit_code(),
        None => exit::FAILURE,
    }
}

/// Ends this process with `sig`, as the command ended, without a core dump.
fn die_by(sig: i32) -> u8 {
    let _ = rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable);
    sys::proc::raise_with_default(sig);
    // A signal whose default is to be ignored does not end a process.
    Termination::Signaled(sig).exit_code()
}

/// PID 1 of the new namespace.
/// `report` takes the command's wait status to PID 1's parent; `notify`,
/// when the parent is the outer init, takes it to runws as well.
fn pid1(
    plan: &Plan,
    mut status: Status,
    report: OwnedFd,
    notify: Option<OwnedFd>,
    entered: &Entered,
    parent: i32,
    job: Job,
) -> u8 {
    // A sandbox's command is forked before the mounts are built: it
    // installs its system-call filter (a few hundred microseconds of the
    // kernel compiling it) on one core while this process builds the file
    // system on the other, then waits for the word to go on. An audit's
    // command needs the staged root, so it is forked afterwards.
    let mut early: Option<(i32, OwnedFd)> = None;
    if plan.kind == Kind::Sandbox && entered.mount {
        let (go_r, go_w) = match nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) {
            Ok(p) => p,
            Err(e) => {
                status.send(&Report::Failed(format!("cannot create a pipe: {e}")));
                return exit::FAILURE;
            }
        };
        match sys::proc::fork(&job.single) {
            Ok(Forked::Child(_)) => {
                drop(go_w);
                exec_command(plan, status, None, job, Some(go_r))
            }
            Ok(Forked::Parent(child)) => early = Some((child.as_raw(), go_w)),
            Err(e) => {
                status.send(&Report::Failed(format!("cannot fork the command: {e}")));
                return exit::FAILURE;
            }
        }
    }
    let setup = set_up(&Real, plan, &mut status, entered, parent, job.handed).and_then(|()| {
        match (plan.kind, entered.mount) {
            (Kind::Audit, true) => audit::stage(plan, entered.pid).map(Some),
            _ => Ok(None),
        }
    });
    let listen_fds = job.listen_fds;
    let staged = match setup {
        Ok(s) => s,
        Err(r) => {
            // (An early command sees its pipe close and ends unseen.)
            status.send(&Report::Failed(r.to_string()));
            return exit::FAILURE;
        }
    };
    let child = match early {
        Some((child, go)) => {
            let _ = nix::unistd::write(&go, &[1]);
            child
        }
        None => match sys::proc::fork(&job.single) {
            Ok(Forked::Child(_)) => exec_command(plan, status, staged.as_ref().map(|s| s.root()), job, None),
            Ok(Forked::Parent(child)) => child.as_raw(),
            Err(e) => {
                status.send(&Report::Failed(format!("cannot fork the command: {e}")));
                return exit::FAILURE;
            }
        },
    };
    drop(status);
    close_listen_fds(listen_fds);
    let mut command_status = None;
    while command_status.is_none() {
        match wait_raw(None) {
            Some((pid, st)) if pid == child => command_status = Some(st),
            Some(_) => {}
            None => break,
        }
    }
    if nix::unistd::getpid().as_raw() == 1 {
        // From PID 1 of our own namespace, -1 reaches only the processes of
        // this run (never ourselves).
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(-1), nix::sys::signal::Signal::SIGKILL);
        while wait_raw(None).is_some() {}
    }
    if let Some(staged) = staged
        && let Err(e) = staged.finish(&plan.run_dir)
    {
        eprintln!("runws: audit: {e}");
    }
    // The command's status unknown (it was never waited for): a failure,
    // never a success.
    let raw = command_status.unwrap_or((exit::FAILURE as i32) << 8);
    let _ = nix::unistd::write(&report, &raw.to_ne_bytes());
    if let Some(n) = &notify {
        let _ = nix::unistd::write(n, &raw.to_ne_bytes());
    }
    Termination::from_raw(raw).exit_code()
}

/// PID 1's steps before the command may go on: the parent-death signal
/// (`parent` is the pid its parent has), `lo` up, and a sandbox's file
/// system with its `/proc`. An audit's root is staged after these.
fn set_up<K: Kernel>(
    k: &K,
    plan: &Plan,
    status: &mut Status,
    entered: &Entered,
    parent: i32,
    handed: Handed<'_>,
) -> Result<(), Refused> {
    // Seen from a new PID namespace, the parent (outside it) is pid 0.
    let parent = if entered.pid { 0 } else { parent };
    if !ns::die_with_parent(k, parent).map_err(|e| Refused::new("parent-death signal", e.to_string()))? {
        return Err(Refused::new("PID namespace", "the outer init is gone"));
    }
    if entered.net {
        status.attempt(ns::loopback_up(k))?;
    }
    if plan.kind == Kind::Sandbox && entered.mount {
        mounts::build(k, &plan.mounts, handed.userns)?;
        if entered.pid && status.attempt(mounts::proc_fs(k))? {
            mounts::mask_proc(k)?;
        }
    }
    Ok(())
}

/// The network namespace of `--net none` and `--net allow`; whether the
/// command has one. With `--net allow` its only way out is the proxy
/// listening in the namespace runws made: that one is entered or the run
/// is refused, even with `--sandbox=try` (the host's network instead would
/// be no protection at all).
fn network<K: Kernel>(k: &K, plan: &Plan, status: &mut Status, handed: Handed<'_>) -> Result<bool, Refused> {
    match plan.net {
        Net::Host => Ok(false),
        Net::None => status.attempt(enter_network(k, handed)),
        Net::Allow => match handed.net {
            None => Err(Refused::new("network namespace", "the proxy's namespace was not handed over")),
            Some(_) => enter_network(k, handed).map(|()| true),
        },
    }
}

/// A new network namespace: the one runws made already (see
/// [`Plan::net_fd`]), else a fresh one.
fn enter_network<K: Kernel>(k: &K, handed: Handed<'_>) -> Result<(), Refused> {
    match handed.net {
        Some(Ok(fd)) => k
            .setns(fd, CloneFlags::CLONE_NEWNET)
            .map_err(|e| Refused::new("network namespace", format!("setns: {e}"))),
        Some(Err(fd)) => Err(Refused::new("network namespace", format!("descriptor {fd} is not open"))),
        None => ns::unshare(k, CloneFlags::CLONE_NEWNET, "network namespace"),
    }
}

fn cstr(bytes: &[u8]) -> Option<CString> {
    CString::new(bytes).ok()
}

/// A sandboxed command's system-call filter; with `--sandbox=try`, noted
/// as missing when refused.
fn filter<K: Kernel>(k: &K, plan: &Plan, status: &mut Status) -> Result<(), Refused> {
    if plan.kind == Kind::Sandbox {
        let unix_sockets_only = plan.landlock.is_some() && plan.net == Net::None;
        status.attempt(
            k.seccomp(super::seccomp::Filter { allow_userns: plan.allow_userns, unix_sockets_only }),
        )?;
    }
    Ok(())
}

/// What [`confine`] needs besides the plan.
struct Confine<'a> {
    /// The audit's root, to enter.
    chroot: Option<&'a Path>,
    /// Whether [`filter`] ran already.
    filtered: bool,
    listen_fds: i32,
    handed: Handed<'a>,
}

/// The command's process, from its root and working directory to the
/// last restriction before `execve`; a failure is what to report.
fn confine<K: Kernel>(k: &K, plan: &Plan, status: &mut Status, c: Confine<'_>) -> Result<(), Report> {
    let refused = |r: Refused| Report::Failed(r.to_string());
    if let Some(root) = c.chroot
        && let Err(e) = k.chroot(root)
    {
        return Err(Report::Failed(format!("cannot enter the audit's root: {e}")));
    }
    if let Err(e) = k.chdir(&plan.cwd) {
        return Err(Report::Failed(format!(
            "cannot enter the working directory `{}`: {e}",
            plan.cwd.display()
        )));
    }
    // Only stdin, stdout, stderr and the --listen sockets reach the command:
    // a descriptor the caller left open (to a directory the sandbox hides,
    // say) would be a way around every mount. Marked close-on-exec, not
    // closed, so the status pipe still reports a failed exec.
    if plan.kind == Kind::Sandbox {
        status.attempt(ns::close_inherited(k, 3 + c.listen_fds.max(0) as u32)).map_err(refused)?;
    }
    if let Some(ns) = c.handed.userns {
        ns::become_unprivileged(k, ns).map_err(refused)?;
    }
    if plan.kind == Kind::Sandbox {
        status.attempt(ns::drop_capabilities(k)).map_err(refused)?;
    }
    // Landlock before the filter, which would not refuse its calls but
    // comes last on every path.
    if let Some(rules) = &plan.landlock {
        status.attempt(k.landlock(rules)).map_err(refused)?;
    }
    if !c.filtered {
        filter(k, plan, status).map_err(refused)?;
    }
    Ok(())
}

/// The command's process (PID 2). Never returns. With `go`, it was forked
/// before the file system was built: it installs its filter, then waits
/// for PID 1's word on `go` (end of file: the setup failed, and PID 1 has
/// said why) before it goes on.
fn exec_command(plan: &Plan, mut status: Status, chroot: Option<&Path>, job: Job, go: Option<OwnedFd>) -> ! {
    let fail = |status: &mut Status, r: Report| -> ! {
        let code = match r {
            Report::ExecFailed(errno) => sys::proc::exec_errno_exit_code(errno),
            _ => exit::FAILURE,
        };
        status.send(&r);
        // _exit skips the destructors and stdio buffers this forked copy
        // shares with its parent.
        sys::proc::exit_now(i32::from(code))
    };
    // This process's own signal state, reset before exec (past the gate:
    // a signal before it ends the run's start, not the command).
    let reset_signals = || {
        let empty = nix::sys::signal::SigSet::empty();
        let _ = nix::sys::signal::sigprocmask(nix::sys::signal::SigmaskHow::SIG_SETMASK, Some(&empty), None);
        sys::proc::default_disposition(nix::sys::signal::Signal::SIGPIPE);
    };
    if job.gate.is_none() {
        reset_signals();
    }
    // The filter refuses nothing the steps below make (setns, setgroups,
    // setresuid, capset, prctl, chdir, close_range), so it may come first.
    let mut filtered = false;
    if let Some(go) = go {
        if let Err(r) = filter(&Real, plan, &mut status) {
            fail(&mut status, Report::Failed(r.to_string()));
        }
        filtered = true;
        let mut word = [0u8; 1];
        let went = loop {
            match nix::unistd::read(&go, &mut word) {
                Err(nix::errno::Errno::EINTR) => continue,
                other => break other,
            }
        };
        if went != Ok(1) {
            // As in `fail`; PID 1 has reported the failure.
            sys::proc::exit_now(i32::from(exit::FAILURE))
        }
    }
    let confined = Confine { chroot, filtered, listen_fds: job.listen_fds, handed: job.handed };
    if let Err(r) = confine(&Real, plan, &mut status, confined) {
        fail(&mut status, r);
    }
    let me = nix::unistd::getpid().as_raw().to_string();
    let mut env: Vec<CString> = Vec::new();
    for (k, v) in job.env {
        let value = if k == "LISTEN_PID" { OsString::from(&me) } else { v };
        let mut kv = k.as_bytes().to_vec();
        kv.push(b'=');
        kv.extend_from_slice(value.as_bytes());
        if let Some(c) = cstr(&kv) {
            env.push(c);
        }
    }
    let argv: Vec<CString> = job.command.iter().filter_map(|a| cstr(a.as_bytes())).collect();
    let Some(program) = cstr(plan.program.as_os_str().as_bytes()) else {
        fail(&mut status, Report::ExecFailed(libc::ENOENT));
    };
    // Confined: the command may start once runws has recorded the run.
    if let Some(g) = job.gate {
        g.pass();
        reset_signals();
    }
    let errno = match nix::unistd::execve(&program, &argv, &env) {
        Err(e) => e as i32,
        Ok(never) => match never {},
    };
    fail(&mut status, Report::ExecFailed(errno))
}

#[cfg(test)]
mod tests;
