//! `--json-status-fd FD`: the run's final record, as one line of JSON on a
//! descriptor the caller handed over, written once the end is recorded (as
//! bubblewrap's `--json-status-fd`, which a harness reads while the
//! command's own output goes elsewhere).

use std::fs::File;
use std::io::Write;

use crate::error::Error;
use crate::manifest;
use crate::workspace::RunDir;

/// Takes descriptor `fd` for the status: open, 3 or above, and never seen
/// by the command (close-on-exec).
pub(super) fn claim(fd: Option<i32>) -> Result<Option<File>, Error> {
    let Some(fd) = fd else { return Ok(None) };
    let refuse = |why: &str| Error::Usage(format!("--json-status-fd {fd}: {why}"));
    if (0..=2).contains(&fd) {
        return Err(refuse(
            "standard input, output and error are the command's; use 3 or above (`3>status.json`)",
        ));
    }
    let owned = crate::sys::fd::claim_inherited(fd).ok_or_else(|| refuse("not an open descriptor"))?;
    let flags =
        nix::fcntl::fcntl(&owned, nix::fcntl::FcntlArg::F_GETFD).map_err(|e| refuse(&e.to_string()))?;
    let flags = nix::fcntl::FdFlag::from_bits_retain(flags) | nix::fcntl::FdFlag::FD_CLOEXEC;
    nix::fcntl::fcntl(&owned, nix::fcntl::FcntlArg::F_SETFD(flags)).map_err(|e| refuse(&e.to_string()))?;
    Ok(Some(File::from(owned)))
}

/// Writes the run's recorded final record to `out` as one line, and closes
/// it. A failure is a warning: the run and its record stand.
pub(super) fn write(mut out: File, run: &RunDir) {
    let m = match manifest::read(&run.dir) {
        Ok(m) => m,
        // A run refused before its first record (a full disk), whose
        // directory runws removed: there is no record to give, and its
        // error is already said.
        Err(Error::ManifestMissing { .. }) => return,
        Err(e) => {
            let e = crate::error::render(&anyhow::Error::from(e));
            eprintln!("runws: warning: cannot write the status to --json-status-fd: {e}");
            return;
        }
    };
    let written = (|| -> anyhow::Result<()> {
        let mut line = serde_json::to_vec(&m)?;
        line.push(b'\n');
        out.write_all(&line)?;
        Ok(())
    })();
    if let Err(e) = written {
        eprintln!(
            "runws: warning: cannot write the status to --json-status-fd: {}",
            crate::error::render(&e)
        );
    }
}
