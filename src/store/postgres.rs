//! The PostgreSQL store: leases and the sink for processes on many machines.
//!
//! Every decision is one SQL statement, so the database's row lock makes it
//! atomic, and its commit (with `synchronous_commit` on, which each session
//! insists on) makes it durable before the answer comes back. A publish is
//! one transaction: it reads the key's highest token with the row locked
//! `FOR SHARE`, so a grant (which updates the row) waits until the write
//! has committed, and writes only after the check. Expiry is
//! judged by the database clock (`now()`), never a client's. A key's row is
//! never deleted: release clears the holder and keeps the token, so the
//! counter only grows, across releases and server restarts.
//!
//! The [`Lease::expires_at`] a client gets back is its own clock's reading
//! from before it sent the request, plus the ttl: never later than the
//! database's deadline, as long as the two clocks run at the same rate.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, SystemTime};

use postgres::{Client, NoTls, Row, Statement};

use super::{
    Attempt, Lease, LeaseInfo, PublishOutcome, Store, acquire_with_wait, check_holder, check_issued,
    check_key, check_request, not_holder, redact_url,
};
use crate::error::{Error, Result};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The tables carry a schema version in their names, so a later layout can
/// live beside this one instead of migrating it in place.
const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS runws_leases_v1 (
    key        text PRIMARY KEY,
    holder     text,
    token      bigint NOT NULL CHECK (token > 0),
    expires_at timestamptz
);
CREATE TABLE IF NOT EXISTS runws_sink_v1 (
    key           text PRIMARY KEY,
    fencing_token bigint NOT NULL,
    payload       bytea NOT NULL
);
CREATE TABLE IF NOT EXISTS runws_runs_v1 (
    host       text NOT NULL,
    run_id     text NOT NULL,
    job        text NOT NULL,
    status     text NOT NULL,
    started_at timestamptz NOT NULL,
    record     jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (host, run_id)
);
CREATE INDEX IF NOT EXISTS runws_runs_v1_started ON runws_runs_v1 (started_at DESC, run_id DESC);
CREATE INDEX IF NOT EXISTS runws_runs_v1_job ON runws_runs_v1 (job, started_at DESC);";

/// A run's record in the fleet view: an ended record replaces a running
/// one, never the other way round, so a start sent late (or again from a
/// queue) cannot undo an end.
const RECORD_RUN: &str = "
INSERT INTO runws_runs_v1 AS r (host, run_id, job, status, started_at, record)
VALUES ($1, $2, $3, $4, ($5::text)::timestamptz, ($6::text)::jsonb)
ON CONFLICT (host, run_id) DO UPDATE
    SET job = EXCLUDED.job, status = EXCLUDED.status, started_at = EXCLUDED.started_at,
        record = EXCLUDED.record, updated_at = now()
    WHERE r.status = 'running' OR EXCLUDED.status <> 'running'";

/// Where a run's evidence went, set in its record alone: nothing else of
/// the record is sent again.
const SET_ARCHIVE: &str = "
UPDATE runws_runs_v1
SET record = jsonb_set(record, '{archive}', to_jsonb($3::text)), updated_at = now()
WHERE host = $1 AND run_id = $2
RETURNING 1";

/// A running run's heartbeat: its lease, and `running` again if another
/// host's reaper thought it stale. An ended record is never touched.
const HEARTBEAT: &str = "
UPDATE runws_runs_v1
SET status = 'running',
    record = jsonb_set(jsonb_set(record, '{lease_until}', to_jsonb($3::text)), '{status}', '\"running\"'),
    updated_at = now()
WHERE host = $1 AND run_id = $2 AND status IN ('running', 'stale')";

/// Another host's running runs whose recorded lease ran out: `stale` in
/// the view (their own host's reaper decides what they are). A lease that
/// is not a timestamp of runws's form is never read. None is ever cast: a
/// forged one of that form that is no date (month 13, year 0) would fail
/// the statement, and with it every host's marking; runws's form in UTC
/// sorts as text, so its seconds are compared with now's as text.
const MARK_STALE: &str = "
UPDATE runws_runs_v1
SET status = 'stale', record = jsonb_set(record, '{status}', '\"stale\"'), updated_at = now()
WHERE status = 'running' AND host <> $1
  AND record->>'lease_until' ~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{1,9})?Z$'
  AND left(record->>'lease_until', 19) < to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS')
RETURNING host, run_id";

