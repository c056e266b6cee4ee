//! Where a pack's compressed bytes go: the archive's file, through a
//! writer that hashes and counts them on their way to disk, so the archive
//! never has to be read back to learn its checksum. Shared by the
//! compressor and zstd's stages.

use std::fs::File;
use std::io::{self, Write};

use sha2::{Digest, Sha256};

/// The compressed archive's bytes on their way to disk, hashed and counted.
pub(super) struct HashingWriter {
    pub file: File,
    pub hasher: Sha256,
    pub bytes: u64,
}

impl HashingWriter {
    pub fn new(file: File) -> HashingWriter {
        HashingWriter { file, hasher: Sha256::new(), bytes: 0 }
    }
}

impl Write for HashingWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
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
