//! zstd compression of the tar stream decoupled from the read and the
//! write, and spread over every core: the stream is cut into blocks of
//! 1 MiB, each compressed as a zstd frame of its own (with its checksum) by
//! one of a few compressor threads, and the frames are hashed and written in
//! the stream's order by a writer thread. Concatenated frames are one
//! standard zstd stream: `zstd -d`, `tar --zstd` and `runws restore` read it
//! whole. Small blocks compress faster than large ones (a block and zstd's
//! tables stay in the core's cache: level 3 took about 0.45 s of CPU for a
//! 317 MB tar stream in 1 MiB blocks, 0.65-0.7 s in 8 MiB blocks), and
//! cost half a part in a thousand of compression ratio, since each frame
//! starts without the previous block as its window.
//!
//! 1. The calling thread walks the run, reads each file's bytes straight
//!    into the current block and shows them there to the inspector (the
//!    secret scanner); a full block goes to the compressors' queue.
//! 2. Each compressor thread takes the next block and compresses it.
//! 3. The writer thread puts the frames back in order, hashes them and
//!    writes them to the archive.
//!
//! No stage waits for another's share of a core while there is a block to
//! work on. Memory stays bounded whatever the run's size: a fixed number of
//! blocks exist, and a block goes back to the calling thread only once its
//! frame is written. A stage that fails ends its thread; the stages next to
//! it then find their queues closed and the first real error reaches the
//! caller. A pack abandoned half way (dropped without `finish`) stops the
//! threads; the caller removes the temp file, as before.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, SyncSender, channel, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use super::sink::Sink;

/// Bytes of the tar stream in one block, and so in one zstd frame.
const BLOCK: usize = 1 << 20;

/// A block of the tar stream, numbered in stream order.
struct Block {
    seq: u64,
    data: Vec<u8>,
    len: usize,
}

/// A block compressed: its frame, and the block's buffer to hand back.
struct Frame {
    seq: u64,
    frame: Vec<u8>,
    block: Vec<u8>,
}

/// The calling thread's side of the stages.
pub(super) struct Stages {
    /// The block being filled: always `BLOCK` bytes long, `filled` of them
    /// the stream's.
    current: Vec<u8>,
    filled: usize,
    seq: u64,
    /// Blocks made so far; at most `blocks_max` ever exist.
    blocks: usize,
    blocks_max: usize,
    to_compress: Option<SyncSender<Block>>,
    returned: Receiver<Vec<u8>>,
    abandoned: Arc<AtomicBool>,
    compressors: Vec<JoinHandle<io::Result<()>>>,
    writer: Option<JoinHandle<io::Result<(Sink, u64)>>>,
}

/// The error of a stage that stopped because the stage next to it did.
fn stopped() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "compression stopped")
}

impl Stages {
    /// Starts `workers` compressor threads (zstd at `level`, each frame with
    /// its checksum) and the writer.
    pub fn start(sink: Sink, level: i32, workers: usize) -> io::Result<Stages> {
        let workers = workers.max(1);
        let (to_compress, blocks_rx) = sync_channel::<Block>(workers);
        let blocks_rx = Arc::new(Mutex::new(blocks_rx));
        let (to_write, frames_rx) = channel::<Frame>();
        let (back, returned) = channel::<Vec<u8>>();
        let (frames_back, spare_frames) = channel::<Vec<u8>>();
        let spare_frames = Arc::new(Mutex::new(spare_frames));
        let abandoned = Arc::new(AtomicBool::new(false));
        let mut stages = Stages {
            current: Vec::new(),
            filled: 0,
            seq: 0,
            blocks: 0,
            // One being filled, one queued and one being compressed per
            // worker, one being written.
            blocks_max: 2 * workers + 2,
            to_compress: Some(to_compress),
            returned,
            abandoned: abandoned.clone(),
            compressors: Vec::new(),
            writer: None,
        };
        let stop = abandoned.clone();
        stages.writer = Some(
            std::thread::Builder::new()
                .name("seal-write".into())
                .spawn(move || write_stage(sink, frames_rx, back, frames_back, &stop))?,
        );
        for _ in 0..workers {
            let mut zstd = zstd::bulk::Compressor::new(level)?;
            zstd.include_checksum(true)?;
            let (rx, tx, spare, stop) =
                (blocks_rx.clone(), to_write.clone(), spare_frames.clone(), abandoned.clone());
            stages.compressors.push(
                std::thread::Builder::new()
                    .name("seal-zstd".into())
                    .spawn(move || compress_stage(zstd, &rx, &tx, &spare, &stop))?,
            );
        }
        stages.current = stages.spare()?;
        Ok(stages)
    }

    /// Sends what is left, waits for every frame to be written, and returns
    /// the sink (hash, count, file).
    pub fn finish(mut self) -> io::Result<Sink> {
        if self.filled > 0 {
            self.send_current()?;
        }
        self.to_compress = None;
        let mut first = None;
        for handle in std::mem::take(&mut self.compressors) {
            if let Err(e) = join(Some(handle)) {
                first.get_or_insert(e);
            }
        }
        let written = join(self.writer.take());
        match (first, written) {
            (None, Ok((sink, frames))) if frames == self.seq => Ok(sink),
            (None, Ok(_)) => Err(stopped()),
            (Some(e), Err(w)) if e.kind() == io::ErrorKind::BrokenPipe => Err(w),
            (Some(e), _) | (None, Err(e)) => Err(e),
        }
    }

