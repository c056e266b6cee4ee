//! The archive read once: a second thread reads the archive file, hashes
//! every byte it reads and decompresses them, and hands the decompressed
//! stream to the entry loop in fixed-size chunks.
//!
//! A restore used to read the archive twice, once to check its sha256 and
//! again (hashing once more) to extract it. Now the checksum is checked in
//! the same pass as the extraction: the compressed bytes are hashed as they
//! stream into the decompressor, and the digest is compared once the whole
//! file (including any bytes after the compressed stream) has been read,
//! before anything is placed at the target. This is as safe as checking
//! first because nothing the extraction does is visible or trusted before
//! that comparison: it writes only into the private staging directory,
//! within the byte and entry budgets whatever the archive says, and a
//! mismatch removes the staging directory like any other failure. One open
//! file serves both, so no other file can be swapped in between.
//!
//! The two threads split the work as `tar --zstd -x` splits it between tar
//! and zstd: this one reads, hashes and decompresses; the entry loop parses,
//! scans and writes. At most [`DEPTH`] chunks wait between them, so memory
//! stays bounded, and when the entry loop stops early (a refusal, a budget)
//! the reader stops decompressing at its next chunk.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};

use sha2::{Digest, Sha256};

use super::Compression;
use crate::hex::encode as hex;

/// Decompressed bytes handed over at a time. Every chunk but the last is
/// exactly this long, whatever the decompressor returns per read. Large, so
/// the threads hand over (and may sleep and wake) a few hundred times for a
/// 400 MB archive rather than thousands: on a busy machine each wake waits
/// for a turn on a core.
const CHUNK: usize = 1 << 20;
/// Chunks that may wait between the two threads.
const DEPTH: usize = 4;
/// Compressed bytes read from the file at a time.
const READ: usize = 1 << 20;

/// Runs `consume` on the decompressed stream of `file` (read from its
/// start) while another thread reads, hashes and decompresses it. Returns
/// what `consume` returned and the sha256 of every byte of the file, which
/// is read to its end even when `consume` stopped early or the stream was
/// corrupt, so a caller can tell a damaged archive from a refused one.
pub(super) fn decompressed<T>(
    file: &File,
    format: Compression,
    consume: impl FnOnce(&mut Stream) -> T,
) -> (T, io::Result<String>) {
    let (tx, rx) = sync_channel::<io::Result<Vec<u8>>>(DEPTH);
    let (back_tx, back_rx) = sync_channel::<Vec<u8>>(DEPTH + 2);
    std::thread::scope(|scope| {
        let reader = scope.spawn(move || produce(file, format, &tx, &back_rx));
        let mut stream = Stream { rx, back: back_tx, chunk: Vec::new(), at: 0, failed: None };
        let out = consume(&mut stream);
        // Dropping the receiving end stops the reader at its next chunk.
        drop(stream);
        let digest = match reader.join() {
            Ok(digest) => digest,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        (out, digest)
    })
}

/// The reading thread: decompresses `file` into chunks sent on `tx` until
/// the end of the stream, an error or the receiver is gone; then reads the
/// rest of the file into the hash and returns the digest.
fn produce(
    file: &File,
    format: Compression,
    tx: &SyncSender<io::Result<Vec<u8>>>,
    back: &Receiver<Vec<u8>>,
) -> io::Result<String> {
    let mut hasher = Sha256::new();
    {
        let buffered = BufReader::with_capacity(READ, Hashing { file, hasher: &mut hasher });
        let decoder: io::Result<Box<dyn Read + '_>> = match format {
            Compression::Zstd => {
                zstd::stream::read::Decoder::with_buffer(buffered).map(|d| Box::new(d) as Box<dyn Read>)
            }
            Compression::Gzip => Ok(Box::new(flate2::read::MultiGzDecoder::new(buffered))),
        };
        match decoder {
            Err(e) => {
                let _ = tx.send(Err(e));
            }
            Ok(mut decoder) => loop {
                let mut buf = back.try_recv().unwrap_or_default();
                buf.resize(CHUNK, 0);
                match fill(&mut decoder, &mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        buf.truncate(n);
                        if tx.send(Ok(buf)).is_err() {
                            break;
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        break;
                    }
                }
            },
        }
    }
    // Bytes after the end of the compressed stream, or after the point where
    // it went wrong, count too.
    io::copy(&mut Hashing { file, hasher: &mut hasher }, &mut io::sink())?;
    Ok(hex(&hasher.finalize()))
}

/// Reads until `buf` is full or the stream ends.
fn fill(from: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match from.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// The decompressed stream as the entry loop reads it.
pub(super) struct Stream {
    rx: Receiver<io::Result<Vec<u8>>>,
    back: SyncSender<Vec<u8>>,
    chunk: Vec<u8>,
    at: usize,
    /// The error the stream ended with, repeated to every later read so it
    /// never looks like an end.
    failed: Option<(io::ErrorKind, String)>,
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some((kind, why)) = &self.failed {
            return Err(io::Error::new(*kind, why.clone()));
        }
        if buf.is_empty() {
            return Ok(0);
        }
        while self.at == self.chunk.len() {
            match self.rx.recv() {
                Ok(Ok(next)) => {
                    let used = std::mem::replace(&mut self.chunk, next);
                    self.at = 0;
                    match self.back.try_send(used) {
                        Ok(()) | Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {}
                    }
                }
                Ok(Err(e)) => {
                    self.failed = Some((e.kind(), e.to_string()));
                    return Err(e);
                }
                // The reader is done: the end of the stream.
                Err(_) => return Ok(0),
            }
        }
        let n = buf.len().min(self.chunk.len() - self.at);
        buf[..n].copy_from_slice(&self.chunk[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

/// Reads the archive file and hashes every byte read.
struct Hashing<'a> {
    file: &'a File,
    hasher: &'a mut Sha256,
}

impl Read for Hashing<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = (&mut &*self.file).read(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}
