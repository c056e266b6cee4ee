//! What a long operation is doing, on stderr when stderr is a terminal:
//! one line (`runws: packing `runs/ID`: 1200 files, 350 MiB`), redrawn at
//! most ten times a second and cleared when the operation ends. When stderr
//! is not a terminal (a cron log, a pipe, CI) nothing at all is written.

use std::io::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How often the line is redrawn at most.
const EVERY: Duration = Duration::from_millis(100);

/// One operation's progress line.
pub struct Progress {
    what: String,
    /// What `done` counts: `files`, `runs`.
    unit: &'static str,
    total: Option<u64>,
    done: AtomicU64,
    bytes: AtomicU64,
    /// When the line was last drawn; `None` while nothing is drawn. The
    /// whole state is `None` when stderr is not a terminal.
    drawn: Option<Mutex<Option<Instant>>>,
}

impl Progress {
    /// Progress of `what`, counted in `unit`, out of `total` when known.
    pub fn start(what: String, unit: &'static str, total: Option<u64>) -> Progress {
        let terminal = rustix::termios::isatty(std::io::stderr());
        Progress {
            what,
            unit,
            total,
            done: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            drawn: terminal.then(|| Mutex::new(None)),
        }
    }

    /// Counts `items` more done, and `bytes` more; redraws when due.
    pub fn add(&self, items: u64, bytes: u64) {
        let Some(drawn) = &self.drawn else { return };
        self.done.fetch_add(items, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        let Ok(mut last) = drawn.try_lock() else { return };
        let now = Instant::now();
        if last.is_some_and(|at| now.duration_since(at) < EVERY) {
            return;
        }
        *last = Some(now);
        let _ = write!(std::io::stderr(), "\r\x1b[K{}", self.line());
    }

    fn line(&self) -> String {
        let done = self.done.load(Ordering::Relaxed);
        let count = match self.total {
            Some(total) => format!("{done}/{total} {}", self.unit),
            None => format!("{done} {}", self.unit),
        };
        let bytes = self.bytes.load(Ordering::Relaxed);
        if bytes == 0 {
            format!("runws: {}: {count}", self.what)
        } else {
            format!("runws: {}: {count}, {} MiB", self.what, bytes >> 20)
        }
    }
}

impl Drop for Progress {
    /// The line goes: what follows on stderr starts on a clean line.
    fn drop(&mut self) {
        if let Some(drawn) = &self.drawn
            && drawn.lock().is_ok_and(|last| last.is_some())
        {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
        }
    }
}
