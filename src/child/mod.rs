//! Starting the command and watching it: its own process group (and its
//! own session, unless it gets the terminal), signals forwarded, the
//! timeout, and the exit status mapped as `env` and `timeout` map it.
//!
//! runws creates the child without copying itself (`clone(CLONE_VM)`, see
//! [`crate::sys::launch`]); the child makes only direct system calls on data built
//! before, then waits at a gate until runws has recorded its pid in the
//! manifest, so the manifest never shows a running run without its process.
//! An `execve` failure travels back through a close-on-exec pipe as an
//! errno: ENOENT becomes 127, anything else 126.
//! runws does not wait for the `execve`: it reads that pipe once the child
//! has ended, and meanwhile does its own work on the other core.
//!
//! The parent blocks the signals it forwards and reads them from a signalfd,
//! so one loop with one `poll` handles signals, the child's exit, the
//! timeout and the lease renewal, with no signal handler at all.

use std::ffi::{CString, OsString};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::libc;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, SigmaskHow, Signal, kill, killpg, pthread_sigmask};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::waitpid;
use nix::unistd::Pid;

mod in_process;

use in_process::PidNamespaceForChildren;
pub use launch::{Confinement, Gate};

use crate::error::{Error, IoContext, Result};
use crate::sys::launch::{self, Descriptors, Image, InProcess};
use crate::sys::proc::{SingleThreaded, Termination};

/// The signals runws passes on to the command's process group.
pub const FORWARDED: [Signal; 4] = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP, Signal::SIGQUIT];

/// Blocks the forwarded signals, SIGCHLD and SIGTTOU in this thread (call it
/// before any other thread starts, so all inherit the mask) and returns a
/// signalfd that receives them.
pub fn block_signals() -> Result<SignalFd> {
    let mut set = SigSet::empty();
    for s in FORWARDED {
        set.add(s);
    }
    set.add(Signal::SIGCHLD);
    set.add(Signal::SIGTTOU);
    pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&set), None).ctx("cannot block signals", "runws")?;
    SignalFd::with_flags(&set, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
        .ctx("cannot create signalfd", "runws")
}

/// Finds the program the way `execvp` would, but in the child's PATH:
/// a name with a `/` is taken relative to where runws was started.
pub fn resolve(program: &OsString, path: &OsString, invoked_from: &Path) -> Result<PathBuf> {
    let bytes = program.as_bytes();
    let shown = program.to_string_lossy().to_string();
    if bytes.is_empty() {
        return Err(Error::CommandNotFound(shown));
    }
    if bytes.contains(&b'/') {
        let p = invoked_from.join(program);
        return match std::fs::metadata(&p) {
            Ok(m) if m.is_dir() => {
                Err(Error::CannotExecute { path: p, source: std::io::Error::from_raw_os_error(libc::EISDIR) })
            }
            Ok(_) => Ok(p),
            Err(_) => Err(Error::CommandNotFound(shown)),
        };
    }
    let mut found_but_not_executable = None;
    for dir in path.as_bytes().split(|b| *b == b':') {
        if dir.is_empty() {
            continue;
        }
        let candidate = Path::new(std::ffi::OsStr::from_bytes(dir)).join(program);
        let Ok(meta) = std::fs::metadata(&candidate) else {
            continue;
        };
        if !meta.is_file() {
            continue;
        }
        if nix::unistd::access(&candidate, nix::unistd::AccessFlags::X_OK).is_ok() {
            return Ok(candidate);
        }
        found_but_not_executable.get_or_insert(candidate);
    }
    match found_but_not_executable {
        Some(p) => {
            Err(Error::CannotExecute { path: p, source: std::io::Error::from_raw_os_error(libc::EACCES) })
        }
        None => Err(Error::CommandNotFound(shown)),
    }
}