/// The fleet's runs, newest first, each filter applying when given. A run
/// id prefix is compared as text, never as a LIKE pattern: `_`, which a
/// run id may hold, is not a wildcard there; the run of exactly that id
/// comes first, so a limit never leaves it out.
const FLEET_RUNS: &str = "
SELECT record::text FROM runws_runs_v1
WHERE ($1::text IS NULL OR job = $1)
  AND ($2::text IS NULL OR host = $2)
  AND ($3::text IS NULL OR left(run_id, length($3)) = $3)
  AND ($4::bigint IS NULL OR started_at >= now() - $4::bigint * interval '1 millisecond')
ORDER BY ($3::text IS NOT NULL AND run_id = $3) DESC, started_at DESC, run_id DESC
LIMIT $5";

/// Serialises first-time schema creation between clients: two concurrent
/// `CREATE TABLE IF NOT EXISTS` can otherwise both miss the table and one
/// fail on a duplicate catalog entry. The number is arbitrary but fixed.
const SCHEMA_LOCK: i64 = 0x7275_6e77_735f_7631; // "runws_v1"

/// Grants the lease when the key is new, released, or expired, with the
/// next token from the row's own counter: one statement, so one decision.
const ACQUIRE: &str = "
INSERT INTO runws_leases_v1 AS l (key, holder, token, expires_at)
VALUES ($1, $2, 1, now() + $3::bigint * interval '1 microsecond')
ON CONFLICT (key) DO UPDATE
    SET holder = EXCLUDED.holder, token = l.token + 1, expires_at = EXCLUDED.expires_at
    WHERE l.holder IS NULL OR l.expires_at <= now()
RETURNING token";

/// Who holds the key and for how long, in microseconds of database time.
const HOLDER: &str = "
SELECT holder, token, GREATEST(0, (extract(epoch FROM expires_at - now()) * 1000000)::bigint)
FROM runws_leases_v1 WHERE key = $1";

/// Renewal keeps the token; the holder still being recorded means nobody
/// took the lease since, even if it ran out, so the token is still the
/// highest and renewing is safe.
const RENEW: &str = "
UPDATE runws_leases_v1 SET expires_at = now() + $3::bigint * interval '1 microsecond'
WHERE key = $1 AND holder = $2
RETURNING token";

const RELEASE: &str = "
UPDATE runws_leases_v1 SET holder = NULL, expires_at = NULL
WHERE key = $1 AND holder = $2
RETURNING token";

const SHOW: &str = "
SELECT holder, token, expires_at, holder IS NOT NULL AND expires_at <= now()
FROM runws_leases_v1 WHERE key = $1";

/// The highest token issued for a key, its row held against any grant until
/// the transaction ends.
const ISSUED: &str = "SELECT token FROM runws_leases_v1 WHERE key = $1 FOR SHARE";

/// Writes only over a lower fence; an equal or higher one returns no row.
const PUBLISH: &str = "
INSERT INTO runws_sink_v1 AS s (key, fencing_token, payload) VALUES ($1, $2, $3)
ON CONFLICT (key) DO UPDATE
    SET fencing_token = EXCLUDED.fencing_token, payload = EXCLUDED.payload
    WHERE s.fencing_token < EXCLUDED.fencing_token
RETURNING fencing_token";

/// Why a publish was refused: the highest fence, and whether the stored
/// bytes are the ones offered.
const PUBLISHED_SAME: &str = "SELECT fencing_token, payload = $2 FROM runws_sink_v1 WHERE key = $1";

const READ_PUBLISHED: &str = "SELECT fencing_token, payload FROM runws_sink_v1 WHERE key = $1";

pub struct PgStore {
    target: super::pgconn::Target,
    tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
    /// The URL with its password hidden, for messages.
    shown: String,
    /// `None` after the connection broke; the next call reconnects.
    conn: Option<Conn>,
}

struct Conn {
    client: Client,
    /// Each statement is parsed once per connection, not once per call.
    prepared: HashMap<&'static str, Statement>,
}

