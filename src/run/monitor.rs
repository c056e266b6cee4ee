//! The run as a monitor sees it: `--ping` (see [`crate::ping`]) and
//! `--metrics-dir` (see [`crate::metrics`]), at two named points.
//!
//! [`started`] is called once the command runs: its ping goes out on a
//! thread of its own, so the command never waits for it. [`ended`] is
//! called once the end is recorded: the metrics file is written, the start
//! ping is waited for (it is bounded), the end ping is sent, and how each
//! ping went is recorded under `pings`. Neither changes the run's exit code:
//! a failure is a warning on stderr and a record in the manifest.

use std::io::{Read, Seek, SeekFrom};
use std::time::{Duration, SystemTime};

use super::request::Request;
use crate::manifest::{self, Owner, PingRecord};
use crate::metrics;
use crate::ping::{self, Event, Outcome, Pending, Ping};
use crate::workspace::RunDir;

/// The body of the end ping: at most this much of the captured output.
const BODY_MAX: u64 = 10 * 1024;

/// What went out when the command started: the start ping and the fleet
/// record, on their way.
pub(super) struct StartPing {
    ping: Option<Pending>,
    fleet: Option<crate::fleet::Started>,
}

fn ping(req: &Request, run_id: &str, event: Event, body: Vec<u8>) -> Option<Ping> {
    // The URL was checked with the request.
    let target = ping::parse(req.ping.as_deref()?).ok()?;
    Some(Ping { target, event, rid: ping::rid(run_id), body, timeout: req.ping_timeout })
}

/// The command runs: sends the start ping and, with a PostgreSQL store,
/// the run's start to the fleet view, without waiting for either.
pub(super) fn started(req: &Request, run: &RunDir, record: &Owner) -> Option<StartPing> {
    let ping = ping(req, &run.id, Event::Start, Vec::new()).map(Ping::spawn);
    let fleet = fleet_store(req).map(|url| {
        let (root, entry) = (run.root.clone(), crate::fleet::run_of(record.record(), run.root.path()));
        crate::fleet::start(root, url, entry, req.lease_ttl)
    });
    (ping.is_some() || fleet.is_some()).then_some(StartPing { ping, fleet })
}

/// The store of the fleet view, when the run's is PostgreSQL.
fn fleet_store(req: &Request) -> Option<String> {
    req.store.clone().filter(|u| crate::fleet::keeps_fleet(Some(u)))
}

/// The run's end is recorded (`code` is its exit code): writes the metrics,
/// sends the end ping and records both pings.
pub(super) fn ended(run: &RunDir, req: &Request, record: &mut Owner, start: Option<StartPing>, code: u8) {
    let id = run.id.as_str();
    let (start_ping, start_fleet) = match start {
        Some(StartPing { ping, fleet }) => (ping, fleet),
        None => (None, None),
    };
    // The end after the start: both are upserts, and an end is never
    // replaced by a start, but the start's thread is done first all the same.
    if let Some(url) = fleet_store(req) {
        let entry = crate::fleet::run_of(record.record(), run.root.path());
        crate::fleet::finish(&run.root, &url, entry, start_fleet);
    }
    if let Some(dir) = &req.metrics_dir {
        let m = record.record();
        let begun = manifest::parse_time(&m.started_at);
        let finished =
            m.finished_at.as_deref().and_then(manifest::parse_time).unwrap_or_else(SystemTime::now);
        let sample = metrics::Sample {
            job: &m.job,
            finished,
            duration: begun.and_then(|b| finished.duration_since(b).ok()).unwrap_or(Duration::ZERO),
            exit_code: code,
            input_bytes: m.inputs.iter().map(|i| i.bytes).fold(0, u64::saturating_add),
            output_bytes: m.outputs.iter().map(|o| o.bytes).fold(0, u64::saturating_add),
        };
        if let Err(e) = metrics::write(dir, &sample) {
            eprintln!("runws: warning: cannot write the metrics of run `{id}`: {e}");
        }
    }
    let event = if code == 0 { Event::Success } else { Event::Fail(code) };
    let body = if req.capture { captured_tail(run) } else { Vec::new() };
    let Some(end) = ping(req, id, event, body) else { return };
    let mut pings = Vec::new();
    if let Some(pending) = start_ping {
        // Sent first, so the server sees the start before the end.
        pings.push((Event::Start, pending.wait()));
    }
    pings.push((event, end.spawn().wait()));
    let records: Vec<PingRecord> = pings.iter().map(|(event, o)| as_record(*event, o)).collect();
    for (event, o) in &pings {
        if let Some(why) = &o.error {
            eprintln!(
                "runws: warning: the `{}` ping of run `{id}` failed after {} attempt(s): {why}",
                event.as_str(),
                o.attempts
            );
        }
    }
    let r = record.update(&run.dir, true, |m| {
        m.pings = Some(records);
        Ok(())
    });
    if let Err(e) = r {
        eprintln!("runws: warning: cannot record the pings of run `{id}`: {e}");
    }
}

fn as_record(event: Event, o: &Outcome) -> PingRecord {
    PingRecord {
        at: manifest::format_time(SystemTime::now()),
        attempts: o.attempts,
        error: o.error.clone(),
        event: event.as_str().into(),
        ok: o.ok(),
        status: o.status,
        extra: Default::default(),
    }
}

/// The last [`BODY_MAX`] bytes of `logs/stdout.log` followed by
/// `logs/stderr.log`: what `--capture` kept, the end of it.
fn captured_tail(run: &RunDir) -> Vec<u8> {
    let Ok(logs) = run.sub("logs") else { return Vec::new() };
    let mut body = Vec::new();
    for name in ["stdout.log", "stderr.log"] {
        // Written by runws, but in the command's directory: never followed
        // through a symlink, never more than the tail read.
        let Ok(Some(mut f)) = logs.open_read(name) else { continue };
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        if f.seek(SeekFrom::Start(len.saturating_sub(BODY_MAX))).is_ok() {
            let _ = f.take(BODY_MAX).read_to_end(&mut body);
        }
    }
    let cut = body.len().saturating_sub(BODY_MAX as usize);
    body.drain(..cut);
    body
}