/// Everything the child needs, built before the fork.
pub struct Spec {
    pub program: PathBuf,
    pub argv: Vec<OsString>,
    pub env: Vec<(String, OsString)>,
    pub cwd: PathBuf,
    /// Sockets to hand over as fd 3, 4, ... with LISTEN_PID set in the child.
    pub listen: Vec<OwnedFd>,
    /// In place of runws's own standard input, output and error.
    pub stdin: Option<OwnedFd>,
    pub stdout: Option<OwnedFd>,
    pub stderr: Option<OwnedFd>,
    /// Make the child's group the terminal's foreground group.
    pub foreground: bool,
    /// Descriptors the program inherits at their own numbers (close-on-exec
    /// is cleared in the child only). Each must be >= 64 (see [`high_fd`]),
    /// so placing the listening sockets at 3, 4, ... cannot overwrite it.
    pub keep: Vec<OwnedFd>,
    /// Run this in the forked child instead of executing `program`, when
    /// runws has a single thread at the fork (so the child may allocate and
    /// lock like any process); its result is the child's exit code. It
    /// receives no environment of its own: what it passes on, it captured.
    /// Saves an exec of runws for the sandbox's init. It passes the [`Gate`]
    /// itself, before anything of the run's own runs: what it does before
    /// (confining itself) happens while runws records the run.
    pub in_process: Option<Box<dyn FnOnce(Gate) -> u8>>,
    /// Descriptors only `in_process` uses: kept open for it, and closed
    /// (being close-on-exec) when the child executes `program` instead.
    pub in_process_keep: Vec<OwnedFd>,
    /// With `in_process`: fork the child as PID 1 of a new PID namespace
    /// when the kernel allows it (root), so that it needs no fork of its own
    /// to get there. Without that permission the child is forked as usual.
    pub pid_namespace: bool,
    /// Fork the child (a copy of runws's memory) instead of sharing runws's
    /// memory until its exec: a child put in a memory-limited control
    /// group at its gate must not share it, or the kernel's out-of-memory
    /// killer, which ends every process sharing its victim's memory, ends
    /// runws too when the exec itself runs out of the limit.
    pub own_memory: bool,
    /// Restrictions the child puts on itself around its gate (see
    /// [`Confinement`]); not with `in_process`.
    pub confine: Option<Confinement>,
    /// Files the child writes `0` to before anything else, to join control
    /// groups (cgroup v1's `tasks`: see `cgroup::Group::self_admission`).
    pub join_groups: Vec<PathBuf>,
}

/// The most listening sockets a child gets (at 3, 4, ...): runws keeps its
/// own descriptors for the child at 64 and above (see [`high_fd`]).
pub const MAX_LISTEN: usize = 60;

/// A child waiting at its gate.
pub struct Paused {
    pid: Pid,
    gate: OwnedFd,
    errors: OwnedFd,
    shared: Option<launch::Shared>,
}

fn cstring(bytes: &[u8], what: &str) -> Result<CString> {
    CString::new(bytes).map_err(|_| Error::Usage(format!("{what} contains a NUL byte")))
}

/// Moves `fd` to a descriptor >= 64, close-on-exec, so that placing the
/// listening sockets at 3, 4, ... in the child cannot overwrite it.
pub fn high_fd(fd: OwnedFd) -> Result<OwnedFd> {
    rustix::io::fcntl_dupfd_cloexec(&fd, 64)
        .map_err(|e| Error::io("cannot duplicate descriptor", "runws", e.into()))
}