impl PgStore {
    /// Connects (within `timeout` when the URL sets none, else
    /// [`CONNECT_TIMEOUT`]) and creates the tables if they are missing.
    pub fn connect(url: &str, timeout: Option<Duration>) -> Result<PgStore> {
        let shown = redact_url(url);
        let mut target = super::pgconn::target(url, &super::pgconn::ProcessEnv)
            .map_err(|e| Error::Usage(format!("invalid PostgreSQL URL `{shown}`: {e}")))?;
        let config = &mut target.config;
        // An unreachable host should fail in seconds, not after the
        // system's TCP timeout.
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(timeout.unwrap_or(CONNECT_TIMEOUT));
        }
        if config.get_application_name().is_none() {
            config.application_name("runws");
        }
        config.ssl_mode(match target.mode {
            super::pgconn::SslMode::Disable => postgres::config::SslMode::Disable,
            super::pgconn::SslMode::Prefer => postgres::config::SslMode::Prefer,
            _ => postgres::config::SslMode::Require,
        });
        let tls = super::pgconn::connector(&target)
            .map_err(|why| Error::StoreUnreachable { store: shown.clone(), why })?;
        let mut store = PgStore { target, tls, shown, conn: None };
        store.conn()?;
        Ok(store)
    }

    fn conn(&mut self) -> Result<&mut Conn> {
        if self.conn.as_ref().is_some_and(|c| c.client.is_closed()) {
            self.conn = None;
        }
        if self.conn.is_none() {
            // The client library's connect timeout covers the TCP connection
            // only: a server that takes it and never answers would hold
            // runws for ever. The connection is made on a thread, waited for
            // twice that timeout, and joined once made (so that runws, which
            // may fork a sandbox's init next, is single-threaded again).
            let deadline = self.target.config.get_connect_timeout().copied().unwrap_or(CONNECT_TIMEOUT) * 2;
            let (config, tls) = (self.target.config.clone(), self.tls.clone());
            let (tx, rx) = std::sync::mpsc::channel();
            let thread = std::thread::spawn(move || {
                let _ = tx.send(match tls {
                    Some(tls) => config.connect(tls),
                    None => config.connect(NoTls),
                });
            });
            let connected = rx.recv_timeout(deadline).map_err(|_| Error::StoreUnreachable {
                store: self.shown.clone(),
                why: format!("the server did not answer within {} s", deadline.as_secs()),
            })?;
            let _ = thread.join();
            let mut client = connected.map_err(|e| Error::StoreUnreachable {
                store: self.shown.clone(),
                why: super::pgconn::explain(&e, &self.target),
            })?;
            let setup = client
                .batch_execute("SET synchronous_commit TO on")
                .and_then(|()| create_schema(&mut client));
            setup.map_err(|e| self.failure("create its tables", e))?;
            self.conn = Some(Conn { client, prepared: HashMap::new() });
        }
        self.conn.as_mut().ok_or_else(|| Error::Other("the connection vanished".into()))
    }

    /// Runs one statement; a broken connection is dropped so the next call
    /// reconnects, but the statement is not retried here: its outcome is
    /// unknown, and the caller decides.
    fn query(
        &mut self,
        op: &'static str,
        sql: &'static str,
        params: &[&(dyn postgres::types::ToSql + Sync)],
    ) -> Result<Vec<Row>> {
        let conn = self.conn()?;
        let result = match conn.prepared.get(sql) {
            Some(stmt) => conn.client.query(stmt, params),
            None => conn.client.prepare(sql).and_then(|stmt| {
                conn.prepared.insert(sql, stmt.clone());
                conn.client.query(&stmt, params)
            }),
        };
        result.map_err(|e| self.failure(op, e))
    }

    fn failure(&mut self, op: &'static str, e: postgres::Error) -> Error {
        let broken = e.is_closed() || self.conn.as_ref().is_none_or(|c| c.client.is_closed());
        if broken {
            self.conn = None;
            return Error::StoreUnreachable { store: self.shown.clone(), why: e.to_string() };
        }
        let why = match e.as_db_error() {
            Some(db) => format!("{} ({})", db.message(), db.code().code()),
            None => e.to_string(),
        };
        Error::Store { store: self.shown.clone(), op, why }
    }

    fn try_acquire(&mut self, key: &str, holder: &str, ttl: Duration) -> Result<Attempt> {
        let sent_at = SystemTime::now();
        let rows = self.query("grant a lease", ACQUIRE, &[&key, &holder, &micros(ttl)])?;
        if let Some(row) = rows.first() {
            let token = token(row.try_get(0), &self.shown)?;
            return Ok(Attempt::Granted(Lease {
                key: key.to_string(),
                holder: holder.to_string(),
                token,
                expires_at: sent_at + ttl,
            }));
        }
        let rows = self.query("read a lease", HOLDER, &[&key])?;
        let Some(row) = rows.first() else {
            // Refused, then gone: rows are never deleted, so only by hand.
            return Ok(Attempt::Held { holder: "?".into(), token: 0, expires_in: Duration::ZERO });
        };
        let holder: Option<String> = row.try_get(0).map_err(|e| self.decode(e))?;
        let token = token(row.try_get(1), &self.shown)?;
        let left: i64 = row.try_get(2).map_err(|e| self.decode(e))?;
        Ok(Attempt::Held {
            // Released in between: the next attempt will likely win.
            holder: holder.unwrap_or_else(|| "nobody".into()),
            token,
            expires_in: Duration::from_micros(left.max(0) as u64),
        })
    }

    /// The error for a holder that does not hold `key`, saying who does.
    fn not_holder(&mut self, key: &str, holder: &str) -> Result<Error> {
        Ok(not_holder(holder, &self.show(key)?))
    }

    /// Runs `write` in one transaction when `fence` is the highest token
    /// issued for `key`, read with the key's row locked `FOR SHARE`: a grant
    /// on `key` waits until the transaction ends, so none comes between the
    /// check and the write.
    fn under_fence<T>(
        &mut self,
        key: &str,
        fence: u64,
        write: impl FnOnce(&mut postgres::Transaction<'_>) -> Result<T, Failed>,
    ) -> Result<T> {
        check_key(key)?;
        let shown = self.shown.clone();
        let conn = self.conn()?;
        let result = (|| {
            let mut tx = conn.client.transaction().map_err(|e| Failed::Sql("begin a publish", e))?;
            let rows = tx.query(ISSUED, &[&key]).map_err(|e| Failed::Sql("read a lease", e))?;
            let issued = match rows.first() {
                Some(row) => token(row.try_get(0), &shown)?,
                None => 0,
            };
            check_issued(key, fence, issued)?;
            let answer = write(&mut tx)?;
            tx.commit().map_err(|e| Failed::Sql("commit a publish", e))?;
            Ok(answer)
        })();
        result.map_err(|f| match f {
            Failed::Sql(op, e) => self.failure(op, e),
            Failed::Runws(e) => e,
        })
    }

    fn decode(&self, e: postgres::Error) -> Error {
        Error::Store { store: self.shown.clone(), op: "read a row", why: e.to_string() }
    }
}

