//! The copy of many input files at once: the walk opens each source and
//! creates its copy, and a small pool of threads (one per core, at most
//! [`MAX_WORKERS`]) copies and hashes the files, each thread with one buffer
//! it keeps. No thread is started per file.
//!
//! Each byte is read once, and the hash is always of the bytes that are in
//! `inputs/`:
//! - where the file system shares extents (`FICLONE`: btrfs, XFS), a file
//!   of [`CLONE_MIN`] bytes or more is cloned and the copy is read back and
//!   hashed (the source is not read at all: a source changing under us
//!   cannot make the record differ from the copy);
//! - a large file is copied by [`super::copy_and_hash`]'s three overlapping
//!   stages;
//! - a small file is read into the thread's buffer, hashed and written.
//!
//! Nothing here syncs: the caller makes every copy durable at once.

use std::fs::File;
use std::io::Seek;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use super::InputRecord;
use crate::error::{Error, IoContext, Result};
use crate::osname::OsName;

/// Threads that copy at most, whatever the core count: past this the disk,
/// not the hashing, is what a copy waits for.
const MAX_WORKERS: usize = 8;
/// Files opened and waiting for a thread (two descriptors each).
const QUEUED: usize = 64;
/// The smallest file worth a clone and a read back instead of a copy.
const CLONE_MIN: u64 = 64 * 1024;
/// The smallest file copied by three overlapping stages.
const PIPELINE_MIN: u64 = 8 << 20;
/// Each thread's buffer for small files.
const BUF: usize = 256 * 1024;

/// One file to copy: its source opened, its copy created.
pub(super) struct Job {
    pub from: File,
    pub to: File,
    /// The source's path, for errors.
    pub src: PathBuf,
    /// Its path below `inputs/`.
    pub rel: OsName,
    /// Its size when the walk looked (a hint: the copy goes to the end).
    pub size: u64,
}

#[derive(Default)]
struct Shared {
    /// The first failure of any thread; the rest stop copying.
    failed: Mutex<Option<Error>>,
    stopped: AtomicBool,
    /// Set once a clone failed: this copy does not try again.
    no_clone: AtomicBool,
}

pub(super) struct Pool {
    tx: Option<SyncSender<Job>>,
    rx: Arc<Mutex<Receiver<Job>>>,
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<Vec<InputRecord>>>,
    max: usize,
}

impl Pool {
    pub fn new() -> Pool {
        let (tx, rx) = sync_channel(QUEUED);
        let max = std::thread::available_parallelism().map_or(2, |n| n.get()).clamp(1, MAX_WORKERS);
        Pool { tx: Some(tx), rx: Arc::new(Mutex::new(rx)), shared: Arc::default(), workers: Vec::new(), max }
    }

    /// Hands `job` to a thread (starting one while fewer than the cores
    /// run). Once a thread has failed this refuses: [`Pool::finish`] says
    /// why.
    pub fn submit(&mut self, job: Job) -> Result<()> {
        if self.shared.stopped.load(Ordering::Relaxed) {
            return Err(Error::Usage("an input could not be copied".into()));
        }
        if self.workers.len() < self.max {
            let (rx, shared) = (Arc::clone(&self.rx), Arc::clone(&self.shared));
            let worker = std::thread::Builder::new()
                .name("runws-input".into())
                .spawn(move || work(&rx, &shared))
                .map_err(|e| Error::io("cannot start a thread to copy", &job.src, e))?;
            self.workers.push(worker);
        }
        let tx = self.tx.as_ref().expect("submit after finish");
        tx.send(job).map_err(|_| Error::Usage("an input could not be copied".into()))
    }

    /// Waits for every queued copy; the records, or the first failure.
    /// `walked` is how the walk that submitted ended: a thread's failure
    /// came first (the walk stopped because of it), so it wins.
    pub fn finish(mut self, walked: Result<()>) -> Result<Vec<InputRecord>> {
        drop(self.tx.take());
        let mut records = Vec::new();
        for w in self.workers.drain(..) {
            records.extend(w.join().unwrap_or_else(|e| std::panic::resume_unwind(e)));
        }
        let failed = self.shared.failed.lock().unwrap_or_else(|e| e.into_inner()).take();
        match failed {
            Some(e) => Err(e),
            None => walked.map(|()| records),
        }
    }
}

fn work(rx: &Mutex<Receiver<Job>>, shared: &Shared) -> Vec<InputRecord> {
    let mut buf = vec![0u8; BUF];
    let mut out = Vec::new();
    loop {
        let job = match rx.lock().unwrap_or_else(|e| e.into_inner()).recv() {
            Ok(job) => job,
            Err(_) => return out,
        };
        if shared.stopped.load(Ordering::Relaxed) {
            continue;
        }
        match copy_one(job, &mut buf, shared) {
            Ok(rec) => out.push(rec),
            Err(e) => {
                let mut failed = shared.failed.lock().unwrap_or_else(|e| e.into_inner());
                failed.get_or_insert(e);
                shared.stopped.store(true, Ordering::Relaxed);
            }
        }
    }
}

fn copy_one(job: Job, buf: &mut [u8], shared: &Shared) -> Result<InputRecord> {
    let Job { mut from, mut to, src, rel, size } = job;
    let copied = if size >= CLONE_MIN && !shared.no_clone.load(Ordering::Relaxed) && clone(&from, &to, shared)
    {
        // The copy shares the source's extents as they were at the clone:
        // its bytes are what is recorded.
        to.rewind().and_then(|()| hash_into(&mut to, buf))
    } else if size >= PIPELINE_MIN {
        super::copy_and_hash(&mut from, &mut to)
    } else {
        copy_serial(&mut from, &mut to, buf)
    };
    let (bytes, sha256) = copied.ctx("cannot copy input", &src)?;
    Ok(InputRecord { path: rel, kind: "file".into(), bytes, sha256, from_run: None, from_output: None })
}

/// Clones `from` into the empty `to`; false (and no more tries in this
/// copy) where the file systems cannot. A failed clone leaves `to` empty.
fn clone(from: &File, to: &File, shared: &Shared) -> bool {
    match rustix::fs::ioctl_ficlone(to, from) {
        Ok(()) => true,
        Err(_) => {
            shared.no_clone.store(true, Ordering::Relaxed);
            false
        }
    }
}

/// Reads `from` to its end into `buf`, hashing each piece and writing it
/// to `to`; returns (bytes, sha256 hex).
fn copy_serial(from: &mut File, to: &mut File, buf: &mut [u8]) -> std::io::Result<(u64, String)> {
    super::digest(from, Some(to), buf)
}

/// Hashes `from` to its end through `buf`; returns (bytes, sha256 hex).
fn hash_into(from: &mut File, buf: &mut [u8]) -> std::io::Result<(u64, String)> {
    super::digest(from, None, buf)
}
