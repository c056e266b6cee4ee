//! Tests run against both stores through the same functions: each scenario
//! takes a [`Fixture`] and `both_stores!` instantiates it for the file store
//! and for PostgreSQL.
//!
//! The PostgreSQL tests need a server: they read its URL from
//! `RUNWS_TEST_PG_URL` and, when it is unset, say so on stderr and pass
//! without testing anything (CI always sets it: `eval "$(ci/postgres.sh
//! start)"`). The restart test also needs `RUNWS_TEST_PG_CTL`, a shell
//! command prefix to which it appends `stop` and `start`.

use std::sync::{RwLock, RwLockReadGuard};
use std::time::{Duration, SystemTime};

use super::{Store, open};
use crate::error::Error;

/// Opens fresh handles on one store; keys are unique to the fixture, so
/// tests sharing a database never meet.
pub(super) trait Fixture: Sync {
    fn open(&self) -> Box<dyn Store>;
    fn key(&self, name: &str) -> String;
}

pub(super) struct FileFixture {
    _tmp: tempfile::TempDir,
    url: String,
}

impl FileFixture {
    pub(super) fn new() -> FileFixture {
        let tmp = tempfile::tempdir().unwrap();
        let url = format!("file:{}", tmp.path().join("store").display());
        FileFixture { _tmp: tmp, url }
    }
}

impl Fixture for FileFixture {
    fn open(&self) -> Box<dyn Store> {
        open(&self.url).unwrap()
    }
    fn key(&self, name: &str) -> String {
        format!("{name}/2026-11-30")
    }
}

/// Every PostgreSQL test holds this shared; the restart test takes it
/// exclusively, so stopping the server never breaks another test.
pub(super) static SERVER: RwLock<()> = RwLock::new(());

pub(super) struct PgFixture {
    pub(super) url: String,
    prefix: String,
    _shared: RwLockReadGuard<'static, ()>,
}

pub(super) fn pg_url() -> Option<String> {
    if !cfg!(feature = "postgres") {
        eprintln!("skipped: runws is built without the `postgres` feature");
        return None;
    }
    match std::env::var("RUNWS_TEST_PG_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            skip("RUNWS_TEST_PG_URL not set");
            None
        }
    }
}

/// Says a PostgreSQL test skipped; fails it instead where a server was
/// started for the tests (`RUNWS_TEST_PG_REQUIRED`, which `.ci/run` sets).
pub(super) fn skip(why: &str) {
    if std::env::var_os("RUNWS_TEST_PG_REQUIRED").is_some_and(|v| !v.is_empty()) {
        panic!("{why}, but RUNWS_TEST_PG_REQUIRED says a PostgreSQL server was started for the tests");
    }
    eprintln!("skipped: {why}");
}

impl PgFixture {
    pub(super) fn from_env() -> Option<PgFixture> {
        let url = pg_url()?;
        let shared = SERVER.read().unwrap_or_else(|e| e.into_inner());
        Some(PgFixture { url, prefix: crate::workspace::new_run_id().unwrap(), _shared: shared })
    }
}

impl Fixture for PgFixture {
    fn open(&self) -> Box<dyn Store> {
        open(&self.url).unwrap()
    }
    fn key(&self, name: &str) -> String {
        format!("{}/{name}", self.prefix)
    }
}

macro_rules! both_stores {
    ($($name:ident),* $(,)?) => {
        mod file_store {
            $(#[test] fn $name() { super::scenarios::$name(&super::FileFixture::new()); })*
            #[test] fn concurrent_holders_never_overlap() {
                super::concurrency::concurrent_holders_never_overlap(&super::FileFixture::new());
            }
        }
        mod pg_store {
            $(#[test] fn $name() {
                if let Some(f) = super::PgFixture::from_env() { super::scenarios::$name(&f); }
            })*
            #[test] fn concurrent_holders_never_overlap() {
                if let Some(f) = super::PgFixture::from_env() {
                    super::concurrency::concurrent_holders_never_overlap(&f);
                }
            }
        }
    };
}

both_stores!(
    grant_renew_release,
    tokens_grow_across_expiry,
    kleppmann_paused_holder_is_fenced,
    wait_takes_over_after_expiry,
    wait_runs_out,
    rejects_bad_input,
);

#[test]
fn encoded_keys_are_safe_and_distinct() {
    use crate::store::encode_key;
    let long_a = format!("{}a", "x/".repeat(200));
    let long_b = format!("{}b", "x/".repeat(200));
    let keys = [
        "a", ".", "..", "...", ".a", "a.", "a/b", "a%2Fb", "a~b", "~", "%", " ", "ü", "\\", &long_a, &long_b,
    ];
    let mut seen = std::collections::HashSet::new();
    for key in keys {
        let name = encode_key(key);
        crate::fsx::check_name(&name).unwrap();
        assert!(!name.starts_with('.'), "{name}");
        assert!(name.bytes().all(|b| b.is_ascii_alphanumeric() || b"%~_.-".contains(&b)), "{name}");
        assert!(seen.insert(name.clone()), "two keys share {name}");
    }
    assert_eq!(encode_key("nightly-report/2026-11-30"), "nightly-report%2F2026-11-30");
    assert!(encode_key(&long_a).contains('~') && encode_key(&long_a).len() < 140);
}