/// Creates the child; it stops at the gate until [`Paused::open_gate`].
pub fn spawn_paused(spec: Spec) -> Result<Paused> {
    if spec.listen.len() > MAX_LISTEN {
        return Err(Error::Usage(format!("at most {MAX_LISTEN} listening sockets can be handed over")));
    }
    let program = cstring(spec.program.as_os_str().as_bytes(), "the command path")?;
    let argv: Vec<CString> =
        spec.argv.iter().map(|a| cstring(a.as_bytes(), "an argument")).collect::<Result<_>>()?;
    let mut env: Vec<CString> = Vec::with_capacity(spec.env.len() + 1);
    for (k, v) in &spec.env {
        let mut kv = k.as_bytes().to_vec();
        kv.push(b'=');
        kv.extend_from_slice(v.as_bytes());
        env.push(cstring(&kv, "an environment value")?);
    }
    let cwd = cstring(spec.cwd.as_os_str().as_bytes(), "the working directory")?;
    let image = Image { program, argv, env, cwd, listen_pid: !spec.listen.is_empty() };

    let (gate_r, gate_w) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).ctx("cannot create pipe", "runws")?;
    let (err_r, err_w) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).ctx("cannot create pipe", "runws")?;
    let gate_r = high_fd(gate_r)?;
    let err_w = high_fd(err_w)?;
    let stdin = spec.stdin.map(high_fd).transpose()?;
    let stdout = spec.stdout.map(high_fd).transpose()?;
    let stderr = spec.stderr.map(high_fd).transpose()?;
    let listen: Vec<OwnedFd> = spec.listen.into_iter().map(high_fd).collect::<Result<_>>()?;
    let fds = Descriptors {
        gate: gate_r.as_fd(),
        gate_writer: gate_w.as_fd(),
        errors: err_w.as_fd(),
        stdin: stdin.as_ref().map(|f| f.as_fd()),
        stdout: stdout.as_ref().map(|f| f.as_fd()),
        stderr: stderr.as_ref().map(|f| f.as_fd()),
        listen: listen.iter().map(|f| f.as_fd()).collect(),
        keep: spec.keep.iter().map(|f| f.as_fd()).collect(),
    };
    // Runs in the child only when runws has a single thread at the fork (so
    // the child may allocate and lock like any process).
    let single = spec.in_process.as_ref().and_then(|_| SingleThreaded::now());
    let in_process = match (spec.in_process, &single) {
        (Some(run), Some(single)) => {
            use std::os::fd::AsRawFd;
            let keep = spec.in_process_keep.iter().map(|f| f.as_raw_fd()).collect();
            Some(InProcess { run, keep, single, strings: crate::procinfo::own_arg_and_env_ranges() })
        }
        _ => None,
    };
    let pid_namespace =
        if in_process.is_some() && spec.pid_namespace { PidNamespaceForChildren::enter() } else { None };
    let started = launch::start(
        image,
        &fds,
        spec.foreground,
        in_process,
        spec.confine.as_ref(),
        &spec.join_groups,
        !spec.own_memory,
    );
    drop(pid_namespace);
    let (child, shared) = started.ctx("cannot start", &spec.program)?;
    drop(spec.in_process_keep);
    // The child has its own copy of the ruleset's descriptor.
    drop(spec.confine);
    // Also set the group from this side, so a signal forwarded before the
    // child ran its first instruction still reaches the group. Not for a
    // child that makes a session of its own: a group leader cannot, and a
    // signal sent before it did goes to the child alone (see
    // [`signal_group`]), which is then all the group there is.
    if spec.foreground {
        let _ = nix::unistd::setpgid(child, child);
    }
    // The fds the child inherited are closed here (it has its own copies);
    // the pipes' other ends stay with runws.
    drop(fds);
    drop((gate_r, err_w, stdin, stdout, stderr, listen, spec.keep));
    Ok(Paused { pid: child, gate: gate_w, errors: err_r, shared })
}

impl Paused {
    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// Opens the gate: the child goes on to `execve` while runws goes on
    /// (whether the program could be started is known once the child ended,
    /// see [`Started::exec_error`]).
    pub fn open_gate(self, program: &Path) -> Result<Started> {
        if let Err(e) = nix::unistd::write(self.gate.as_fd(), &[1u8]) {
            // The child ended at or before its gate: what it said, else how
            // it ended (a signal, say, while it confined itself).
            let ended = waitpid(self.pid, None);
            if let Some(said) = child_error(&self.errors, program) {
                return Err(said);
            }
            if let Ok(nix::sys::wait::WaitStatus::Signaled(_, signal, _)) = ended {
                return Err(Error::Other(format!(
                    "cannot start `{}`: its process was killed by {signal} before it started",
                    program.display()
                )));
            }
            return Err(Error::io("cannot start", program, e.into()));
        }
        Ok(Started { errors: self.errors, _shared: self.shared })
    }