    /// An empty block to fill: a new one while fewer than `blocks_max`
    /// exist, else the next one whose frame has been written.
    fn spare(&mut self) -> io::Result<Vec<u8>> {
        if let Ok(block) = self.returned.try_recv() {
            return Ok(block);
        }
        if self.blocks < self.blocks_max {
            self.blocks += 1;
            return Ok(vec![0; BLOCK]);
        }
        match self.returned.recv() {
            Ok(block) => Ok(block),
            Err(_) => Err(self.failure()),
        }
    }

    fn send_current(&mut self) -> io::Result<()> {
        let next = self.spare()?;
        let data = std::mem::replace(&mut self.current, next);
        let block = Block { seq: self.seq, data, len: std::mem::take(&mut self.filled) };
        self.seq += 1;
        let sent = self.to_compress.as_ref().is_some_and(|tx| tx.send(block).is_ok());
        if sent { Ok(()) } else { Err(self.failure()) }
    }

    /// Room for up to `want` bytes of the stream, at the end of the current
    /// block, for a file's content to be read straight into (no copy);
    /// [`Stages::commit`] then adds the bytes read.
    pub fn room(&mut self, want: usize) -> io::Result<&mut [u8]> {
        if self.filled == BLOCK {
            self.send_current()?;
        }
        let end = self.filled + want.min(BLOCK - self.filled);
        Ok(&mut self.current[self.filled..end])
    }

    /// Adds `n` bytes just read into [`Stages::room`] to the stream.
    pub fn commit(&mut self, n: usize) -> io::Result<()> {
        self.filled += n;
        debug_assert!(self.filled <= BLOCK);
        if self.filled == BLOCK {
            self.send_current()?;
        }
        Ok(())
    }

    /// The error that stopped the stages, once a queue was found closed.
    fn failure(&mut self) -> io::Error {
        self.to_compress = None;
        self.abandoned.store(true, Ordering::Relaxed);
        let mut first = None;
        for handle in std::mem::take(&mut self.compressors) {
            if let Err(e) = join(Some(handle)) {
                first.get_or_insert(e);
            }
        }
        match (join(self.writer.take()), first) {
            (Err(w), _) if w.kind() != io::ErrorKind::BrokenPipe => w,
            (_, Some(e)) => e,
            _ => stopped(),
        }
    }
}

impl Write for Stages {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = buf.len().min(BLOCK - self.filled);
        self.current[self.filled..self.filled + n].copy_from_slice(&buf[..n]);
        self.filled += n;
        if self.filled == BLOCK {
            self.send_current()?;
        }
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Abandoned without `finish`: the threads stop without finishing the frame,
/// and are waited for so that nothing writes to the file afterwards.
impl Drop for Stages {
    fn drop(&mut self) {
        self.abandoned.store(true, Ordering::Relaxed);
        self.to_compress = None;
        for handle in std::mem::take(&mut self.compressors) {
            let _ = join(Some(handle));
        }
        let _ = join(self.writer.take());
    }
}

fn join<T>(handle: Option<JoinHandle<io::Result<T>>>) -> io::Result<T> {
    match handle.map(JoinHandle::join) {
        Some(Ok(result)) => result,
        Some(Err(_)) => Err(io::Error::other("a compression thread panicked")),
        None => Err(stopped()),
    }
}

fn compress_stage(
    mut zstd: zstd::bulk::Compressor<'static>,
    blocks: &Mutex<Receiver<Block>>,
    to_write: &Sender<Frame>,
    spare: &Mutex<Receiver<Vec<u8>>>,
    stop: &AtomicBool,
) -> io::Result<()> {
    loop {
        // The lock is held only to take the next block, never to compress.
        let next = blocks.lock().map_err(|_| stopped())?.recv();
        let Ok(Block { seq, data, len }) = next else { return Ok(()) };
        if stop.load(Ordering::Relaxed) {
            return Err(stopped());
        }
        let reused = spare.lock().map_err(|_| stopped())?.try_recv();
        let mut frame = reused.unwrap_or_default();
        frame.clear();
        frame.reserve(zstd::zstd_safe::compress_bound(len));
        zstd.compress_to_buffer(&data[..len], &mut frame)?;
        to_write.send(Frame { seq, frame, block: data }).map_err(|_| stopped())?;
    }
}

/// Writes the frames in stream order; returns the sink and how many frames
/// it wrote.
fn write_stage(
    mut sink: Sink,
    frames: Receiver<Frame>,
    back: Sender<Vec<u8>>,
    frames_back: Sender<Vec<u8>>,
    stop: &AtomicBool,
) -> io::Result<(Sink, u64)> {
    let mut next = 0u64;
    let mut waiting = BTreeMap::new();
    for frame in frames {
        waiting.insert(frame.seq, frame);
        while let Some(Frame { frame, block, .. }) = waiting.remove(&next) {
            if stop.load(Ordering::Relaxed) {
                return Err(stopped());
            }
            sink.write_all(&frame)?;
            next += 1;
            // The calling thread may be gone already; the buffers are then dropped.
            let _ = back.send(block);
            let _ = frames_back.send(frame);
        }
    }
    // Every compressor is done: a frame still waiting means one was lost.
    if waiting.is_empty() { Ok((sink, next)) } else { Err(stopped()) }
}
