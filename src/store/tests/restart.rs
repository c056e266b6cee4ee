//! Tokens survive a restart of the store.

use std::time::Duration;

use super::{FileFixture, Fixture, SERVER, pg_url};
use crate::error::Error;
use crate::store::open;

const TTL: Duration = Duration::from_secs(60);

#[test]
fn file_store_reopened_keeps_counting() {
    let f = FileFixture::new();
    let key = f.key("restart");
    {
        let mut s = f.open();
        for t in 1..=3 {
            assert_eq!(s.acquire(&key, "A", TTL, Duration::ZERO).unwrap().token, t);
            s.release(&key, "A").unwrap();
        }
        assert_eq!(s.acquire(&f.key("held"), "A", TTL, Duration::ZERO).unwrap().token, 1);
    }
    let mut s = f.open();
    assert_eq!(s.show(&key).unwrap().token, 3);
    assert_eq!(s.acquire(&key, "B", TTL, Duration::ZERO).unwrap().token, 4);
    let held = s.show(&f.key("held")).unwrap();
    assert_eq!((held.holder.as_deref(), held.token, held.expired), (Some("A"), 1, false));
}

/// Stops and starts the server between acquires. Needs `RUNWS_TEST_PG_CTL`:
/// a shell command prefix, run as `$RUNWS_TEST_PG_CTL stop` and
/// `$RUNWS_TEST_PG_CTL start`, that stops the server (waiting until it is
/// down) and starts it (waiting until it accepts connections);
/// `ci/postgres.sh start` prints one.
#[test]
fn pg_store_restarted_keeps_counting() {
    let Some(url) = pg_url() else { return };
    let Some(ctl) = std::env::var("RUNWS_TEST_PG_CTL").ok().filter(|c| !c.is_empty()) else {
        eprintln!("skipped: RUNWS_TEST_PG_CTL not set");
        return;
    };
    let _exclusive = SERVER.write().unwrap_or_else(|e| e.into_inner());
    let prefix = crate::workspace::new_run_id().unwrap();
    let (key, held) = (format!("{prefix}/restart"), format!("{prefix}/held"));
    let mut old = open(&url).unwrap();
    for t in 1..=3 {
        assert_eq!(old.acquire(&key, "A", TTL, Duration::ZERO).unwrap().token, t);
        old.release(&key, "A").unwrap();
    }
    assert_eq!(old.acquire(&held, "A", TTL, Duration::ZERO).unwrap().token, 1);
    assert_eq!(old.publish(&key, 3, b"before").unwrap(), crate::store::PublishOutcome::Written);

    for action in ["stop", "start"] {
        let status =
            std::process::Command::new("sh").arg("-c").arg(format!("{ctl} {action}")).status().unwrap();
        assert!(status.success(), "`{ctl} {action}` failed: {status}");
    }

    let mut fresh = open(&url).unwrap();
    assert_eq!(fresh.show(&key).unwrap().token, 3);
    assert_eq!(fresh.acquire(&key, "B", TTL, Duration::ZERO).unwrap().token, 4);
    let info = fresh.show(&held).unwrap();
    assert_eq!((info.holder.as_deref(), info.token, info.expired), (Some("A"), 1, false));
    assert_eq!(fresh.read_published(&key).unwrap(), Some((3, b"before".to_vec())));

    // The handle from before the restart reports its broken connection
    // once, then reconnects.
    let first = old.show(&key);
    if let Err(e) = &first {
        assert!(matches!(e, Error::StoreUnreachable { .. }), "{e}");
        if let Some(password) = password(&url) {
            assert!(!e.to_string().contains(password), "the password leaked: {e}");
        }
    }
    assert_eq!(old.show(&key).unwrap().token, 4);
    fresh.release(&key, "B").unwrap();
    assert_eq!(old.acquire(&key, "A", TTL, Duration::ZERO).unwrap().token, 5);
}

fn password(url: &str) -> Option<&str> {
    let authority = url.split_once("://")?.1.split(['/', '?']).next()?;
    let userinfo = authority.rsplit_once('@')?.0;
    userinfo.split_once(':').map(|(_, p)| p).filter(|p| !p.is_empty())
}
