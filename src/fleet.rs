//! The fleet view: with a PostgreSQL store (`--store` or `RUNWS_STORE`),
//! every run's start and end are recorded in the store's `runws_runs_v1`
//! table (host, run id, job, status, times, exit code, input fingerprint,
//! outputs with their sha256), so `runws ls --fleet` and `runws show` answer
//! for a run on any host that shares the store.
//!
//! The start is sent on a thread of its own once the command runs, so it
//! never delays the command. The end is sent before runws exits, with a
//! short connection timeout; when the store cannot be reached the record
//! waits in `ROOT/fleet-queue/` (runws's own, outside the run directory,
//! which the command may write), and the next `runws run`, `ls --fleet`,
//! `show` or `reap` under that ROOT with a PostgreSQL store sends it. A
//! record is keyed by host and run id, and an ended one is never replaced by
//! a running one: sending twice, or late, changes nothing.

use std::path::Path;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::manifest::Manifest;
use crate::store::{self, FleetOutput, FleetRun};
use crate::workspace::Root;

/// Whether `url` names a store that keeps a fleet view.
pub fn keeps_fleet(url: Option<&str>) -> bool {
    url.is_some_and(|u| u.starts_with("postgres://") || u.starts_with("postgresql://"))
}

/// The fleet's record of the run in `m` under `root`.
pub fn run_of(m: &Manifest, root: &Path) -> FleetRun {
    FleetRun {
        run_id: m.run_id.clone(),
        host: m.host.clone(),
        root: root.display().to_string(),
        job: m.job.clone(),
        status: m.status.as_str().to_string(),
        started_at: m.started_at.clone(),
        finished_at: m.finished_at.clone(),
        exit_code: m.exit_code,
        input_fingerprint: m.input_fingerprint.clone(),
        outputs: m
            .outputs
            .iter()
            .map(|o| FleetOutput {
                name: o.name.as_os_str().to_string_lossy().into_owned(),
                bytes: o.bytes,
                sha256: o.sha256.clone(),
            })
            .collect(),
        // Where its evidence went: the seal's archive (a receipt or a
        // quarantine), once there is one.
        archive: m.checkpoint.as_ref().and_then(|c| c.archive.as_ref()).map(|a| a.display().to_string()),
        lease_until: (m.status == crate::manifest::Status::Running).then(|| m.lease_until.clone()),
    }
}

/// A run's start on its way to the fleet view, and its heartbeat after.
pub struct Started {
    handle: std::thread::JoinHandle<std::result::Result<Conn, String>>,
    stop: std::sync::mpsc::Sender<()>,
}

/// Sends the run's start on a thread of its own, then, while the run
/// lasts, renews its record's lease every third of `ttl` over the same
/// connection, so another host's reaper can tell a live run from one
/// whose host went away. A failed heartbeat is tried again at the next.
pub fn start(root: Root, url: String, run: FleetRun, ttl: Duration) -> Started {
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let handle = std::thread::spawn(move || {
        // A start the store could not take waits in the queue; the
        // heartbeat then reconnects and sends the start itself (an upsert,
        // so the queued copy changes nothing), so a run that outlives an
        // outage is not left to look stale.
        let mut conn = record(&root, &url, &run, None);
        let every = (ttl / 3).max(Duration::from_millis(10));
        while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(every) {
            let until = crate::manifest::format_time(std::time::SystemTime::now() + ttl);
            match conn.as_mut() {
                Ok(c) => {
                    let _ = c.fleet_heartbeat(&run.host, &run.run_id, &until);
                }
                Err(_) => {
                    let again = FleetRun { lease_until: Some(until), ..run.clone() };
                    if let Ok(mut s) = store::open_fleet(&url)
                        && s.record_run(&again).is_ok()
                    {
                        conn = Ok(s);
                    }
                }
            }
        }
        conn
    });
    Started { handle, stop }
}

/// `reap` with a PostgreSQL store: the running runs of other hosts whose
/// heartbeat stopped are marked `stale` in the fleet view. Nothing else of
/// theirs is touched: their own host's reaper decides what they are.
pub fn mark_stale(url: &str) -> Result<Vec<(String, String)>> {
    let mut s = store::open_fleet(url)?;
    s.fleet_mark_stale(&crate::procinfo::hostname())
}

/// After a seal: the run's record names `archive`, when `url` keeps a
/// fleet view. Only that field is written, from the seal's own result: the
/// rest of the record stays as runws sent it at the run's end, whatever
/// the manifest says now. When the view holds no record of the run yet
/// (its end still waits in the queue), the record is made from the
/// manifest the seal has just checked and updated, and sent or queued.
pub fn note_archive(url: Option<&str>, run: &crate::workspace::RunDir, archive: &Path) {
    let Some(url) = url.filter(|u| keeps_fleet(Some(u))) else { return };
    let host = crate::procinfo::hostname();
    let set = store::open_fleet(url)
        .and_then(|mut s| s.fleet_set_archive(&host, &run.id, &archive.display().to_string()));
    if let Ok(true) = set {
        return;
    }
    let Ok(m) = crate::manifest::read(&run.dir) else { return };
    let _ = record(&run.root, url, &run_of(&m, run.root.path()), None);
}