#[test]
fn urls_are_shown_without_passwords() {
    use crate::store::redact_url;
    assert_eq!(redact_url("postgres://u:fake-pw@h:5432/db"), "postgres://u:***@h:5432/db");
    assert_eq!(
        redact_url("postgresql://h/db?user=u&password=fake-pw"),
        "postgresql://h/db?user=u&password=***"
    );
    assert_eq!(redact_url("postgres://u@h/db"), "postgres://u@h/db");
    // A password with an unescaped `/` or `?`: whatever reads it, never shown.
    for url in ["postgres://u:pa/ss@h:5432/db", "postgres://u:pa?ss@h/db", "postgres://u:ab/c==@h/db"] {
        assert!(!redact_url(url).contains("pa") && !redact_url(url).contains("c=="), "{}", redact_url(url));
    }
    assert_eq!(redact_url("postgres://h/db?pass%77ord=fake-pw"), "postgres://h/db?pass%77ord=***");
    // An `@` in a query value is no password.
    assert_eq!(redact_url("postgres://h:5432/db?user=alice@h"), "postgres://h:5432/db?user=alice@h");

    let e = open("postgres://u:fake-pw@127.0.0.1:1/db").err().unwrap();
    if cfg!(feature = "postgres") {
        assert!(matches!(e, Error::StoreUnreachable { .. }), "{e}");
    } else {
        assert!(matches!(e, Error::Usage(_)) && e.to_string().contains("`postgres` feature"), "{e}");
    }
    assert!(!e.to_string().contains("fake-pw"), "{e}");
    assert_eq!(e.exit_code(), crate::exit::FAILURE);
    assert!(matches!(open("redis://h").err().unwrap(), Error::Usage(_)));
    assert!(matches!(open("file:").err().unwrap(), Error::Usage(_)));
}

#[test]
fn default_store_is_under_root() {
    let tmp = tempfile::tempdir().unwrap();
    let root = crate::workspace::resolve_root(Some(tmp.path())).unwrap();
    let url = crate::store::default_url(&root);
    assert_eq!(url, format!("file:{}/store", tmp.path().display()));
    let mut store = open(&url).unwrap();
    assert_eq!(store.acquire("k", "h", Duration::from_secs(5), Duration::ZERO).unwrap().token, 1);
    assert!(tmp.path().join("store/leases/k/lease.json").is_file());
    let mut again = open(&format!("file://{}/store", tmp.path().display())).unwrap();
    assert_eq!(again.show("k").unwrap().token, 1);
}

/// A small, seedable generator for test timings; no crate needed for this.
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64) -> Rng {
        let t = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_nanos() as u64;
        Rng((t ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1)
    }
    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
    pub(super) fn millis(&mut self, max: u64) -> Duration {
        Duration::from_micros(self.below(max * 1000))
    }
}

#[track_caller]
pub(super) fn assert_stale(e: Error, offered: u64, highest: u64) {
    match &e {
        Error::StaleFence { offered: o, highest: h, .. } if *o == offered && *h == highest => {}
        _ => panic!("expected a stale fence (offered {offered}, highest {highest}), got: {e}"),
    }
    assert_eq!(e.exit_code(), crate::exit::STALE_FENCE);
}

mod scenarios {
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
        // Timed from before A's lease is taken: A's lease runs out SHORT
        // after the store took it, which is after this instant however long
        // the call took to return on a busy machine.
        let started = Instant::now();
        let t = a.acquire(&key, "A", SHORT, Duration::ZERO).unwrap().token;
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
}

mod concurrency {
    //! Many holders, one key: tokens strictly increase, holds never overlap, and
    //! the sink never goes back to an older token.

    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    use super::{Fixture, Rng, assert_stale};
    use crate::store::PublishOutcome;

    const THREADS: usize = 4;
    const ROUNDS: usize = 20;

    /// One grant as its holder saw it: from the moment acquire returned to just
    /// before release was called, which lies inside the lease.
    struct Hold {
        token: u64,
        from: Instant,
        to: Instant,
    }

