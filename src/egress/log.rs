//! The connection log: one entry per distinct destination (host, port,
//! allowed or not), counted as connections come and bytes flow, and written
//! as it goes to the run's `net.json`, so that a killed runws leaves what
//! it saw. Bounded: past [`MAX_DESTINATIONS`] destinations, connections are
//! only counted; a destination reached takes the place of one refused or
//! failed, so that asking for a thousand refused names first does not keep
//! where the command's bytes went out of the record.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, SystemTime};

use crate::fsx::Dir;
use crate::manifest::net::{Connection, MAX_DESTINATIONS, NetRecord};

/// The file in the run directory's top level (runws's alone inside a
/// sandbox) the log is written to while the run goes on.
pub const FILE: &str = "net.json";

/// How often the log is written while something changed.
const EVERY: Duration = Duration::from_millis(200);

/// The bytes one destination moved, shared by its connections' pumps.
#[derive(Debug, Default)]
pub struct Bytes {
    pub out: AtomicU64,
    pub inn: AtomicU64,
}

/// One destination's entry.
struct Entry {
    host: String,
    port: u16,
    allowed: bool,
    count: u64,
    first: String,
    last: String,
    why: Option<String>,
    /// Connected to at least once.
    reached: bool,
    bytes: Arc<Bytes>,
}

#[derive(Default)]
struct Table {
    entries: Vec<Entry>,
    index: HashMap<(String, u16, bool), usize>,
    more: u64,
}

/// The log of one run's proxy.
pub struct Log {
    template: NetRecord,
    table: Mutex<Table>,
    changed: AtomicBool,
    stop: (Mutex<bool>, Condvar),
    /// The run directory, where [`FILE`] is written; `None` writes nothing.
    dir: Option<Dir>,
}

impl Log {
    /// A log with the record's policy and proxy (`template`'s connections
    /// are ignored), written into `dir`.
    pub fn new(template: NetRecord, dir: Option<Dir>) -> Arc<Log> {
        Arc::new(Log {
            template,
            table: Mutex::new(Table::default()),
            changed: AtomicBool::new(true),
            stop: (Mutex::new(false), Condvar::new()),
            dir,
        })
    }

    /// Counts one connection to `host:port`; `why` says why it was refused
    /// or failed. Returns the counters its bytes go to (`None` past the
    /// bound: counted in `more` only).
    pub fn note(&self, host: &str, port: u16, allowed: bool, why: Option<String>) -> Option<Arc<Bytes>> {
        let now = crate::manifest::format_time(SystemTime::now());
        let mut t = self.table.lock().unwrap_or_else(|p| p.into_inner());
        self.changed.store(true, Ordering::Relaxed);
        let key = (host.to_string(), port, allowed);
        if let Some(&i) = t.index.get(&key) {
            let e = &mut t.entries[i];
            e.count += 1;
            e.last = now;
            e.reached |= allowed && why.is_none();
            if why.is_some() {
                e.why = why;
            }
            return Some(e.bytes.clone());
        }
        let reached = allowed && why.is_none();
        if t.entries.len() >= MAX_DESTINATIONS {
            // The latest entry never reached gives its place to one reached.
            match t.entries.iter().rposition(|e| !e.reached).filter(|_| reached) {
                Some(i) => {
                    let gone = t.entries.remove(i);
                    t.more += gone.count;
                    t.index.remove(&(gone.host, gone.port, gone.allowed));
                    for v in t.index.values_mut() {
                        if *v > i {
                            *v -= 1;
                        }
                    }
                }
                None => {
                    t.more += 1;
                    return None;
                }
            }
        }
        let bytes = Arc::new(Bytes::default());
        let i = t.entries.len();
        t.entries.push(Entry {
            host: host.to_string(),
            port,
            allowed,
            count: 1,
            first: now.clone(),
            last: now,
            why,
            reached,
            bytes: bytes.clone(),
        });
        t.index.insert(key, i);
        Some(bytes)
    }

    /// Marks the log changed (bytes moved).
    pub fn touch(&self) {
        self.changed.store(true, Ordering::Relaxed);
    }

    /// The record as it stands.
    pub fn snapshot(&self, complete: bool) -> NetRecord {
        let t = self.table.lock().unwrap_or_else(|p| p.into_inner());
        let connections = t
            .entries
            .iter()
            .map(|e| Connection {
                host: e.host.clone(),
                port: e.port,
                allowed: e.allowed,
                count: e.count,
                bytes_out: e.bytes.out.load(Ordering::Relaxed),
                bytes_in: e.bytes.inn.load(Ordering::Relaxed),
                first: e.first.clone(),
                last: e.last.clone(),
                why: e.why.clone(),
            })
            .collect();
        NetRecord { connections, more: t.more, complete, ..self.template.clone() }
    }

