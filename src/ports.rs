//! Kernel-assigned ports, and the ledger that keeps two live runs apart.
//!
//! A port comes from `bind(port 0)`: the kernel picks one nobody has bound.
//! Once runws closes its socket so the child can bind the port itself, the
//! kernel could hand the same port to the next run; the ledger prevents that:
//! `ROOT/store/ports/<port>` is `flock`ed by the runws process that owns the
//! port for as long as the run lives. A lock dies with its process, so a
//! killed runws never leaves a stale entry. With `--listen` the bound,
//! listening sockets themselves go to the child and there is no window at all.

use std::fs::File;
use std::net::{IpAddr, TcpListener};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

use crate::error::{Error, IoContext, Result};
use crate::manifest::PortRecord;

/// Ports held for one run: the ledger locks, and the sockets until they are
/// handed over or closed.
pub struct Ports {
    pub records: Vec<PortRecord>,
    pub sockets: Vec<TcpListener>,
    locks: Vec<(PathBuf, Flock<File>)>,
}

impl Ports {
    pub fn none() -> Ports {
        Ports { records: Vec::new(), sockets: Vec::new(), locks: Vec::new() }
    }

    /// Closes the sockets (the child binds the ports itself); the ledger
    /// entries stay held.
    pub fn close_sockets(&mut self) {
        self.sockets.clear();
    }

    /// Releases the ledger entries. Each file is removed while its lock is
    /// still held; a process that opened it just before sees a different
    /// inode (or none) at the path after it locks, and retries.
    pub fn release(&mut self) {
        self.sockets.clear();
        for (path, lock) in self.locks.drain(..) {
            let _ = std::fs::remove_file(&path);
            drop(lock);
        }
    }
}

impl Drop for Ports {
    fn drop(&mut self) {
        self.release();
    }
}

/// The variable name of the i-th port: PORT, PORT_1, PORT_2, ...
pub fn var_name(i: usize) -> String {
    if i == 0 { "PORT".to_string() } else { format!("PORT_{i}") }
}

/// Reserves `n` ports on `host`, each one unique among live runs under the
/// same ledger directory.
pub fn reserve(n: u16, host: &str, ledger: &Path) -> Result<Ports> {
    if n == 0 {
        return Ok(Ports::none());
    }
    let ip: IpAddr = host.parse().map_err(|_| {
        Error::Usage(format!("--port-host takes an IP address, not `{}`", host.escape_debug()))
    })?;
    std::fs::create_dir_all(ledger).ctx("cannot create the port ledger", ledger)?;
    let mut ports = Ports::none();
    // Ports another run holds: kept bound until we finish, so the kernel
    // does not offer them to us again.
    let mut refused: Vec<TcpListener> = Vec::new();
    let mut attempts = 0;
    while ports.sockets.len() < n as usize {
        attempts += 1;
        if attempts > 1000 {
            return Err(Error::Other(format!(
                "cannot reserve {n} ports on {host}: the ledger `{}` refused 1000 kernel-assigned ports",
                ledger.display()
            )));
        }
        let sock = TcpListener::bind((ip, 0)).map_err(|e| Error::io("cannot bind a port on", host, e))?;
        let port = sock.local_addr().map_err(|e| Error::io("cannot read the port of", host, e))?.port();
        match try_lock(ledger, port)? {
            Some(lock) => {
                ports.records.push(PortRecord {
                    var: var_name(ports.sockets.len()),
                    port,
                    host: host.to_string(),
                });
                ports.sockets.push(sock);
                ports.locks.push(lock);
            }
            None => refused.push(sock),
        }
    }
    Ok(ports)
}

/// Takes the ledger entry for `port` without waiting; `None` when a live run
/// holds it.
fn try_lock(ledger: &Path, port: u16) -> Result<Option<(PathBuf, Flock<File>)>> {
    let path = ledger.join(port.to_string());
    loop {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .ctx("cannot open the port ledger entry", &path)?;
        let lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => lock,
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => return Ok(None),
            Err((_, e)) => return Err(Error::io("cannot lock", &path, e.into())),
        };
        // The holder before us may have removed the file after we opened
        // it: our lock is then on an orphan inode, and we start again.
        let held = lock.metadata().ctx("cannot stat", &path)?;
        match std::fs::metadata(&path) {
            Ok(now) if now.ino() == held.ino() && now.dev() == held.dev() => {
                return Ok(Some((path, lock)));
            }
            _ => continue,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_reservations_never_share_a_port() {
        let tmp = tempfile::tempdir().unwrap();
        let mut a = reserve(5, "127.0.0.1", tmp.path()).unwrap();
        a.close_sockets();
        let b = reserve(50, "127.0.0.1", tmp.path()).unwrap();
        for pa in &a.records {
            assert!(b.records.iter().all(|pb| pb.port != pa.port));
        }
        assert_eq!(a.records[0].var, "PORT");
        assert_eq!(a.records[2].var, "PORT_2");
        a.release();
        assert!(std::fs::read_dir(tmp.path()).unwrap().count() == 50);
    }
}
