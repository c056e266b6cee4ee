//! Leases with fencing tokens, and the sinks that check them.
//!
//! A lease says who may work on a key for now; its fencing token says, for
//! ever after, which work is newest. A holder can be paused past its expiry
//! and wake believing it still holds the lease, so safety never rests on the
//! lease alone: every grant carries a token strictly greater than every token
//! issued for the key before, made durable before it is returned. Tokens only
//! grow, across releases, expiries, crashes and restarts of the store.
//!
//! A sink that can see the store accepts a write only with the highest token
//! issued for its key ([`check_issued`]: a superseded token is stale, a token
//! never issued is refused), checked and written as one step against any
//! grant, and, like every sink, only with a token at least as high as any it
//! has seen published (equal only for an identical retry). A holder whose
//! lease ran out, while nobody has taken it since, still holds the highest
//! token and may still publish: the sink orders writes by token, as fencing
//! tokens do, not by lease time.
//!
//! Two stores implement [`Store`]: [`file`], compare-and-set on the local
//! file system for the processes of one machine, and `postgres` (built with
//! the `postgres` cargo feature, on by default), one SQL statement (or one
//! transaction) per decision for many machines.
//! [`publish_to_dir`] is the sink for a plain directory; on its own it knows
//! only the fences published there, and [`Store::publish_to`] adds the
//! store's check.

mod file;
#[cfg(feature = "postgres")]
mod pgconn;
#[cfg(feature = "postgres")]
mod postgres;
mod sink;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use crate::error::{Error, IoContext, Result};
use crate::fsx::Dir;
use crate::workspace::Root;

pub(crate) use sink::{publish_to_dir, read_from_dir};

/// Longest key or holder id accepted, in bytes.
pub(crate) const MAX_ID_BYTES: usize = 512;

/// Longest lease accepted; far beyond any real use, it keeps deadline
/// arithmetic clear of overflow in every store.
pub(crate) const MAX_TTL: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// A lease granted to `holder`, valid until `expires_at` by the local clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub key: String,
    pub holder: String,
    /// The fencing token: pass it to the sink with every write.
    pub token: u64,
    pub expires_at: SystemTime,
}

/// What the store records for a key.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LeaseInfo {
    pub key: String,
    /// The last holder; kept after expiry until someone else takes the lease
    /// or the holder releases it.
    pub holder: Option<String>,
    /// The highest token ever issued for the key (0: never granted).
    pub token: u64,
    pub expires_at: Option<SystemTime>,
    /// True when a holder is recorded but its lease has run out.
    pub expired: bool,
}

/// What a successful publish did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublishOutcome {
    /// The payload was written under the offered fence.
    Written,
    /// The same bytes were already published with the same fence: an
    /// idempotent retry, nothing was rewritten.
    Unchanged,
}