impl Store for PgStore {
    fn acquire(&mut self, key: &str, holder: &str, ttl: Duration, wait: Duration) -> Result<Lease> {
        check_request(key, holder, ttl)?;
        acquire_with_wait(key, wait, || self.try_acquire(key, holder, ttl))
    }

    fn renew(&mut self, key: &str, holder: &str, ttl: Duration) -> Result<Lease> {
        check_request(key, holder, ttl)?;
        let sent_at = SystemTime::now();
        let rows = self.query("renew a lease", RENEW, &[&key, &holder, &micros(ttl)])?;
        match rows.first() {
            Some(row) => Ok(Lease {
                key: key.to_string(),
                holder: holder.to_string(),
                token: token(row.try_get(0), &self.shown)?,
                expires_at: sent_at + ttl,
            }),
            None => Err(self.not_holder(key, holder)?),
        }
    }

    fn release(&mut self, key: &str, holder: &str) -> Result<()> {
        check_key(key)?;
        check_holder(holder)?;
        let rows = self.query("release a lease", RELEASE, &[&key, &holder])?;
        if rows.is_empty() {
            return Err(self.not_holder(key, holder)?);
        }
        Ok(())
    }

    fn show(&mut self, key: &str) -> Result<LeaseInfo> {
        check_key(key)?;
        let rows = self.query("read a lease", SHOW, &[&key])?;
        let Some(row) = rows.first() else {
            return Ok(LeaseInfo::never_held(key));
        };
        Ok(LeaseInfo {
            key: key.to_string(),
            holder: row.try_get(0).map_err(|e| self.decode(e))?,
            token: token(row.try_get(1), &self.shown)?,
            expires_at: row.try_get(2).map_err(|e| self.decode(e))?,
            expired: row.try_get::<_, Option<bool>>(3).map_err(|e| self.decode(e))?.unwrap_or(false),
        })
    }

    fn publish(&mut self, key: &str, fence: u64, payload: &[u8]) -> Result<PublishOutcome> {
        let shown = self.shown.clone();
        self.under_fence(key, fence, |tx| {
            // Issued, so within the column's range.
            let offered = i64::try_from(fence).unwrap_or(i64::MAX);
            let written =
                tx.query(PUBLISH, &[&key, &offered, &payload]).map_err(|e| Failed::Sql("publish", e))?;
            if !written.is_empty() {
                return Ok(PublishOutcome::Written);
            }
            let rows =
                tx.query(PUBLISHED_SAME, &[&key, &payload]).map_err(|e| Failed::Sql("read the sink", e))?;
            let Some(row) = rows.first() else {
                return Err(Failed::Runws(Error::Store {
                    store: shown.clone(),
                    op: "publish",
                    why: "the row vanished".into(),
                }));
            };
            let highest = token(row.try_get(0), &shown)?;
            let same: bool = row.try_get(1).map_err(|e| Failed::Sql("read a row", e))?;
            if highest == fence && same {
                return Ok(PublishOutcome::Unchanged);
            }
            Err(Failed::Runws(Error::StaleFence {
                key: key.to_string(),
                offered: fence,
                highest,
                same_fence: highest == fence,
            }))
        })
    }