    /// Writes the log when something changed since the last write (not
    /// synced: it covers a killed runws, not a lost machine; the final
    /// record is durable in the manifest).
    fn write(&self, complete: bool) {
        let Some(dir) = &self.dir else { return };
        if !self.changed.swap(false, Ordering::Relaxed) && !complete {
            return;
        }
        if let Ok(bytes) = serde_json::to_vec_pretty(&self.snapshot(complete)) {
            let _ = dir.write_atomic_unsynced(FILE, &bytes, 0o644);
        }
    }

    /// Writes the log every [`EVERY`] while it changes, until [`Log::finish`].
    pub fn keep_written(self: &Arc<Log>) -> std::thread::JoinHandle<()> {
        let log = self.clone();
        std::thread::spawn(move || {
            let (lock, cv) = &log.stop;
            let mut stopped = lock.lock().unwrap_or_else(|p| p.into_inner());
            while !*stopped {
                drop(stopped);
                log.write(false);
                stopped = lock.lock().unwrap_or_else(|p| p.into_inner());
                if *stopped {
                    break;
                }
                stopped = cv.wait_timeout(stopped, EVERY).unwrap_or_else(|p| p.into_inner()).0;
            }
        })
    }

    /// Stops the writer, writes the complete log and returns it.
    pub fn finish(&self, writer: Option<std::thread::JoinHandle<()>>) -> NetRecord {
        {
            let (lock, cv) = &self.stop;
            *lock.lock().unwrap_or_else(|p| p.into_inner()) = true;
            cv.notify_all();
        }
        if let Some(w) = writer {
            let _ = w.join();
        }
        self.write(true);
        self.snapshot(true)
    }
}

/// The record to show for a run: the manifest's, or, when that one is not
/// complete (runws was killed before the run's end was recorded, or the
/// run goes on), the log runws last wrote in the run directory `dir`, when
/// it reads as a record of the same policy. The file is read bounded and
/// checked as any record read back.
pub fn latest(dir: &Dir, rec: &NetRecord) -> NetRecord {
    use std::io::Read;
    if rec.complete {
        return rec.clone();
    }
    let Ok(Some(f)) = dir.open_read(FILE) else { return rec.clone() };
    let mut bytes = Vec::new();
    if f.take(4 << 20).read_to_end(&mut bytes).is_err() {
        return rec.clone();
    }
    match serde_json::from_slice::<NetRecord>(&bytes) {
        Ok(logged) if logged.policy == rec.policy && logged.proxy == rec.proxy => {
            NetRecord { complete: false, ..logged }
        }
        _ => rec.clone(),
    }
}

/// `show`'s lines for the record: the policy, then each destination.
pub fn render(rec: &NetRecord) -> Vec<String> {
    let t = crate::shown::text;
    let policy: Vec<String> = rec.policy.iter().map(|p| t(p)).collect();
    let mut out = vec![format!("net:       allow {} (proxy {})", policy.join(","), t(&rec.proxy))];
    if !rec.resolve.is_empty() {
        let pins: Vec<String> = rec.resolve.iter().map(|p| t(p)).collect();
        out.push(format!("resolve:   {}", pins.join(", ")));
    }
    for c in &rec.connections {
        let verdict = if c.allowed { "allowed" } else { "denied " };
        let mut line = format!(
            "  {verdict} {}:{} {}x, {} B out, {} B in, {} .. {}",
            t(&c.host),
            c.port,
            c.count,
            c.bytes_out,
            c.bytes_in,
            t(&c.first),
            t(&c.last)
        );
        if let Some(why) = &c.why {
            line.push_str(&format!(" ({})", t(why)));
        }
        out.push(line);
    }
    if rec.more > 0 {
        out.push(format!("  and {} connections to further destinations, not itemised", rec.more));
    }
    if rec.connections.is_empty() && rec.more == 0 {
        out.push("  no connection was asked for".into());
    }
    if !rec.complete {
        out.push("  (as last written while the run went on: the run's end was not recorded with it)".into());
    }
    out
}

