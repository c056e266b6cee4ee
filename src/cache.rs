//! Shared caches for sandboxed runs, and their one writer.
//!
//! A cache directory is shown to `run --sandbox --cache DIR` read-only, with
//! a copy-on-write layer of the run's own on top, so a run can add or change
//! files without touching DIR. `runws cache warm DIR -- CMD` is the only
//! writer. The two meet at `DIR/.runws-cache.lock`: a run holds it shared for
//! as long as it lives, a warmer holds it exclusive while its command runs.
//! So a warmer waits for the runs that show the old cache, a run started
//! while a warmer works waits for the new one, two warmers are serialised,
//! and no run ever sees a half-written cache.

use std::fs::File;
use std::path::Path;

use nix::fcntl::{Flock, FlockArg};

use crate::error::{Error, IoContext, Result};

pub const LOCK_NAME: &str = ".runws-cache.lock";

/// A held cache lock, released on drop.
pub struct CacheLock {
    _lock: Flock<File>,
}

/// Locks the cache `dir`: exclusive for a warmer, shared for a run. Says on
/// stderr when it has to wait.
pub fn lock(dir: &Path, exclusive: bool) -> Result<CacheLock> {
    let path = dir.join(LOCK_NAME);
    let file = crate::fsx::open_lock_file(&path).ctx("cannot open the cache lock", &path)?;
    let (now, wait) = if exclusive {
        (FlockArg::LockExclusiveNonblock, FlockArg::LockExclusive)
    } else {
        (FlockArg::LockSharedNonblock, FlockArg::LockShared)
    };
    let file = match Flock::lock(file, now) {
        Ok(lock) => return Ok(CacheLock { _lock: lock }),
        Err((file, nix::errno::Errno::EWOULDBLOCK)) => file,
        Err((_, e)) => return Err(Error::io("cannot lock", &path, e.into())),
    };
    let who = if exclusive { "runs using" } else { "the warmer of" };
    eprintln!("runws: waiting for {who} the cache `{}`", dir.display());
    let lock = Flock::lock(file, wait).map_err(|(_, e)| Error::io("cannot lock", &path, e.into()))?;
    Ok(CacheLock { _lock: lock })
}