    fn publish_to(&mut self, dir: &Path, key: &str, fence: u64, payload: &[u8]) -> Result<PublishOutcome> {
        self.under_fence(key, fence, |_| Ok(super::publish_to_dir(dir, key, fence, payload)?))
    }

    fn read_published(&mut self, key: &str) -> Result<Option<(u64, Vec<u8>)>> {
        check_key(key)?;
        let rows = self.query("read the sink", READ_PUBLISHED, &[&key])?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let fence = token(row.try_get(0), &self.shown)?;
        let payload: Vec<u8> = row.try_get(1).map_err(|e| self.decode(e))?;
        Ok(Some((fence, payload)))
    }
    fn record_run(&mut self, run: &super::FleetRun) -> Result<()> {
        let record = serde_json::to_string(run).map_err(|e| Error::Other(e.to_string()))?;
        self.query(
            "record a run",
            RECORD_RUN,
            &[&run.host, &run.run_id, &run.job, &run.status, &run.started_at, &record],
        )?;
        Ok(())
    }

    fn fleet_set_archive(&mut self, host: &str, run_id: &str, archive: &str) -> Result<bool> {
        let rows = self.query("name a run's archive", SET_ARCHIVE, &[&host, &run_id, &archive])?;
        Ok(!rows.is_empty())
    }

    fn fleet_heartbeat(&mut self, host: &str, run_id: &str, lease_until: &str) -> Result<()> {
        self.query("renew a run's record", HEARTBEAT, &[&host, &run_id, &lease_until])?;
        Ok(())
    }

    fn fleet_mark_stale(&mut self, host: &str) -> Result<Vec<(String, String)>> {
        let rows = self.query("mark other hosts' expired runs stale", MARK_STALE, &[&host])?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let h: String = row.try_get(0).map_err(|e| self.decode(e))?;
            let r: String = row.try_get(1).map_err(|e| self.decode(e))?;
            out.push((h, r));
        }
        Ok(out)
    }

    fn fleet_runs(&mut self, q: &super::FleetQuery) -> Result<Vec<super::FleetRun>> {
        let since = q.since.map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let limit = q.limit.map(|n| i64::try_from(n).unwrap_or(i64::MAX));
        let rows =
            self.query("list the fleet's runs", FLEET_RUNS, &[&q.job, &q.host, &q.run, &since, &limit])?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let text: String = row.try_get(0).map_err(|e| self.decode(e))?;
            // A record another runws wrote is read as untrusted: one that
            // does not parse is skipped, never half-shown.
            if let Ok(r) = serde_json::from_str::<super::FleetRun>(&text) {
                out.push(r);
            }
        }
        Ok(out)
    }
}

/// Why a step of a transaction failed: a statement (mapped once the
/// connection is free again), or a decision of runws's.
enum Failed {
    Sql(&'static str, postgres::Error),
    Runws(Error),
}

impl From<Error> for Failed {
    fn from(e: Error) -> Failed {
        Failed::Runws(e)
    }
}

fn create_schema(client: &mut Client) -> Result<(), postgres::Error> {
    // Once the tables exist, touch nothing: creating needs a privilege on
    // the schema that a user of existing tables need not have.
    let present: bool = client
        .query_one(
            "SELECT to_regclass('runws_leases_v1') IS NOT NULL AND to_regclass('runws_sink_v1') IS NOT NULL \
             AND to_regclass('runws_runs_v1') IS NOT NULL",
            &[],
        )?
        .try_get(0)?;
    if present {
        return Ok(());
    }
    let mut tx = client.transaction()?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])?;
    tx.batch_execute(SCHEMA)?;
    tx.commit()
}

/// A ttl in microseconds; [`super::MAX_TTL`] keeps it far inside `i64`.
fn micros(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_micros()).unwrap_or(i64::MAX)
}

fn token(value: Result<i64, postgres::Error>, store: &str) -> Result<u64> {
    let v = value.map_err(|e| Error::Store {
        store: store.to_string(),
        op: "read a token",
        why: e.to_string(),
    })?;
    u64::try_from(v).map_err(|_| Error::Store {
        store: store.to_string(),
        op: "read a token",
        why: format!("negative token {v}"),
    })
}