    /// Gives up on the child before it ran: closing the gate ends it (and
    /// SIGKILL, should it not be at the gate yet).
    pub fn abandon(self) {
        let pid = self.pid;
        drop(self.gate);
        let _ = kill(pid, Signal::SIGKILL);
        let _ = waitpid(pid, None);
        drop(self.shared);
    }
}

/// A child past its gate: executing the program, or failing to.
pub struct Started {
    errors: OwnedFd,
    /// Freed once the child has ended (see [`launch::Shared`]).
    _shared: Option<launch::Shared>,
}

impl Started {
    /// Call once the child has ended: why its `execve` failed, if it did
    /// (the child then ended without running the program). A missing
    /// program is 127, anything else 126; a refused [`Confinement`], 125.
    pub fn exec_error(self, program: &Path) -> Option<Error> {
        child_error(&self.errors, program)
    }
}

/// What the child reported on its error pipe before it ended: the errno of
/// its `execve`, or the errno and step of a [`Confinement`] it could not
/// put on itself. The only writer is the child: once it has ended (or
/// executed) this cannot block.
fn child_error(errors: &OwnedFd, program: &Path) -> Option<Error> {
    let mut buf = [0u8; 8];
    let mut got = 0;
    while got < buf.len() {
        match nix::unistd::read(errors.as_fd(), &mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Some(Error::io("cannot start", program, e.into())),
        }
    }
    let errno = i32::from_ne_bytes(buf[..4].try_into().ok()?);
    match got {
        8 => {
            let step = i32::from_ne_bytes(buf[4..].try_into().ok()?);
            if step == crate::sys::confine::STEP_JOIN {
                return Some(Error::Other(format!(
                    "{}: {}",
                    Confinement::step_name(step),
                    std::io::Error::from_raw_os_error(errno)
                )));
            }
            Some(Error::Sandbox(format!(
                "{}: {}",
                Confinement::step_name(step),
                std::io::Error::from_raw_os_error(errno)
            )))
        }
        4.. => Some(exec_failed(program, errno)),
        _ => None,
    }
}

/// The error for an `execve` of `program` that failed with `errno`: not
/// found (127) or not executable (126), as
/// [`crate::sys::proc::exec_errno_exit_code`] decides.
pub fn exec_failed(program: &Path, errno: i32) -> Error {
    if crate::sys::proc::exec_errno_exit_code(errno) == crate::exit::NOT_FOUND {
        Error::CommandNotFound(program.display().to_string())
    } else {
        Error::CannotExecute { path: program.to_path_buf(), source: std::io::Error::from_raw_os_error(errno) }
    }
}

/// How the command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
}

impl Outcome {
    /// From a raw wait status, as `waitpid` gives it.
    pub fn from_wait_status(raw: i32, timed_out: bool) -> Outcome {
        match Termination::from_raw(raw) {
            Termination::Signaled(sig) => Outcome { exit_code: None, signal: Some(sig), timed_out },
            Termination::Exited(code) => Outcome { exit_code: Some(code), signal: None, timed_out },
        }
    }
}

