//! Tests run against both stores through the same functions: each scenario
//! takes a [`Fixture`] and `both_stores!` instantiates it for the file store
//! and for PostgreSQL.
//!
//! The PostgreSQL tests need a server: they read its URL from
//! `RUNWS_TEST_PG_URL` and, when it is unset, say so on stderr and pass
//! without testing anything (CI always sets it: `eval "$(ci/postgres.sh
//! start)"`). The restart test also needs `RUNWS_TEST_PG_CTL`, a shell
//! command prefix to which it appends `stop` and `start`.

mod concurrency;
mod process;
mod restart;
mod scenarios;

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
            eprintln!("skipped: RUNWS_TEST_PG_URL not set");
            None
        }
    }
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