/// A lease and fencing-token store.
pub trait Store: Send {
    /// Takes the lease on `key` for `ttl` when it is free or expired, trying
    /// again until `wait` runs out ([`Error::LeaseHeld`] then). The lease
    /// returned was granted by its last attempt and is still valid.
    fn acquire(&mut self, key: &str, holder: &str, ttl: Duration, wait: Duration) -> Result<Lease>;
    /// Extends the lease `holder` holds, keeping its token. Fails once
    /// someone else has taken the lease.
    fn renew(&mut self, key: &str, holder: &str, ttl: Duration) -> Result<Lease>;
    /// Frees the lease if `holder` still holds it; the token counter stays.
    fn release(&mut self, key: &str, holder: &str) -> Result<()>;
    fn show(&mut self, key: &str) -> Result<LeaseInfo>;
    /// Writes `payload` as the value of `key` in the store's own sink when
    /// `fence` is the highest token issued for `key` ([`check_issued`]) and
    /// above the highest fence published for `key`, or equal with the same
    /// bytes; [`Error::StaleFence`] or [`Error::UnissuedFence`] otherwise.
    /// No grant on `key` comes between the check and the write.
    fn publish(&mut self, key: &str, fence: u64, payload: &[u8]) -> Result<PublishOutcome>;
    /// [`publish_to_dir`] into `dir`, with `fence` first checked against
    /// this store's lease on `key` as [`Store::publish`] checks it, and no
    /// grant on `key` between the check and the write.
    fn publish_to(&mut self, dir: &Path, key: &str, fence: u64, payload: &[u8]) -> Result<PublishOutcome>;
    /// The fence and bytes last published for `key`.
    fn read_published(&mut self, key: &str) -> Result<Option<(u64, Vec<u8>)>>;
    /// Records `run` in the fleet view (PostgreSQL only): an ended record
    /// replaces a running one, never the reverse.
    fn record_run(&mut self, _run: &FleetRun) -> Result<()> {
        Err(Error::Usage(FLEET_NEEDS_POSTGRES.into()))
    }
    /// The fleet's runs matching `q`, newest first.
    fn fleet_runs(&mut self, _q: &FleetQuery) -> Result<Vec<FleetRun>> {
        Err(Error::Usage(FLEET_NEEDS_POSTGRES.into()))
    }
    /// Names `archive` as where the run's evidence went, in its record;
    /// false when the view holds no record of that run.
    fn fleet_set_archive(&mut self, _host: &str, _run_id: &str, _archive: &str) -> Result<bool> {
        Err(Error::Usage(FLEET_NEEDS_POSTGRES.into()))
    }
    /// A running run's heartbeat: its record's lease now lasts until
    /// `lease_until` (a run marked stale meanwhile is running again).
    fn fleet_heartbeat(&mut self, _host: &str, _run_id: &str, _lease_until: &str) -> Result<()> {
        Err(Error::Usage(FLEET_NEEDS_POSTGRES.into()))
    }
    /// Marks `stale` the running runs of hosts other than `host` whose
    /// recorded lease has run out; returns them (host, run id).
    fn fleet_mark_stale(&mut self, _host: &str) -> Result<Vec<(String, String)>> {
        Err(Error::Usage(FLEET_NEEDS_POSTGRES.into()))
    }
}

const FLEET_NEEDS_POSTGRES: &str =
    "the fleet view needs a PostgreSQL store: give --store postgres://... or set RUNWS_STORE";

/// One run as the fleet view holds it: what `ls --fleet` and `show` print
/// of a run on any host.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FleetRun {
    pub run_id: String,
    pub host: String,
    /// The ROOT the run lives under on its host.
    pub root: String,
    pub job: String,
    pub status: String,
    pub started_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    pub input_fingerprint: String,
    #[serde(default)]
    pub outputs: Vec<FleetOutput>,
    /// Where the sealed archive went, when it was sealed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive: Option<String>,
    /// While it runs: until when its heartbeat holds it live. A running
    /// run past it is marked `stale` by another host's `reap`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_until: Option<String>,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct FleetOutput {
    pub name: String,
    pub bytes: u64,
    pub sha256: String,
}

/// Which of the fleet's runs to list.
#[derive(Debug, Clone, Default)]
pub struct FleetQuery {
    pub job: Option<String>,
    pub host: Option<String>,
    /// A run id, or a prefix of one.
    pub run: Option<String>,
    pub since: Option<Duration>,
    pub limit: Option<usize>,
}

/// Opens the store named by `url`: `file:DIR` or `postgres://...`
/// (`postgresql://...`).
pub fn open(url: &str) -> Result<Box<dyn Store>> {
    if let Some(rest) = url.strip_prefix("file:") {
        // `file:///dir` as well as `file:/dir`.
        let path = match rest.strip_prefix("//") {
            Some(p) if p.starts_with('/') => p,
            _ => rest,
        };
        if path.is_empty() {
            return Err(Error::Usage("a file store needs a directory: `file:DIR`".into()));
        }
        let mut path = PathBuf::from(path);
        if path.is_relative() {
            let cwd = std::env::current_dir().ctx("cannot read the current directory", ".")?;
            path = cwd.join(path);
        }
        return Ok(Box::new(file::FileStore::open(&path)?));
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return open_postgres(url);
    }
    Err(Error::Usage(format!("unknown store `{}`: use `file:DIR` or `postgres://...`", redact_url(url))))
}

