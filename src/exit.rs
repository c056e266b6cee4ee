//! Every exit code runws itself returns, in one place.
//!
//! `runws run` passes the child's own exit status through, so the codes
//! runws adds follow the conventions of `env` and `timeout` (124 to 127) and
//! `flock` (75). The other subcommands use the small codes below; each one is
//! a distinct answer a script can branch on. The README's table is generated
//! from the same list by hand: keep the two in step.

/// Success.
pub const OK: u8 = 0;
/// A negative answer: `has` found that this run did not produce the output,
/// or `get` (`cat`) was asked for an output the run never recorded.
pub const NO: u8 = 1;
/// A read of another run's output was refused (use `runws import`), an
/// import from a run `--allow-import` does not name, or a sandboxed
/// command's call on a lease other than its run's own.
pub const FOREIGN: u8 = 3;
/// Bytes on disk no longer match the sha256 recorded for them.
pub const INTEGRITY: u8 = 4;
/// The guard was called outside a live run, or the run it names is over,
/// reaped, or not the caller's own.
pub const NOT_LIVE: u8 = 5;
/// A lease is held by someone else and the wait ran out (as `flock -n`).
pub const LEASE_HELD: u8 = 75;
/// The sink refused a write whose fencing token is stale, or was never
/// issued for its key.
pub const STALE_FENCE: u8 = 76;
/// The seal failed, but the workspace was saved to quarantine.
pub const QUARANTINED: u8 = 80;
/// The seal failed and the quarantine failed too: nothing was saved.
pub const NOTHING_SAVED: u8 = 81;
/// The secret scan found something (`scan`, and `restore` of an archive
/// from an ordinary location).
pub const SECRETS_FOUND: u8 = 82;
/// `scan` found nothing, but could not look inside everything: a compressed
/// file or archive member over a budget, corrupt, encrypted or in a format
/// the scan does not open.
pub const NOT_SCANNED: u8 = 83;
/// `replay --expect same` found a difference, or `--expect different`
/// found none.
pub const NOT_AS_EXPECTED: u8 = 86;
/// A promotion lane refused a step: its state does not allow it yet (or any
/// more), its review does not allow an approval, or its kit changed since
/// the review.
pub const LANE_REFUSED: u8 = 90;
/// A promotion lane refused a person: only the named reviewer stamps and
/// only the named resetter resets.
pub const LANE_NOT_YOURS: u8 = 91;
/// A lane's kit failed the kit check (a missing `TICKET`, `replay/` file or
/// checksum, or a forbidden file present); nothing was sealed.
pub const KIT_CHECK_FAILED: u8 = 92;
/// A lane's review ran and `replay/eval.sh` failed: the review is recorded
/// as failed.
pub const REVIEW_FAILED: u8 = 93;
/// The command ran out of time (`--timeout`), as `timeout` does.
pub const TIMED_OUT: u8 = 124;
/// runws itself failed, or was used wrongly; the command did not run or its
/// result could not be recorded.
pub const FAILURE: u8 = 125;
/// The command was found but could not be executed.
pub const CANNOT_EXECUTE: u8 = 126;
/// The command was not found.
pub const NOT_FOUND: u8 = 127;

/// The exit status of a process killed by signal `n`, as shells report it.
pub fn from_signal(n: i32) -> u8 {
    (128 + n).clamp(0, 255) as u8
}