    pub(super) fn concurrent_holders_never_overlap(f: &dyn Fixture) {
        let key = f.key("contended");
        let holds = Mutex::new(Vec::new());
        // Workers still running; each one's guard counts it out even when it
        // panics, so the watcher always stops and the failure is reported.
        let running = AtomicUsize::new(THREADS);
        std::thread::scope(|scope| {
            let watcher = scope.spawn(|| {
                let mut store = f.open();
                let mut last = 0;
                let mut reads = 0;
                while running.load(Ordering::Acquire) > 0 {
                    if let Some((fence, bytes)) = store.read_published(&key).unwrap() {
                        assert!(fence >= last, "the sink went back from fence {last} to {fence}");
                        assert!(
                            String::from_utf8(bytes).unwrap().ends_with(&format!("-{fence}")),
                            "bytes of another fence"
                        );
                        last = fence;
                    }
                    reads += 1;
                }
                reads
            });
            let workers: Vec<_> = (0..THREADS)
                .map(|i| {
                    let (key, holds, running) = (&key, &holds, &running);
                    scope.spawn(move || {
                        let _counted = CountsOut(running);
                        let mut store = f.open();
                        let mut rng = Rng::new(i as u64);
                        let holder = format!("worker-{i}");
                        let mut mine = Vec::new();
                        for _ in 0..ROUNDS {
                            let lease = store.acquire(key, &holder, Duration::from_secs(5), Duration::from_secs(60)).unwrap();
                            let from = Instant::now();
                            // The previous holder published with a lower token.
                            if let Some((fence, _)) = store.read_published(key).unwrap() {
                                assert!(fence < lease.token, "fence {fence} already at or past token {}", lease.token);
                            }
                            let payload = format!("{holder}-{}", lease.token);
                            assert_eq!(store.publish(key, lease.token, payload.as_bytes()).unwrap(), PublishOutcome::Written);
                            std::thread::sleep(rng.millis(3));
                            let to = Instant::now();
                            store.release(key, &holder).unwrap();
                            // Once released, the same token with other bytes is refused
                            // whether or not someone else has published since.
                            let e = store.publish(key, lease.token, b"late-0").unwrap_err();
                            assert!(matches!(e, crate::error::Error::StaleFence { offered, .. } if offered == lease.token));
                            mine.push(Hold { token: lease.token, from, to });
                            std::thread::sleep(rng.millis(2));
                        }
                        assert!(mine.windows(2).all(|w| w[0].token < w[1].token), "{holder}'s tokens did not increase");
                        holds.lock().unwrap().extend(mine);
                    })
                })
                .collect();
            for w in workers {
                w.join().unwrap();
            }
            assert!(watcher.join().unwrap() > 0);
        });

        let mut holds = holds.into_inner().unwrap();
        holds.sort_by_key(|h| h.token);
        let tokens: Vec<u64> = holds.iter().map(|h| h.token).collect();
        let expected: Vec<u64> = (1..=(THREADS * ROUNDS) as u64).collect();
        assert_eq!(tokens, expected, "tokens were skipped or issued twice");
        for w in holds.windows(2) {
            assert!(
                w[0].to <= w[1].from,
                "token {} was granted while token {} was still held",
                w[1].token,
                w[0].token
            );
        }
        let mut store = f.open();
        let last = (THREADS * ROUNDS) as u64;
        assert_eq!(store.show(&key).unwrap().token, last);
        assert_eq!(store.read_published(&key).unwrap().map(|(fence, _)| fence), Some(last));
        assert_stale(store.publish(&key, last - 1, b"old").unwrap_err(), last - 1, last);
    }

    struct CountsOut<'a>(&'a AtomicUsize);

    impl Drop for CountsOut<'_> {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::Release);
        }
    }
}

mod process {
    //! The file store across processes: children of this test binary contend
    //! for one key and some are killed with SIGKILL while they work (mostly
    //! inside acquire, where they spend their time). No token is issued twice,
    //! holds never overlap, and the next token is higher than any seen.
    //!
    //! A child is this same test executable running only [`child_worker`], told
    //! by `RUNWS_STORE_WORKER` where the store is and where to log.