/// `audit --net`'s report: each destination the command reached, and the
/// `--net allow=` list that would let exactly those through.
pub fn audit_report(rec: &NetRecord, run: &str) -> String {
    let t = crate::shown::text;
    let mut reached: Vec<String> = Vec::new();
    let mut lines = Vec::new();
    for c in &rec.connections {
        let ok = c.why.is_none();
        lines.push(format!(
            "  {} {}:{} ({}x, {} B out, {} B in){}",
            if ok { "reached" } else { "failed " },
            t(&c.host),
            c.port,
            c.count,
            c.bytes_out,
            c.bytes_in,
            c.why.as_deref().map(|w| format!(": {}", t(w))).unwrap_or_default()
        ));
        let pattern = if super::policy::DEFAULT_PORTS.contains(&c.port) {
            c.host.clone()
        } else {
            format!("{}:{}", c.host, c.port)
        };
        // Only what reads back as a pattern is suggested.
        if ok && super::policy::pattern(&pattern).is_ok() && !reached.contains(&pattern) {
            reached.push(pattern);
        }
    }
    let mut out =
        format!("runws: audit of run `{}`: {} network destination(s)\n", t(run), rec.connections.len());
    for l in lines {
        out.push_str(&l);
        out.push('\n');
    }
    if rec.more > 0 {
        out.push_str(&format!("  and {} connections to further destinations, not itemised\n", rec.more));
    }
    if !reached.is_empty() {
        out.push_str(&format!("  to allow these: --net allow={}\n", t(&reached.join(","))));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template() -> NetRecord {
        NetRecord {
            policy: vec!["a.test".into()],
            resolve: Vec::new(),
            proxy: "http://127.0.0.1:1".into(),
            connections: Vec::new(),
            more: 0,
            complete: false,
        }
    }

    #[test]
    fn destinations_are_counted_once_each_and_bounded() {
        let log = Log::new(template(), None);
        let b = log.note("a.test", 443, true, None).unwrap();
        b.out.fetch_add(10, Ordering::Relaxed);
        log.note("a.test", 443, true, None).unwrap().inn.fetch_add(7, Ordering::Relaxed);
        log.note("a.test", 443, false, Some("no".into()));
        let r = log.snapshot(false);
        assert_eq!(r.connections.len(), 2);
        assert_eq!(
            (r.connections[0].count, r.connections[0].bytes_out, r.connections[0].bytes_in),
            (2, 10, 7)
        );
        assert_eq!(r.connections[1].why.as_deref(), Some("no"));
        for i in 0..(MAX_DESTINATIONS + 5) {
            log.note(&format!("h{i}.test"), 80, false, None);
        }
        let r = log.snapshot(true);
        assert_eq!(r.connections.len(), MAX_DESTINATIONS);
        assert_eq!(r.more, 7);
        assert!(r.complete);
        // A destination reached takes the place of the latest refused one;
        // once only reached ones are left, the next is counted only.
        let late = log.note("late.test", 443, true, None).unwrap();
        late.inn.fetch_add(5, Ordering::Relaxed);
        let r = log.snapshot(true);
        assert_eq!(r.connections.len(), MAX_DESTINATIONS);
        assert_eq!(r.more, 8);
        let last = r.connections.last().unwrap();
        assert_eq!((last.host.as_str(), last.bytes_in), ("late.test", 5));
        assert!(!r.connections.iter().any(|c| c.host == format!("h{}.test", MAX_DESTINATIONS - 3)));
        assert_eq!(log.note("late.test", 443, true, None).unwrap().inn.load(Ordering::Relaxed), 5);
        assert!(log.note("h0.test", 80, false, None).is_some());
        let full = Log::new(template(), None);
        for i in 0..MAX_DESTINATIONS {
            full.note(&format!("r{i}.test"), 443, true, None);
        }
        assert!(full.note("one-more.test", 443, true, None).is_none());
        assert_eq!(full.snapshot(true).more, 1);
    }

    #[test]
    fn the_log_is_written_as_it_goes_and_complete_at_the_end() {
        let tmp = tempfile::tempdir().unwrap();
        let log = Log::new(template(), Some(Dir::open(tmp.path()).unwrap()));
        let w = log.keep_written();
        log.note("a.test", 443, true, None);
        let path = tmp.path().join(FILE);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            if let Ok(text) = std::fs::read_to_string(&path)
                && let Ok(r) = serde_json::from_str::<NetRecord>(&text)
                && r.connections.len() == 1
            {
                assert!(!r.complete);
                break;
            }
            assert!(std::time::Instant::now() < deadline, "never written");
            std::thread::sleep(Duration::from_millis(20));
        }
        let r = log.finish(Some(w));
        let on_disk: NetRecord = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(on_disk, r);
        assert!(r.complete);
    }
}