/// Held by a thread of runws's that runs a child of its own and waits for
/// it (the guard's broker running git) while the watch loop reaps any
/// child, the command's orphans among them.
pub static OWN_CHILD: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// What the watch loop needs besides the child.
pub struct Watch<'a> {
    pub signals: &'a SignalFd,
    pub timeout: Option<Duration>,
    pub kill_after: Option<Duration>,
    pub renew_every: Duration,
    /// Called every `renew_every` while the child lives (the lease renewal).
    pub renew: &'a mut dyn FnMut(),
    /// Called once, after the delay, if the child still lives then.
    pub once_after: Option<(Duration, Box<dyn FnOnce() + 'a>)>,
    /// A pipe on which the child writes the command's wait status once
    /// everything it ran has ended (a sandbox's PID 1): the run is over
    /// then, without waiting for the child's own exit (the tear-down of its
    /// namespaces). The status read is left in `status`.
    pub ended: Option<Ended<'a>>,
}

/// See [`Watch::ended`].
pub struct Ended<'a> {
    pub fd: std::os::fd::BorrowedFd<'a>,
    pub status: &'a std::cell::Cell<Option<i32>>,
}

impl Ended<'_> {
    /// The status, once the pipe is readable: `Some` when the child wrote
    /// it, `None` when the child ended without writing it (then only its
    /// own exit tells).
    fn take(&self) -> Option<i32> {
        let mut buf = [0u8; 4];
        let mut got = 0;
        while got < 4 {
            match nix::unistd::read(self.fd, &mut buf[got..]) {
                Ok(0) => return None,
                Ok(n) => got += n,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => return None,
            }
        }
        let raw = i32::from_ne_bytes(buf);
        self.status.set(Some(raw));
        Some(raw)
    }
}

/// How a watch ended.
#[derive(Debug, Clone, Copy)]
pub struct Watched {
    pub outcome: Outcome,
    /// The first signal runws itself received and passed on to the
    /// command's group (^C at the terminal, a `kill` of runws), if any.
    pub interrupted: Option<i32>,
}

/// Waits for the child, forwarding signals to its group, enforcing the
/// timeout and calling the renewal on schedule.
pub fn watch(pid: Pid, mut w: Watch<'_>) -> Result<Watched> {
    let start = Instant::now();
    let once_at = w.once_after.as_ref().map(|(d, _)| start + *d);
    let mut next_renew = start + w.renew_every;
    let term_at = w.timeout.map(|t| start + t);
    let mut kill_at: Option<Instant> = None;
    let mut timed_out = false;
    let mut interrupted = None;
    loop {
        // Any child: runws is the command's subreaper, so its orphans
        // become runws's children and must be reaped as they end; but not
        // while another thread of runws's waits for a child of its own
        // (see [`OWN_CHILD`]), which this would take from it.
        let own = OWN_CHILD.try_lock();
        let which = if own.is_ok() { None } else { Some(pid) };
        let reaped = crate::sys::proc::wait_raw(which.map(Pid::as_raw), false);
        drop(own);
        match reaped {
            Ok(Some((p, raw))) if p == pid.as_raw() => {
                return Ok(Watched { outcome: Outcome::from_wait_status(raw, timed_out), interrupted });
            }
            Ok(None) => {}
            // An adopted orphan, now reaped: look for more.
            Ok(Some(_)) => continue,
            Err(e) => return Err(Error::io("cannot wait for", format!("pid {pid}"), e)),
        }
        let now = Instant::now();
        if let Some(t) = term_at
            && !timed_out
            && now >= t
        {
            timed_out = true;
            signal_group(pid, Signal::SIGTERM);
            // A stopped process cannot act on SIGTERM.
            signal_group(pid, Signal::SIGCONT);
            kill_at = w.kill_after.map(|k| now + k);
            // As a cron log or CI step should show it, not only as exit 124.
            eprintln!(
                "runws: timed out after {}; sent SIGTERM to the command's group",
                crate::duration::show(w.timeout.unwrap_or_default())
            );
        }
        if let Some(k) = kill_at
            && now >= k
        {
            signal_group(pid, Signal::SIGKILL);
            kill_at = None;
            eprintln!(
                "runws: the command's group outlived --kill-after {}; sent SIGKILL",
                crate::duration::show(w.kill_after.unwrap_or_default())
            );
        }
        if now >= next_renew {
            (w.renew)();
            next_renew = Instant::now() + w.renew_every;
        }
        if let Some(at) = once_at
            && now >= at
            && let Some((_, once)) = w.once_after.take()
        {
            once();
        }
        let mut wake = next_renew;
        if let (Some(at), true) = (once_at, w.once_after.is_some()) {
            wake = wake.min(at);
        }
        if let (Some(t), false) = (term_at, timed_out) {
            wake = wake.min(t);
        }
        if let Some(k) = kill_at {
            wake = wake.min(k);
        }
        let wait_ms = wake.saturating_duration_since(Instant::now()).as_millis().min(i32::MAX as u128) as i32;
        let mut fds = vec![PollFd::new(w.signals.as_fd(), PollFlags::POLLIN)];
        if let Some(e) = &w.ended {
            fds.push(PollFd::new(e.fd, PollFlags::POLLIN));
        }
        match poll(&mut fds, PollTimeout::try_from(wait_ms).unwrap_or(PollTimeout::MAX)) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(Error::io("cannot poll", "signalfd", e.into())),
        }
        let ready = fds.get(1).and_then(|f| f.revents()).is_some_and(|r| !r.is_empty());
        if ready && let Some(e) = w.ended.take() {
            // Readable: the status, or end of file from a child that died
            // before writing it (then its exit is waited for as usual).
            if let Some(raw) = e.take() {
                return Ok(Watched { outcome: Outcome::from_wait_status(raw, timed_out), interrupted });
            }
        }
        while let Ok(Some(info)) = w.signals.read_signal() {
            let signo = info.ssi_signo as i32;
            if let Ok(sig) = Signal::try_from(signo)
                && FORWARDED.contains(&sig)
            {
                interrupted.get_or_insert(signo);
                signal_group(pid, sig);
            }
        }
    }
}

