//! The compressed side of a pack: zstd or gzip over a writer that hashes and
//! counts the archive's bytes on their way to disk, so the archive never has
//! to be read back to learn its checksum.

use std::fs::File;
use std::io::{self, Write};

use sha2::{Digest, Sha256};

/// How the tar stream is compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// zstd: fast, the default.
    Zst,
    /// gzip: for tools that cannot read zstd.
    Gz,
}

impl Format {
    /// The names `--format` takes.
    pub const NAMES: [&str; 2] = ["zst", "gz"];

    /// The format `--format NAME` asks for.
    pub fn named(name: &str) -> Option<Format> {
        match name {
            "zst" => Some(Format::Zst),
            "gz" => Some(Format::Gz),
            _ => None,
        }
    }

    /// The archive's file extension, without the leading dot.
    pub fn extension(self) -> &'static str {
        match self {
            Format::Zst => "tar.zst",
            Format::Gz => "tar.gz",
        }
    }
}

const ZSTD_LEVEL: i32 = 3;
const GZIP_LEVEL: u32 = 6;

/// The compressed archive's bytes on their way to disk, hashed and counted.
pub(super) struct HashingWriter {
    pub file: File,
    pub hasher: Sha256,
    pub bytes: u64,
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

/// zstd's and gzip's encoders hand over their output in blocks of 32 KiB or
/// more (zstd: 128 KiB), so the archive is written as they give it, with no
/// buffer of its own between: one copy of the compressed bytes fewer.
pub(super) type Sink = HashingWriter;

pub(super) enum Compressor {
    Zst(zstd::stream::write::Encoder<'static, Sink>),
    Gz(flate2::write::GzEncoder<Sink>),
}

impl Compressor {
    pub fn new(format: Format, sink: Sink) -> io::Result<Compressor> {
        Ok(match format {
            Format::Zst => {
                let mut enc = zstd::stream::write::Encoder::new(sink, ZSTD_LEVEL)?;
                enc.include_checksum(true)?;
                // zstd's worker threads, one per core, as `zstd -T0` runs them;
                // the calling thread reads, scans and hashes alongside. The
                // output is standard zstd frames that any zstd reads.
                let workers = std::thread::available_parallelism().map_or(1, |n| n.get().clamp(1, 8));
                enc.multithread(workers as u32)?;
                Compressor::Zst(enc)
            }
            Format::Gz => {
                Compressor::Gz(flate2::write::GzEncoder::new(sink, flate2::Compression::new(GZIP_LEVEL)))
            }
        })
    }

    pub fn finish(self) -> io::Result<Sink> {
        match self {
            Compressor::Zst(enc) => enc.finish(),
            Compressor::Gz(enc) => enc.finish(),
        }
    }
}

impl Write for Compressor {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Compressor::Zst(enc) => enc.write(buf),
            Compressor::Gz(enc) => enc.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Compressor::Zst(enc) => enc.flush(),
            Compressor::Gz(enc) => enc.flush(),
        }
    }
}

impl HashingWriter {
    pub fn new(file: File) -> HashingWriter {
        HashingWriter { file, hasher: Sha256::new(), bytes: 0 }
    }
}