#[cfg(feature = "postgres")]
fn open_postgres(url: &str) -> Result<Box<dyn Store>> {
    Ok(Box::new(postgres::PgStore::connect(url, None)?))
}

/// How long a fleet write waits for the store to take its connection.
#[cfg(feature = "postgres")]
const FLEET_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// Opens the PostgreSQL store at `url` for a fleet write: a connection
/// not taken within [`FLEET_CONNECT_TIMEOUT`] fails (the URL's own
/// `connect_timeout` wins).
#[cfg(feature = "postgres")]
pub fn open_fleet(url: &str) -> Result<Box<dyn Store>> {
    Ok(Box::new(postgres::PgStore::connect(url, Some(FLEET_CONNECT_TIMEOUT))?))
}

#[cfg(not(feature = "postgres"))]
pub fn open_fleet(url: &str) -> Result<Box<dyn Store>> {
    open_postgres(url)
}

#[cfg(not(feature = "postgres"))]
fn open_postgres(url: &str) -> Result<Box<dyn Store>> {
    Err(Error::Usage(format!(
        "cannot open the store `{}`: this runws was built without the `postgres` feature",
        redact_url(url)
    )))
}

/// Opens the store named by `url` for a check only: a store that cannot be
/// reached or made (a server down, a directory on a read-only file system)
/// is [`Error::StoreUnreachable`], every other failure is itself.
pub(crate) fn reach(url: &str) -> Result<Box<dyn Store>> {
    match open(url) {
        Err(Error::Io { op, path, source }) => Err(Error::StoreUnreachable {
            store: redact_url(url),
            why: format!("{op} `{}`: {source}", path.display()),
        }),
        other => other,
    }
}

/// The embedded store under ROOT.
pub(crate) fn default_url(root: &Root) -> String {
    format!("file:{}", root.store().display())
}

/// Checks a lease key: not empty, no NUL, at most [`MAX_ID_BYTES`] bytes.
/// Anything else is allowed; stores encode keys before they touch a path.
pub(crate) fn check_key(key: &str) -> Result<()> {
    check_id(key, ["a key cannot be empty", "a key cannot contain NUL", "a key is at most 512 bytes"])
}

/// Checks a holder id, with the rules of [`check_key`].
pub(crate) fn check_holder(holder: &str) -> Result<()> {
    check_id(
        holder,
        ["a holder cannot be empty", "a holder cannot contain NUL", "a holder is at most 512 bytes"],
    )
}

