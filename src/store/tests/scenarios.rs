//! Single-threaded scenarios, run against each store.

use std::time::{Duration, Instant, SystemTime};

use super::{Fixture, assert_stale};
use crate::error::Error;
use crate::exit;
use crate::store::PublishOutcome;

const LONG: Duration = Duration::from_secs(30);
const SHORT: Duration = Duration::from_millis(300);

#[track_caller]
fn assert_not_holder(e: Error, needle: &str) {
    assert!(matches!(e, Error::NotLeaseHolder { .. }), "expected not-holder, got: {e}");
    assert!(e.to_string().contains(needle), "`{e}` does not mention {needle}");
    assert_eq!(e.exit_code(), exit::LEASE_HELD);
}

pub(super) fn grant_renew_release(f: &dyn Fixture) {
    let (mut a, mut b) = (f.open(), f.open());
    let key = f.key("grant");
    let info = a.show(&key).unwrap();
    assert_eq!((info.holder, info.token, info.expires_at, info.expired), (None, 0, None, false));

    let before = SystemTime::now();
    let first = a.acquire(&key, "A", LONG, Duration::ZERO).unwrap();
    assert_eq!((first.key.as_str(), first.holder.as_str(), first.token), (key.as_str(), "A", 1));
    assert!(first.expires_at >= before + LONG - Duration::from_millis(5));

    let e = b.acquire(&key, "B", LONG, Duration::ZERO).unwrap_err();
    assert!(matches!(&e, Error::LeaseHeld { holder, token: 1, .. } if holder == "A"), "{e}");
    assert_eq!(e.exit_code(), exit::LEASE_HELD);
    // Not re-entrant: a live lease is not granted again, even to its holder.
    assert!(matches!(a.acquire(&key, "A", LONG, Duration::ZERO), Err(Error::LeaseHeld { .. })));

    let renewed = a.renew(&key, "A", 2 * LONG).unwrap();
    assert_eq!(renewed.token, 1);
    assert!(renewed.expires_at > first.expires_at);
    assert_not_holder(b.renew(&key, "B", LONG).unwrap_err(), "`A`");
    assert_not_holder(b.release(&key, "B").unwrap_err(), "`A`");

    let info = b.show(&key).unwrap();
    assert_eq!((info.holder.as_deref(), info.token, info.expired), (Some("A"), 1, false));
    assert!(info.expires_at.unwrap() > first.expires_at);

    a.release(&key, "A").unwrap();
    assert_not_holder(a.release(&key, "A").unwrap_err(), "released");
    let info = a.show(&key).unwrap();
    assert_eq!((info.holder, info.token, info.expired), (None, 1, false));

    assert_eq!(b.acquire(&key, "B", LONG, Duration::ZERO).unwrap().token, 2);
    b.release(&key, "B").unwrap();
    assert_eq!(a.acquire(&key, "A", LONG, Duration::ZERO).unwrap().token, 3);
    assert_eq!(b.show(&key).unwrap().token, 3);
}

pub(super) fn tokens_grow_across_expiry(f: &dyn Fixture) {
    let (mut a, mut b) = (f.open(), f.open());
    let key = f.key("expiry");
    let t = a.acquire(&key, "A", SHORT, Duration::ZERO).unwrap().token;
    std::thread::sleep(SHORT + Duration::from_millis(100));
    let info = b.show(&key).unwrap();
    assert_eq!((info.holder.as_deref(), info.token, info.expired), (Some("A"), t, true));
    // Expired but nobody took it: still the highest token, renewing is safe.
    assert_eq!(a.renew(&key, "A", SHORT).unwrap().token, t);
    std::thread::sleep(SHORT + Duration::from_millis(100));

    let taken = b.acquire(&key, "B", LONG, Duration::ZERO).unwrap();
    assert_eq!(taken.token, t + 1);
    assert_not_holder(a.renew(&key, "A", LONG).unwrap_err(), "`B`");
    assert_not_holder(a.release(&key, "A").unwrap_err(), "`B`");
    let info = a.show(&key).unwrap();
    assert_eq!((info.holder.as_deref(), info.token, info.expired), (Some("B"), t + 1, false));
}