    use std::io::Write;
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant, SystemTime};

    use super::Rng;
    use crate::store::open;

    const WORKER_ENV: &str = "RUNWS_STORE_WORKER";
    const KEY: &str = "nightly-report/2026-11-30";
    /// Long enough that a live child never outlasts it; a killed holder's lease
    /// blocks the others this long.
    const TTL: Duration = Duration::from_secs(1);
    /// Children work until this file appears beside their logs.
    const STOP: &str = "stop";

    fn now_ns() -> u128 {
        SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_nanos()
    }

    /// Does nothing in a normal test run; in a child it is the worker.
    #[test]
    fn child_worker() {
        let Ok(spec) = std::env::var(WORKER_ENV) else {
            return;
        };
        let (url, log) = spec.split_once('\n').unwrap();
        let stop = std::path::Path::new(log).with_file_name(STOP);
        let mut store = open(url).unwrap();
        let mut log = std::fs::OpenOptions::new().append(true).create(true).open(log).unwrap();
        let holder = format!("child:{}", std::process::id());
        let mut rng = Rng::new(u64::from(std::process::id()));
        while !stop.exists() {
            let lease = store.acquire(KEY, &holder, TTL, Duration::from_secs(60)).unwrap();
            // One write per line, so a kill never leaves half a line.
            log.write_all(format!("G {} {}\n", lease.token, now_ns()).as_bytes()).unwrap();
            std::thread::sleep(rng.millis(2));
            log.write_all(format!("R {} {}\n", lease.token, now_ns()).as_bytes()).unwrap();
            store.release(KEY, &holder).unwrap();
        }
    }

    fn spawn(url: &str, log: &std::path::Path) -> Child {
        Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "store::tests::process::child_worker", "--test-threads=1", "--quiet"])
            .env(WORKER_ENV, format!("{url}\n{}", log.display()))
            .stdout(Stdio::null())
            .spawn()
            .unwrap()
    }

    #[test]
    fn file_store_killed_processes_never_lower_a_token() {
        let tmp = tempfile::tempdir().unwrap();
        let url = format!("file:{}", tmp.path().join("store").display());
        let mut rng = Rng::new(7);
        let mut children: Vec<(Child, std::path::PathBuf)> = (0..4)
            .map(|i| {
                let log = tmp.path().join(format!("child-{i}.log"));
                (spawn(&url, &log), log)
            })
            .collect();
        // Kill three children at random moments, starting a fresh one for each.
        let mut killed = 0;
        for i in 0..3 {
            std::thread::sleep(Duration::from_millis(150) + rng.millis(250));
            let victim = rng.below(children.len() as u64) as usize;
            let (child, _) = &mut children[victim];
            if child.try_wait().unwrap().is_none() {
                child.kill().unwrap();
                killed += 1;
            }
            let log = tmp.path().join(format!("late-{i}.log"));
            children.push((spawn(&url, &log), log));
        }
        // Work goes on until enough was granted (a deadline, not a fixed
        // time: a loaded machine grants fewer a second).
        let granted = |children: &[(Child, std::path::PathBuf)]| {
            children
                .iter()
                .map(|(_, log)| std::fs::read_to_string(log).unwrap_or_default())
                .map(|l| l.lines().filter(|l| l.starts_with("G ")).count())
                .sum::<usize>()
        };
        let enough = Instant::now() + Duration::from_secs(60);
        std::thread::sleep(Duration::from_millis(300));
        while granted(&children) < 30 && Instant::now() < enough {
            std::thread::sleep(Duration::from_millis(20));
        }
        std::fs::write(tmp.path().join(STOP), b"").unwrap();
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut logs = Vec::new();
        for (mut child, log) in children {
            loop {
                if let Some(status) = child.try_wait().unwrap() {
                    let was_killed = std::os::unix::process::ExitStatusExt::signal(&status) == Some(9);
                    assert!(status.success() || was_killed, "a child failed: {status}");
                    break;
                }
                assert!(Instant::now() < deadline, "children did not finish");
                std::thread::sleep(Duration::from_millis(20));
            }
            logs.push(std::fs::read_to_string(log).unwrap_or_default());
        }
        assert!(killed > 0, "no child was killed while it worked");

        // token -> (granted-seen-at, released-at)
        let mut holds: std::collections::BTreeMap<u64, (u128, Option<u128>)> = Default::default();
        for line in logs.iter().flat_map(|l| l.lines()) {
            let mut parts = line.split(' ');
            let (kind, token, at) = (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap());
            let (token, at): (u64, u128) = (token.parse().unwrap(), at.parse().unwrap());
            match kind {
                "G" => assert!(holds.insert(token, (at, None)).is_none(), "token {token} was issued twice"),
                _ => holds.get_mut(&token).unwrap().1 = Some(at),
            }
        }
        let max = *holds.keys().last().unwrap();
        assert!(holds.len() >= 20, "too little work was done: {}", holds.len());
        let ordered: Vec<_> = holds.iter().collect();
        for w in ordered.windows(2) {
            let ((_, (_, released)), (next, (granted, _))) = (w[0], w[1]);
            if let Some(released) = released {
                assert!(released <= granted, "token {next} was granted while its predecessor was held");
            }
        }

        let mut store = open(&url).unwrap();
        let highest = store.show(KEY).unwrap().token;
        assert!(highest >= max, "the store forgot token {max} (it says {highest})");
        let next = store.acquire(KEY, "parent", TTL, Duration::from_secs(10)).unwrap().token;
        assert!(next > highest && next > max, "token {next} after {highest}");
    }
}

mod restart {
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
            super::skip("RUNWS_TEST_PG_CTL not set");
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
}