/// Sends `sig` to the child's group; to the child alone while it has not
/// made its group yet (it does so first thing, before anything else can
/// join it).
pub fn signal_group(pid: Pid, sig: Signal) {
    if killpg(pid, sig) == Err(nix::errno::Errno::ESRCH) {
        let _ = kill(pid, sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::wait::{WaitPidFlag, WaitStatus};

    fn true_spec() -> Spec {
        Spec {
            program: PathBuf::from("/bin/true"),
            argv: vec!["true".into()],
            env: Vec::new(),
            cwd: PathBuf::from("/"),
            listen: Vec::new(),
            stdin: None,
            stdout: None,
            stderr: None,
            foreground: false,
            keep: Vec::new(),
            in_process: None,
            in_process_keep: Vec::new(),
            pid_namespace: false,
            own_memory: false,
            confine: None,
            join_groups: Vec::new(),
        }
    }

    /// The child's status within a few seconds; `None` if it still runs.
    fn status_soon(pid: Pid) -> Option<WaitStatus> {
        for _ in 0..500 {
            match waitpid(pid, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) => std::thread::sleep(Duration::from_millis(10)),
                Ok(s) => return Some(s),
                Err(e) => panic!("waitpid: {e}"),
            }
        }
        let _ = kill(pid, Signal::SIGKILL);
        let _ = waitpid(pid, None);
        None
    }

    #[test]
    fn a_closed_gate_ends_the_child_without_running_the_program() {
        // The child must not hold the gate open itself: closing runws's end
        // (or runws dying) is all it takes.
        let paused = spawn_paused(true_spec()).unwrap();
        let pid = paused.pid();
        drop(paused);
        assert_eq!(status_soon(pid), Some(WaitStatus::Exited(pid, 125)));
    }

    #[test]
    fn an_abandoned_child_is_reaped() {
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            spawn_paused(true_spec()).unwrap().abandon();
            done.send(()).unwrap();
        });
        finished.recv_timeout(Duration::from_secs(10)).expect("abandon returned");
    }
}