/// Kleppmann's paused client: A's lease runs out while A is paused, B takes
/// it and writes; A wakes and writes with its old token.
pub(super) fn kleppmann_paused_holder_is_fenced(f: &dyn Fixture) {
    let (mut a, mut b) = (f.open(), f.open());
    let key = f.key("kleppmann");
    let t = a.acquire(&key, "A", SHORT, Duration::ZERO).unwrap().token;
    std::thread::sleep(SHORT + Duration::from_millis(100));
    let lease_b = b.acquire(&key, "B", LONG, Duration::ZERO).unwrap();
    assert_eq!(lease_b.token, t + 1);
    // A wakes before B has published: B's grant alone makes A's token stale.
    assert_stale(a.publish(&key, t, b"from A").unwrap_err(), t, t + 1);
    assert_eq!(a.read_published(&key).unwrap(), None);
    assert_eq!(b.publish(&key, t + 1, b"from B").unwrap(), PublishOutcome::Written);

    let e = a.publish(&key, t, b"from A").unwrap_err();
    assert!(e.to_string().contains(&key), "{e}");
    assert_stale(e, t, t + 1);
    assert_eq!(a.read_published(&key).unwrap(), Some((t + 1, b"from B".to_vec())));

    let e = a.publish(&key, t + 1, b"other bytes").unwrap_err();
    assert!(matches!(e, Error::StaleFence { same_fence: true, .. }));
    assert_stale(e, t + 1, t + 1);
    assert_eq!(a.publish(&key, t + 1, b"from B").unwrap(), PublishOutcome::Unchanged);
    assert_eq!(b.read_published(&key).unwrap(), Some((t + 1, b"from B".to_vec())));
    // A token nobody was granted is refused, and locks nobody out.
    for forged in [t + 2, 1_000_000, u64::MAX] {
        let e = a.publish(&key, forged, b"forged").unwrap_err();
        assert!(matches!(e, Error::UnissuedFence { .. }), "{e}");
        assert_eq!(e.exit_code(), crate::exit::STALE_FENCE);
    }
    let never = f.key("never granted");
    assert!(matches!(a.publish(&never, 1, b"forged"), Err(Error::UnissuedFence { .. })));
    assert_eq!(b.read_published(&key).unwrap(), Some((t + 1, b"from B".to_vec())));
    b.release(&key, "B").unwrap();
    let c = a.acquire(&key, "C", LONG, Duration::ZERO).unwrap().token;
    assert_eq!(c, t + 2, "tokens count on across a release");
    assert_eq!(a.publish(&key, c, b"newer").unwrap(), PublishOutcome::Written);
    assert_eq!(b.read_published(&key).unwrap(), Some((t + 2, b"newer".to_vec())));
    assert_eq!(b.read_published(&never).unwrap(), None);
}

pub(super) fn wait_takes_over_after_expiry(f: &dyn Fixture) {
    let (mut a, mut b) = (f.open(), f.open());
    let key = f.key("takeover");
    let t = a.acquire(&key, "A", SHORT, Duration::ZERO).unwrap().token;
    let started = Instant::now();
    let lease = b.acquire(&key, "B", LONG, Duration::from_secs(10)).unwrap();
    let waited = started.elapsed();
    assert_eq!(lease.token, t + 1);
    assert!(lease.expires_at > SystemTime::now(), "the lease came back already expired");
    assert!(
        waited >= SHORT - Duration::from_millis(50),
        "granted after {waited:?}, before A's lease ran out"
    );
    assert!(waited < Duration::from_secs(5), "took {waited:?} to take over");
}

pub(super) fn wait_runs_out(f: &dyn Fixture) {
    let (mut a, mut b) = (f.open(), f.open());
    let key = f.key("held");
    a.acquire(&key, "A", LONG, Duration::ZERO).unwrap();
    let started = Instant::now();
    let e = b.acquire(&key, "B", LONG, Duration::from_millis(200)).unwrap_err();
    let waited = started.elapsed();
    assert!(matches!(&e, Error::LeaseHeld { holder, token: 1, .. } if holder == "A"), "{e}");
    assert!(e.to_string().contains("`A`"), "{e}");
    assert!(waited >= Duration::from_millis(200) && waited < Duration::from_secs(5), "{waited:?}");
    assert_eq!(a.show(&key).unwrap().token, 1, "a refused wait issued a token");
}

pub(super) fn rejects_bad_input(f: &dyn Fixture) {
    let mut s = f.open();
    let long = "k".repeat(513);
    for key in ["", "a\0b", long.as_str()] {
        assert!(
            matches!(s.acquire(key, "A", LONG, Duration::ZERO), Err(Error::InvalidName { .. })),
            "{key:?}"
        );
        assert!(matches!(s.show(key), Err(Error::InvalidName { .. })));
        assert!(matches!(s.publish(key, 1, b"x"), Err(Error::InvalidName { .. })));
    }
    let key = f.key("bad input");
    for holder in ["", "a\0b", long.as_str()] {
        assert!(matches!(s.acquire(&key, holder, LONG, Duration::ZERO), Err(Error::InvalidName { .. })));
    }
    assert!(matches!(s.acquire(&key, "A", Duration::ZERO, Duration::ZERO), Err(Error::Usage(_))));
    assert_eq!(s.show(&key).unwrap().token, 0);
    // The longest key and odd ones are fine.
    let mut longest = f.key("long/");
    while longest.len() + 'ü'.len_utf8() <= 512 {
        longest.push('ü');
    }
    for k in [longest, f.key("../../etc/passwd"), f.key(".")] {
        assert_eq!(s.acquire(&k, "A", LONG, Duration::ZERO).unwrap().token, 1, "{k}");
        assert_eq!(s.publish(&k, 1, b"x").unwrap(), PublishOutcome::Written);
        assert_eq!(s.read_published(&k).unwrap(), Some((1, b"x".to_vec())));
    }
}