/// A connection to the fleet's store, kept from a run's start to its end.
pub type Conn = Box<dyn store::Store>;

/// Sends `run` to the store at `url` (over `conn` when one is open), then
/// whatever waits in ROOT's queue; queues `run` when the store cannot take
/// it. Never fails the run: a record that can be neither sent nor queued is
/// a warning. Returns the connection, for the run's end, or why the store
/// could not take the record.
pub fn record(
    root: &Root,
    url: &str,
    run: &FleetRun,
    conn: Option<Conn>,
) -> std::result::Result<Conn, String> {
    let sent = match conn {
        // A connection broken since reconnects once, inside the store.
        Some(mut s) => s.record_run(run).map(|()| s),
        None => store::open_fleet(url).and_then(|mut s| s.record_run(run).map(|()| s)),
    };
    match sent {
        Ok(mut s) => {
            let _ = flush_into(root, s.as_mut());
            Ok(s)
        }
        Err(e) => {
            if let Err(q) = enqueue(root, run) {
                eprintln!(
                    "runws: warning: run `{}` is not in the fleet view: {e}; and it cannot be queued: {q}",
                    run.run_id
                );
            } else if run.status != "running" {
                eprintln!(
                    "runws: warning: the store cannot take run `{}` now ({e}); its record waits in `{}` for the next runws",
                    run.run_id,
                    root.fleet_queue_path().display()
                );
            }
            Err(e.to_string())
        }
    }
}

/// The most a run's end waits for the fleet's store, whatever it does (a
/// server that takes the connection and never answers included): then the
/// record waits in the queue and runws goes on.
pub const END_DEADLINE: Duration = Duration::from_secs(5);

/// The run's end in the fleet view: after the start's thread, over its
/// connection when it has one (one round trip), else a new one, else the
/// queue; never longer than [`END_DEADLINE`]. A record sent late by the
/// thread after the deadline, as well as queued, changes nothing: an end
/// is written the same way twice.
pub fn finish(root: &Root, url: &str, run: FleetRun, start: Option<Started>) {
    let start = start.map(|s| {
        drop(s.stop);
        s.handle
    });
    let (tx, rx) = std::sync::mpsc::channel();
    let (root2, url2, run2) = (root.clone(), url.to_string(), run.clone());
    std::thread::spawn(move || {
        match start.map(|t| t.join().unwrap_or_else(|_| Err("the start's thread failed".into()))) {
            // The store could not take the start: the end waits in the
            // queue at once, rather than hold runws up a second time.
            Some(Err(why)) => queue(&root2, &run2, &why),
            Some(Ok(conn)) => drop(record(&root2, &url2, &run2, Some(conn))),
            None => drop(record(&root2, &url2, &run2, None)),
        }
        let _ = tx.send(());
    });
    if rx.recv_timeout(END_DEADLINE).is_err() {
        match enqueue(root, &run) {
            Ok(()) => eprintln!(
                "runws: warning: the store did not answer within {}s at the end of run `{}`; its record waits in `{}` for the next runws",
                END_DEADLINE.as_secs(),
                run.run_id,
                root.fleet_queue_path().display()
            ),
            Err(q) => eprintln!("runws: warning: run `{}` is not in the fleet view: {q}", run.run_id),
        }
    }
}

/// Puts `run` in ROOT's queue without trying the store (it could not take
/// the run's start, for `why`), and says so.
pub fn queue(root: &Root, run: &FleetRun, why: &str) {
    match enqueue(root, run) {
        Ok(()) => eprintln!(
            "runws: warning: the store cannot take run `{}` ({why}); its record waits in `{}` for the next runws",
            run.run_id,
            root.fleet_queue_path().display()
        ),
        Err(q) => {
            eprintln!(
                "runws: warning: run `{}` is not in the fleet view: it cannot be queued: {q}",
                run.run_id
            )
        }
    }
}

fn enqueue(root: &Root, run: &FleetRun) -> Result<()> {
    let d = root
        .fleet_queue(true)?
        .ok_or_else(|| Error::Other(format!("`{}` vanished", root.fleet_queue_path().display())))?;
    let bytes = serde_json::to_vec(run).map_err(|e| Error::Other(e.to_string()))?;
    let name = format!("{}.json", run.run_id);
    // An end waiting replaces a start waiting (one file per run), never the
    // reverse: a start that gives up after its end was queued leaves it.
    if run.status == "running" && d.lstat(&name)?.is_some() {
        return Ok(());
    }
    d.write_atomic(&name, &bytes, 0o600, true)
}