fn check_id(s: &str, whys: [&'static str; 3]) -> Result<()> {
    let why = if s.is_empty() {
        whys[0]
    } else if s.contains('\0') {
        whys[1]
    } else if s.len() > MAX_ID_BYTES {
        whys[2]
    } else {
        return Ok(());
    };
    let mut shown: String = s.chars().take(80).collect();
    if shown.len() < s.len() {
        shown.push_str("...");
    }
    Err(Error::InvalidName { name: shown.escape_debug().to_string(), why })
}

/// Checks the arguments of an acquire or a renewal.
pub(crate) fn check_request(key: &str, holder: &str, ttl: Duration) -> Result<()> {
    check_key(key)?;
    check_holder(holder)?;
    check_ttl(ttl)
}

fn check_ttl(ttl: Duration) -> Result<()> {
    if ttl.is_zero() || ttl > MAX_TTL {
        return Err(Error::Usage(format!("a lease lasts more than 0 and at most 100 years, not {ttl:?}")));
    }
    Ok(())
}

/// Accepts `fence` for a write to `key` only when it is `highest`, the
/// highest token issued for `key`: a lower one was superseded by a later
/// grant ([`Error::StaleFence`]), a higher one, or any when nothing was ever
/// granted (`highest` 0), was never issued ([`Error::UnissuedFence`]).
pub(crate) fn check_issued(key: &str, fence: u64, highest: u64) -> Result<()> {
    let why = if highest == 0 {
        format!("no lease on `{key}` was ever granted")
    } else if fence < highest {
        return Err(Error::StaleFence { key: key.to_string(), offered: fence, highest, same_fence: false });
    } else if fence > highest {
        format!("it was never issued (the highest issued is {highest})")
    } else {
        return Ok(());
    };
    Err(Error::UnissuedFence { key: key.to_string(), offered: fence, why })
}

impl LeaseInfo {
    /// A key nobody has ever held.
    pub(crate) fn never_held(key: &str) -> LeaseInfo {
        LeaseInfo { key: key.to_string(), holder: None, token: 0, expires_at: None, expired: false }
    }
}

/// The refusal for `holder`, who does not hold the lease `info` describes.
pub(crate) fn not_holder(holder: &str, info: &LeaseInfo) -> Error {
    let why = match &info.holder {
        None if info.token == 0 => "nobody has held it".to_string(),
        None => "it was released".to_string(),
        Some(other) if info.expired => {
            format!("it is held by `{other}` (token {}), whose lease expired", info.token)
        }
        Some(other) => format!("it is held by `{other}` (token {})", info.token),
    };
    Error::NotLeaseHolder { key: info.key.clone(), holder: holder.to_string(), why }
}

/// Reads the JSON record `name` in `dir`, which must name `key` as its own
/// (`key_of`): a record found under another key's name is corruption.
pub(crate) fn read_record<T: serde::de::DeserializeOwned>(
    dir: &Dir,
    name: &str,
    key: &str,
    key_of: impl Fn(&T) -> &str,
) -> Result<Option<T>> {
    let path = dir.join(name);
    let Some(bytes) = read_file(dir, name)? else {
        return Ok(None);
    };
    let record: T = serde_json::from_slice(&bytes)
        .map_err(|e| Error::StoreCorrupt { path: path.clone(), why: e.to_string() })?;
    if key_of(&record) != key {
        return Err(Error::StoreCorrupt { path, why: format!("it records the key `{}`", key_of(&record)) });
    }
    Ok(Some(record))
}

/// The whole regular file `name` in `dir`, refusing symlinks.
pub(crate) fn read_file(dir: &Dir, name: &str) -> Result<Option<Vec<u8>>> {
    use std::io::Read;
    let Some(mut f) = dir.open_read(name)? else {
        return Ok(None);
    };
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes).ctx("cannot read", dir.join(name))?;
    Ok(Some(bytes))
}

/// What one attempt to take a lease found.
pub(crate) enum Attempt {
    Granted(Lease),
    Held { holder: String, token: u64, expires_in: Duration },
}

/// Repeats `attempt` until it grants a lease that is still valid when it
/// comes back, or until `wait` runs out. Each attempt decides atomically in
/// the store; nothing is decided here from an earlier look.
pub(crate) fn acquire_with_wait(
    key: &str,
    wait: Duration,
    mut attempt: impl FnMut() -> Result<Attempt>,
) -> Result<Lease> {
    let deadline = Instant::now() + wait;
    let mut backoff = Duration::from_millis(2);
    loop {
        let (holder, token, expires_in) = match attempt()? {
            // A grant that expired on its way back (a paused process, a tiny
            // ttl) is worthless: its token is spent, try again.
            Attempt::Granted(lease) if SystemTime::now() < lease.expires_at => return Ok(lease),
            Attempt::Granted(lease) => (lease.holder, lease.token, Duration::ZERO),
            Attempt::Held { holder, token, expires_in } => (holder, token, expires_in),
        };
        let now = Instant::now();
        if now >= deadline {
            return Err(Error::LeaseHeld { key: key.to_string(), holder, token, expires_in });
        }
        // Wake just after the holder's expiry when that comes first, so a
        // waiter takes over promptly; otherwise back off, with jitter so
        // waiters do not retry in lock step.
        let nap = jitter(backoff).min(expires_in + Duration::from_millis(1)).min(deadline - now);
        std::thread::sleep(nap);
        backoff = (backoff * 2).min(Duration::from_millis(100));
    }
}

