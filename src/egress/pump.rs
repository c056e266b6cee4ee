//! Moving a connection's bytes once the proxy let it through: each way
//! `splice`d from one socket into a pipe and from the pipe into the other
//! (the bytes never enter runws's memory), counted as they are read.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::log::{Bytes, Log};

/// The pipe between the two sockets of a connection, and the most one
/// `splice` moves.
pub const PIPE: usize = 1 << 20;
/// At most this many pipes are grown to [`PIPE`] at once; the others keep
/// the kernel's 64 KiB. A pipe's pages are runws's, not the run's: a
/// command that fills its connections' pipes and stops reading pins at most
/// 64 MiB of grown pipes (and 64 KiB for each other way of each connection)
/// outside its own `--memory`.
const LARGE_PIPES: usize = 64;

/// The pipes grown to [`PIPE`] now.
static GROWN: AtomicUsize = AtomicUsize::new(0);

/// A grown pipe's place in [`GROWN`], given back when dropped.
struct Grown;

impl Grown {
    fn take() -> Option<Grown> {
        if GROWN.fetch_add(1, Ordering::SeqCst) < LARGE_PIPES {
            Some(Grown)
        } else {
            GROWN.fetch_sub(1, Ordering::SeqCst);
            None
        }
    }
}

impl Drop for Grown {
    fn drop(&mut self) {
        GROWN.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Adds to a destination's counts (when it is itemised) and marks the log
/// changed.
pub fn count(bytes: &Option<Arc<Bytes>>, log: &Log, out: u64, inn: u64) {
    if let Some(b) = bytes {
        b.out.fetch_add(out, Ordering::Relaxed);
        b.inn.fetch_add(inn, Ordering::Relaxed);
    }
    log.touch();
}

/// The way back (destination to client) on a thread of its own.
pub fn start_back(
    client: &TcpStream,
    upstream: &TcpStream,
    bytes: Option<Arc<Bytes>>,
    log: Arc<Log>,
) -> Option<std::thread::JoinHandle<()>> {
    let (c, u) = (client.try_clone().ok()?, upstream.try_clone().ok()?);
    std::thread::Builder::new()
        .stack_size(64 * 1024)
        .spawn(move || pump(&u, &c, Way::Back, &bytes, &log))
        .ok()
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Way {
    Out,
    Back,
}

/// Moves bytes from `from` to `to` until `from` ends, then ends `to`'s
/// writing side; through a pipe with `splice`, else with reads and writes.
pub fn pump(from: &TcpStream, to: &TcpStream, way: Way, bytes: &Option<Arc<Bytes>>, log: &Log) {
    let counter = |n: usize| match way {
        Way::Out => count(bytes, log, n as u64, 0),
        Way::Back => count(bytes, log, 0, n as u64),
    };
    let ended = match rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC) {
        Ok((r, w)) => {
            // A larger pipe moves a bulk transfer in fewer calls (the
            // default 64 KiB, past the budget or when the limit refuses it).
            let _grown = Grown::take().filter(|_| rustix::pipe::fcntl_setpipe_size(&w, PIPE).is_ok());
            splice_all(from, to, &r, &w, &counter)
        }
        Err(_) => Err(()),
    };
    let ended = match ended {
        Err(()) => copy_all(from, to, &counter),
        ok => ok,
    };
    match ended {
        Ok(true) => {
            let _ = to.shutdown(Shutdown::Write);
        }
        _ => {
            let _ = to.shutdown(Shutdown::Both);
            let _ = from.shutdown(Shutdown::Both);
        }
    }
}

/// `Ok(true)`: `from` ended; `Ok(false)`: a failure after bytes moved;
/// `Err(())`: splice cannot be used here before any byte moved.
fn splice_all(
    from: &TcpStream,
    to: &TcpStream,
    r: &std::os::fd::OwnedFd,
    w: &std::os::fd::OwnedFd,
    counter: &dyn Fn(usize),
) -> Result<bool, ()> {
    use rustix::pipe::{SpliceFlags, splice};
    let mut moved = false;
    loop {
        let n = match splice(from, None, w, None, PIPE, SpliceFlags::MOVE) {
            Ok(0) => return Ok(true),
            Ok(n) => n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(rustix::io::Errno::INVAL) if !moved => return Err(()),
            Err(_) => return Ok(false),
        };
        // Counted as read, before it is passed on: once the other side
        // has it, the run may end and its record be made at any moment.
        counter(n);
        let mut left = n;
        while left > 0 {
            // Not SPLICE_F_MORE: it corks the socket, and a write that
            // waits for its answer (a TLS handshake, a request) would sit
            // about 200 ms unsent.
            match splice(r, None, to, None, left, SpliceFlags::MOVE) {
                Ok(0) => return Ok(false),
                Ok(m) => left -= m,
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => return Ok(false),
            }
        }
        moved = true;
    }
}

fn copy_all(mut from: &TcpStream, mut to: &TcpStream, counter: &dyn Fn(usize)) -> Result<bool, ()> {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match from.read(&mut buf) {
            Ok(0) => return Ok(true),
            Ok(n) => {
                counter(n);
                if to.write_all(&buf[..n]).is_err() {
                    return Ok(false);
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return Ok(false),
        }
    }
}
