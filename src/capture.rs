//! `--capture`: the command's stdout and stderr pass through runws, which
//! copies each to its own stream and to `logs/stdout.log` and
//! `logs/stderr.log`. A closed console never stops the log or blocks the
//! command, and a background process holding the pipe open cannot keep runws
//! waiting past a grace period.

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::time::Duration;

use crate::error::{Error, IoContext};
use crate::workspace::RunDir;

/// `--capture`: the command's stdout and stderr go through pipes; runws
/// copies each to its own stream and to `logs/`.
pub struct Capture {
    out_r: OwnedFd,
    pub out_w: OwnedFd,
    err_r: OwnedFd,
    pub err_w: OwnedFd,
    out_log: std::fs::File,
    err_log: std::fs::File,
}

pub struct Tees {
    threads: Vec<std::thread::JoinHandle<()>>,
    done: std::sync::mpsc::Receiver<()>,
}

impl Capture {
    pub fn open(run: &RunDir) -> Result<Capture, Error> {
        let logs = run.sub("logs")?;
        let out_log = logs.create_new("stdout.log", 0o644).ctx("cannot create", logs.join("stdout.log"))?;
        let err_log = logs.create_new("stderr.log", 0o644).ctx("cannot create", logs.join("stderr.log"))?;
        let (out_r, out_w) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).ctx("cannot create pipe", "capture")?;
        let (err_r, err_w) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).ctx("cannot create pipe", "capture")?;
        Ok(Capture { out_r, out_w, err_r, err_w, out_log, err_log })
    }

    pub fn start(self) -> Tees {
        let Capture { out_r, out_w, err_r, err_w, out_log, err_log } = self;
        // Our copies of the write ends must close, or the readers never see EOF.
        drop((out_w, err_w));
        let (tx, done) = std::sync::mpsc::channel();
        let spawn = |r: OwnedFd, log: std::fs::File, to_stderr: bool, tx: std::sync::mpsc::Sender<()>| {
            std::thread::spawn(move || {
                tee(std::fs::File::from(r), log, to_stderr);
                let _ = tx.send(());
            })
        };
        let threads = vec![spawn(out_r, out_log, false, tx.clone()), spawn(err_r, err_log, true, tx)];
        Tees { threads, done }
    }
}

impl Tees {
    /// Waits for both streams to end, at most `grace` after the command
    /// exited (a background process may hold the pipe open forever).
    pub fn join(self, grace: Duration) {
        let deadline = std::time::Instant::now() + grace;
        let mut finished = 0;
        while finished < self.threads.len() {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.done.recv_timeout(left) {
                Ok(()) => finished += 1,
                Err(_) => return,
            }
        }
        for t in self.threads {
            let _ = t.join();
        }
    }
}

fn tee(mut from: std::fs::File, mut log: std::fs::File, to_stderr: bool) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut console_ok = true;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        if console_ok {
            let r = if to_stderr {
                std::io::stderr().write_all(&buf[..n])
            } else {
                let mut out = std::io::stdout().lock();
                out.write_all(&buf[..n]).and_then(|()| out.flush())
            };
            // A closed console must not stop the log or block the command.
            console_ok = r.is_ok();
        }
        let _ = log.write_all(&buf[..n]);
    }
    let _ = log.sync_all();
}