/// Between half and all of `d`, varying between calls and processes.
fn jitter(d: Duration) -> Duration {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let nanos =
        SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|t| t.subsec_nanos()).unwrap_or(0);
    let mut x = u64::from(nanos)
        ^ (u64::from(std::process::id()) << 32)
        ^ SEQ.fetch_add(0x9e37_79b9, Ordering::Relaxed);
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    let half = d / 2;
    half + Duration::from_nanos(x % (half.as_nanos() as u64 + 1))
}

/// A key as one safe file name: bytes outside `[A-Za-z0-9_.-]` and a
/// leading `.` are percent-encoded, so the name is never `.`, `..`, hidden,
/// or holds a `/`, and distinct keys give distinct names. A name too long for
/// a file system is cut and followed by `~` and 128 bits of the key's
/// sha256; `~` is always encoded in the plain form, so the two forms never
/// meet.
pub(crate) fn encode_key(key: &str) -> String {
    const LIMIT: usize = 150;
    let mut out = String::with_capacity(key.len());
    for (i, b) in key.bytes().enumerate() {
        let plain = b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || (b == b'.' && i > 0);
        if plain {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    if out.len() <= LIMIT {
        return out;
    }
    let mut cut = 100;
    // Never cut inside a `%XX`.
    while out.as_bytes()[cut - 1] == b'%' || out.as_bytes()[cut - 2] == b'%' {
        cut -= 1;
    }
    out.truncate(cut);
    out.push('~');
    out.push_str(&sha256_hex(key.as_bytes())[..32]);
    out
}

/// Opens `path` as a directory, creating it and its parents if needed, and
/// making a new directory's entry durable: a token or fence written inside
/// must not vanish with a directory entry lost in a crash.
pub(crate) fn open_dir_durable(path: &Path) -> Result<Dir> {
    if !path.is_dir() {
        crate::fsx::create_private_dirs(path).ctx("cannot create", path)?;
        if let Some(parent) = path.parent() {
            Dir::open(parent)?.sync()?;
        }
    }
    Dir::open(path)
}

/// Opens the subdirectory `name` of `parent`, creating it durably if needed.
pub(crate) fn subdir_durable(parent: &Dir, name: &str) -> Result<Dir> {
    match parent.mkdir(name, 0o755) {
        Ok(()) => parent.sync()?,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(Error::io("cannot create", parent.join(name), e)),
    }
    parent.sub(name)
}

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// The bytes of `s` with its `%xx` escapes decoded; `None` for an escape
/// that is not `%` and two hex digits.
pub(crate) fn percent_decode(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            // Two hex digits, nothing else (`from_str_radix` takes a sign).
            let hex = s.get(i + 1..i + 3).filter(|h| h.bytes().all(|c| c.is_ascii_hexdigit()))?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(out)
}

/// `url` with any password replaced, for messages.
pub(crate) fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let mut authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    // A password holding an unescaped `/` or `?` ends the authority early
    // (libpq reads no password then, and runws connects with none), but it
    // is still what was typed as a secret: hidden up to its `@`, unless that
    // `@` is in a query value (`?user=ann@db`).
    if !rest[..authority_end].contains('@')
        && rest[..authority_end].contains(':')
        && let Some(at) = rest.find('@')
        && !rest[..at].split_once('?').is_some_and(|(_, q)| q.contains('='))
    {
        authority_end = at + rest[at..].find(['/', '?']).unwrap_or(rest.len() - at);
    }
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{user}:***@{host}"),
            None => authority.to_string(),
        },
        None => authority.to_string(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let params: Vec<String> = query
                .split('&')
                .map(|p| match p.split_once('=') {
                    // The key as the parser reads it, `%xx` decoded.
                    Some((k, _))
                        if percent_decode(k).is_some_and(|k| k.eq_ignore_ascii_case(b"password")) =>
                    {
                        format!("{k}=***")
                    }
                    _ => p.to_string(),
                })
                .collect();
            format!("{path}?{}", params.join("&"))
        }
        None => tail.to_string(),
    };
    format!("{scheme}://{authority}{tail}")
}
