//! Descriptors a parent handed to this process by number (on the command
//! line of `runws __sandbox-init`, in a plan, or inherited across a fork):
//! each number is claimed once, so no two owners can close it.

use std::collections::BTreeMap;
use std::os::fd::{BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::Mutex;

/// How a number was claimed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Claim {
    /// An `OwnedFd` was made for it.
    Owned,
    /// Borrowed for the rest of the process's life.
    Borrowed,
}

/// The numbers claimed so far in this process.
static CLAIMED: Mutex<BTreeMap<RawFd, Claim>> = Mutex::new(BTreeMap::new());

/// Claims `fd` as `how`; `false` when it is not open, is one of 0 to 2, or
/// was claimed before (except a borrow of a number borrowed before).
fn claim(fd: RawFd, how: Claim) -> bool {
    if fd <= 2 {
        return false;
    }
    // SAFETY: the borrow lasts only for this fcntl, which fails harmlessly (EBADF) on a closed number.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    let open = nix::fcntl::fcntl(borrowed, nix::fcntl::FcntlArg::F_GETFD).is_ok();
    let mut claimed = CLAIMED.lock().unwrap_or_else(|e| e.into_inner());
    match claimed.get(&fd) {
        _ if !open => false,
        None => {
            claimed.insert(fd, how);
            true
        }
        Some(before) => *before == Claim::Borrowed && how == Claim::Borrowed,
    }
}

/// Takes ownership of descriptor `fd`, which a parent handed to this
/// process for its own use. `None` when the number is not open, is one of
/// 0 to 2, or was claimed already. The caller must not have made an owner
/// for the number by any other means (nothing in runws does: every
/// descriptor runws opens is an `OwnedFd` from the start, and handed-over
/// numbers reach Rust code only through here).
pub fn claim_inherited(fd: RawFd) -> Option<OwnedFd> {
    // SAFETY: the number is open and claimed here for the first time, so this is its only owner.
    claim(fd, Claim::Owned).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Borrows descriptor `fd`, handed over as for [`claim_inherited`], for the
/// rest of this process's life: it is claimed, so no owner can ever close
/// it (it closes on exec when it is close-on-exec, or at exit). A number
/// may be borrowed any number of times.
pub fn borrow_inherited(fd: RawFd) -> Option<BorrowedFd<'static>> {
    // SAFETY: claimed for good as borrowed, so no owner exists or can be made for it in this process.
    claim(fd, Claim::Borrowed).then(|| unsafe { BorrowedFd::borrow_raw(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::IntoRawFd;

    #[test]
    fn a_number_is_claimed_once() {
        let raw = std::fs::File::open("/dev/null").unwrap().into_raw_fd();
        let first = claim_inherited(raw);
        assert!(first.is_some());
        assert!(claim_inherited(raw).is_none());
        assert!(borrow_inherited(raw).is_none());
        assert!(claim_inherited(1).is_none());
        let other = std::fs::File::open("/dev/null").unwrap().into_raw_fd();
        assert!(borrow_inherited(other).is_some());
        assert!(borrow_inherited(other).is_some());
        assert!(claim_inherited(other).is_none());
    }
}
