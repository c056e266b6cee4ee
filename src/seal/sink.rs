//! Where a pack's compressed bytes go: the archive's file, through a
//! writer that hashes and counts them on their way to disk, so the archive
//! never has to be read back to learn its checksum. Shared by the
//! compressor and zstd's stages.

use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsFd;

use sha2::{Digest, Sha256};

/// How many bytes are written before their writeback is started, so that
/// the disk writes while the rest is compressed and the archive's `fsync`
/// at the end waits for little more than the last of them (on an ext4 disk
/// that `fsync` took 80-100 ms of a 0.6 s seal of 236 MB, then 4-5 ms;
/// the seal's time 0.89 of before, see BENCHMARKS.md).
const WRITEBACK_STEP: u64 = 8 << 20;

/// The compressed archive's bytes on their way to disk, hashed and counted.
pub(super) struct HashingWriter {
    pub file: File,
    pub hasher: Sha256,
    pub bytes: u64,
    /// Bytes whose writeback was started.
    started: u64,
}

impl HashingWriter {
    pub fn new(file: File) -> HashingWriter {
        HashingWriter { file, hasher: Sha256::new(), bytes: 0, started: 0 }
    }
}

impl Write for HashingWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        if self.bytes - self.started >= WRITEBACK_STEP {
            // Only a head start: the archive is made durable by its fsync,
            // which also reports any error of these writes.
            let _ = crate::sys::writeback::start(self.file.as_fd(), self.started, self.bytes - self.started);
            self.started = self.bytes;
        }
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

/// gzip's encoder hands over its output in blocks of 32 KiB or more, and
/// zstd's stages a whole frame at a time, so the archive is written as they
/// give it, with no buffer of its own between: one copy of the compressed
/// bytes fewer.
pub(super) type Sink = HashingWriter;
