//! The compressed side of a pack: zstd or gzip over a writer that hashes and
//! counts the archive's bytes on their way to disk, so the archive never has
//! to be read back to learn its checksum.

use std::io::{self, Write};

use super::sink::Sink;
use super::stages::Stages;

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

pub(super) enum Compressor {
    Zst(Stages),
    /// The encoder, and the buffer a file's content is read into.
    Gz(flate2::write::GzEncoder<Sink>, Vec<u8>),
}

impl Compressor {
    pub fn new(format: Format, sink: Sink) -> io::Result<Compressor> {
        Ok(match format {
            Format::Zst => {
                // One compressor thread per core, as `zstd -T0` runs them; the
                // calling thread reads and scans, and a writer thread hashes
                // and writes, alongside (see [`Stages`]).
                let workers = std::thread::available_parallelism().map_or(1, |n| n.get().clamp(1, 8));
                Compressor::Zst(Stages::start(sink, ZSTD_LEVEL, workers)?)
            }
            Format::Gz => {
                let enc = flate2::write::GzEncoder::new(sink, flate2::Compression::new(GZIP_LEVEL));
                Compressor::Gz(enc, Vec::new())
            }
        })
    }

    /// Room for up to `want` (at least 1) bytes of a file's content to be
    /// read into; [`Compressor::commit`] then compresses the bytes read.
    pub fn room(&mut self, want: usize) -> io::Result<&mut [u8]> {
        match self {
            Compressor::Zst(stages) => stages.room(want),
            Compressor::Gz(_, buf) => {
                if buf.len() < want {
                    buf.resize(want, 0);
                }
                Ok(&mut buf[..want])
            }
        }
    }

    /// Compresses the first `n` bytes of the last [`Compressor::room`].
    pub fn commit(&mut self, n: usize) -> io::Result<()> {
        match self {
            Compressor::Zst(stages) => stages.commit(n),
            Compressor::Gz(enc, buf) => enc.write_all(&buf[..n]),
        }
    }

    pub fn finish(self) -> io::Result<Sink> {
        match self {
            Compressor::Zst(stages) => stages.finish(),
            Compressor::Gz(enc, _) => enc.finish(),
        }
    }
}

impl Write for Compressor {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Compressor::Zst(stages) => stages.write(buf),
            Compressor::Gz(enc, _) => enc.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Compressor::Zst(stages) => stages.flush(),
            Compressor::Gz(enc, _) => enc.flush(),
        }
    }
}
