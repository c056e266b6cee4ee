//! Kernel-assigned ports, and the ledger that keeps two live runs apart.
//!
//! A port comes from `bind(port 0)`: the kernel picks one nobody has bound.
//! Once runws closes its socket so the child can bind the port itself, the
//! kernel could hand the same port to the next run; the ledger prevents that:
//! in the one file `ROOT/store/ports.ledger`, the runws process that owns
//! port N holds an open-file-description lock on byte N for as long as the
//! run lives. A lock dies with the last descriptor of its open file, so a
//! killed runws never leaves a stale entry, and taking or giving back a port
//! creates and removes no file. With `--listen` the bound, listening sockets
//! themselves go to the child and there is no window at all.

use std::fs::File;
use std::net::{IpAddr, TcpListener};
use std::path::Path;

use nix::fcntl::{FcntlArg, fcntl};

use crate::error::{Error, IoContext, Result};
use crate::manifest::PortRecord;

/// Ports held for one run: the ledger (whose open file holds the locks), and
/// the sockets until they are handed over or closed.
pub struct Ports {
    pub records: Vec<PortRecord>,
    pub sockets: Vec<TcpListener>,
    ledger: Option<File>,
}

impl Ports {
    pub fn none() -> Ports {
        Ports { records: Vec::new(), sockets: Vec::new(), ledger: None }
    }

    /// Closes the sockets (the child binds the ports itself); the ledger
    /// locks stay held.
    pub fn close_sockets(&mut self) {
        self.sockets.clear();
    }

    /// Gives the ports back: closing the ledger's only descriptor releases
    /// every lock this run holds in it.
    pub fn release(&mut self) {
        self.sockets.clear();
        self.ledger = None;
    }
}

/// The variable name of the i-th port: PORT, PORT_1, PORT_2, ...
pub fn var_name(i: usize) -> String {
    if i == 0 { "PORT".to_string() } else { format!("PORT_{i}") }
}

/// Reserves `n` ports on `host`, each one unique among live runs that use the
/// same ledger file.
pub fn reserve(n: u16, host: &str, ledger: &Path) -> Result<Ports> {
    if n == 0 {
        return Ok(Ports::none());
    }
    let ip: IpAddr = host.parse().map_err(|_| {
        Error::Usage(format!("--port-host takes an IP address, not `{}`", host.escape_debug()))
    })?;
    let file = open_ledger(ledger)?;
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
        if try_lock(&file, port).ctx("cannot lock a port in", ledger)? {
            ports.records.push(PortRecord {
                var: var_name(ports.sockets.len()),
                port,
                host: host.to_string(),
            });
            ports.sockets.push(sock);
        } else {
            refused.push(sock);
        }
    }
    ports.ledger = Some(file);
    Ok(ports)
}

fn open_ledger(path: &Path) -> Result<File> {
    // Close-on-exec (the std default): the command never holds the locks.
    let open = || std::fs::OpenOptions::new().create(true).truncate(false).read(true).write(true).open(path);
    match open() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if let Some(dir) = path.parent() {
                crate::fsx::create_private_dirs(dir).ctx("cannot create the port ledger's directory", dir)?;
            }
            open()
        }
        other => other,
    }
    .ctx("cannot open the port ledger", path)
}

/// Takes the lock on byte `port` of the ledger without waiting; false when a
/// live run holds it. Locks of one open file never conflict with each other,
/// so a run's own ports are told apart by the kernel, which never binds one
/// port twice.
fn try_lock(ledger: &File, port: u16) -> std::io::Result<bool> {
    let range = nix::libc::flock {
        l_type: nix::libc::F_WRLCK as i16,
        l_whence: nix::libc::SEEK_SET as i16,
        l_start: i64::from(port),
        l_len: 1,
        // An open file description lock has no owning process.
        l_pid: 0,
    };
    match fcntl(ledger, FcntlArg::F_OFD_SETLK(&range)) {
        Ok(_) => Ok(true),
        Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EACCES) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_reservations_never_share_a_port() {
        let tmp = tempfile::tempdir().unwrap();
        let ledger = tmp.path().join("ledger");
        let mut a = reserve(5, "127.0.0.1", &ledger).unwrap();
        a.close_sockets();
        let b = reserve(50, "127.0.0.1", &ledger).unwrap();
        for pa in &a.records {
            assert!(b.records.iter().all(|pb| pb.port != pa.port));
        }
        assert_eq!(a.records[0].var, "PORT");
        assert_eq!(a.records[2].var, "PORT_2");
        // Given back, a's ports can be taken again, while b's still cannot.
        a.release();
        let file = open_ledger(&ledger).unwrap();
        assert!(!try_lock(&file, b.records[0].port).unwrap());
        // A lock lives as long as any descriptor of its open file: a process
        // another test is starting has a copy of this process's descriptors
        // until its exec closes them, so the lock may outlive `release` by
        // that long (a run's runws starts nothing while it holds the ledger
        // open other than its command, whose exec closes it the same way).
        let given_back = (0..2000).any(|_| {
            try_lock(&file, a.records[0].port).unwrap()
                || (std::thread::sleep(std::time::Duration::from_millis(5)), false).1
        });
        assert!(given_back, "a's port stayed locked after release");
    }
}