/// Sends what waits in ROOT's queue to the store at `url`; how many. Gives
/// up after [`END_DEADLINE`] (what is not sent stays queued).
pub fn flush(root: &Root, url: &str) -> Result<usize> {
    if !root.fleet_queue_path().is_dir() {
        return Ok(0);
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let (root, url) = (root.clone(), url.to_string());
    std::thread::spawn(move || {
        let _ = tx.send(store::open_fleet(&url).and_then(|mut s| flush_into(&root, s.as_mut())));
    });
    rx.recv_timeout(END_DEADLINE).unwrap_or_else(|_| {
        Err(Error::Other(format!("the store did not answer within {}s", END_DEADLINE.as_secs())))
    })
}

/// The most a queued record may hold: a run's record with thousands of
/// outputs is far below it. A larger file in the queue is not runws's and
/// is never read (a plain run's command could leave a file of any size).
const QUEUED_MAX: u64 = 16 << 20;

/// The record waiting in the queue as `name` (`<run id>.json`), when it is
/// one: a regular file (never through a symlink, never a fifo), at most
/// [`QUEUED_MAX`] bytes, that parses as the record of the run it is named
/// after, with times the store can take and no NUL (which PostgreSQL's
/// text refuses) in any text. `None` for anything else, which stays where
/// it is and never holds the records after it back.
fn queued(d: &crate::fsx::Dir, name: &std::ffi::OsStr) -> Option<FleetRun> {
    use std::io::Read;
    let id = name.to_str()?.strip_suffix(".json")?;
    crate::workspace::check_run_id(id).ok()?;
    let f = d.open_read(name).ok()??;
    if f.metadata().ok()?.len() > QUEUED_MAX {
        return None;
    }
    let mut bytes = Vec::new();
    f.take(QUEUED_MAX + 1).read_to_end(&mut bytes).ok()?;
    if bytes.len() as u64 > QUEUED_MAX {
        return None;
    }
    let run = serde_json::from_slice::<FleetRun>(&bytes).ok()?;
    let time_ok = |t: &str| crate::manifest::parse_time(t).is_some();
    let texts =
        [&run.run_id, &run.host, &run.root, &run.job, &run.status, &run.started_at, &run.input_fingerprint];
    let ok = run.run_id == id
        && time_ok(&run.started_at)
        && run.finished_at.as_deref().is_none_or(time_ok)
        && !texts.iter().any(|t| t.contains('\0'))
        && !run.finished_at.as_deref().is_some_and(|t| t.contains('\0'))
        && !run.archive.as_deref().is_some_and(|t| t.contains('\0'))
        && !run.outputs.iter().any(|o| o.name.contains('\0') || o.sha256.contains('\0'));
    ok.then_some(run)
}

fn flush_into(root: &Root, s: &mut dyn store::Store) -> Result<usize> {
    let Ok(Some(d)) = root.fleet_queue(false) else { return Ok(0) };
    let mut sent = 0;
    for (name, _) in d.entries_raw()? {
        // A plain run's command can write here (it runs as the same user):
        // a file is sent only when it is a record of the run it is named
        // after, with a valid id.
        let Some(run) = queued(&d, &name) else { continue };
        s.record_run(&run)?;
        let _ = d.unlink(&name);
        sent += 1;
    }
    Ok(sent)
}

/// `ls --fleet` and `show` of another host's run: flushes ROOT's queue
/// first, so this host's own records are there.
pub fn list(root: Option<&Root>, url: &str, q: &store::FleetQuery) -> Result<Vec<FleetRun>> {
    let mut s = store::open(url)?;
    if let Some(root) = root {
        let _ = flush_into(root, s.as_mut());
    }
    s.fleet_runs(q)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(status: &str) -> FleetRun {
        FleetRun {
            run_id: "r1".into(),
            host: "h".into(),
            root: "/r".into(),
            job: "j".into(),
            status: status.into(),
            started_at: "2026-12-01T00:00:00.000Z".into(),
            finished_at: None,
            exit_code: None,
            input_fingerprint: "sha256:00".into(),
            outputs: Vec::new(),
            archive: None,
            lease_until: None,
        }
    }

    /// A start queued after its end (a start that gave up late) leaves the
    /// end; an end replaces a start.
    #[test]
    fn a_queued_end_is_never_replaced_by_a_start() {
        let t = tempfile::tempdir().unwrap();
        let root = crate::workspace::resolve_root(Some(t.path())).unwrap();
        let file = root.fleet_queue_path().join("r1.json");
        let read = || serde_json::from_slice::<FleetRun>(&std::fs::read(&file).unwrap()).unwrap().status;
        enqueue(&root, &run("running")).unwrap();
        assert_eq!(read(), "running");
        enqueue(&root, &run("succeeded")).unwrap();
        assert_eq!(read(), "succeeded");
        enqueue(&root, &run("running")).unwrap();
        assert_eq!(read(), "succeeded");
    }
}
