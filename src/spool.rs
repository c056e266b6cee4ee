//! A private copy of bytes read once, to hand on only after they were
//! checked.
//!
//! A file another process can write may change between a check of its bytes
//! and a second read of them; reading it once into a copy that process
//! cannot reach, checking that copy, and handing on the copy closes the gap.
//! Up to [`IN_MEMORY`] bytes the copy is held in memory; past that it moves
//! to an unlinked temp file (`O_TMPFILE` where the file system has it), which
//! has no name anyone could open.

use std::fs::File;
use std::io::{self, Read, Seek, Write};

/// Bytes held in memory before the copy moves to a temp file.
pub const IN_MEMORY: usize = 16 << 20;

/// A write-once, read-once copy.
#[derive(Debug)]
pub struct Spool {
    memory: Vec<u8>,
    file: Option<File>,
    /// Bytes held in memory before the copy moves to a temp file.
    in_memory: usize,
}

impl Default for Spool {
    fn default() -> Spool {
        Spool::within(IN_MEMORY)
    }
}

impl Spool {
    /// A copy that holds at most `in_memory` bytes in memory: for a
    /// process serving many copies at once.
    pub fn within(in_memory: usize) -> Spool {
        Spool { memory: Vec::new(), file: None, in_memory }
    }

    /// Writes the whole copy to `out`.
    pub fn copy_to(self, out: &mut impl Write) -> io::Result<u64> {
        match self.file {
            None => {
                out.write_all(&self.memory)?;
                Ok(self.memory.len() as u64)
            }
            Some(mut f) => {
                f.rewind()?;
                io::copy(&mut f, out)
            }
        }
    }
}

/// Reads `src` to its end, once, into a new copy that holds at most
/// `in_memory` bytes in memory; returns the copy with the length and
/// sha256 (hex) of exactly the bytes it holds.
pub fn read_hashed_within(src: &mut impl Read, in_memory: usize) -> io::Result<(Spool, u64, String)> {
    let mut spool = Spool::within(in_memory);
    let (bytes, sha256) = crate::fingerprint::hash_reader(&mut Tee { src, copy: &mut spool })?;
    Ok((spool, bytes, sha256))
}

/// Writes what it reads to the copy.
struct Tee<'a, R> {
    src: &'a mut R,
    copy: &'a mut Spool,
}

impl<R: Read> Read for Tee<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.src.read(buf)?;
        self.copy.write_all(&buf[..n])?;
        Ok(n)
    }
}

impl Write for Spool {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.file.is_none() && self.memory.len() + buf.len() > self.in_memory {
            let mut f = tempfile::tempfile()?;
            f.write_all(&self.memory)?;
            self.memory = Vec::new();
            self.file = Some(f);
        }
        match &mut self.file {
            Some(f) => f.write(buf),
            None => {
                self.memory.extend_from_slice(buf);
                Ok(buf.len())
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match &mut self.file {
            Some(f) => f.flush(),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_copies_stay_in_memory_and_large_ones_move_to_a_file_intact() {
        for len in [0, 10, IN_MEMORY, IN_MEMORY + 1, IN_MEMORY * 2 + 7] {
            let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let mut spool = Spool::default();
            for piece in data.chunks(1 << 20) {
                spool.write_all(piece).unwrap();
            }
            assert_eq!(spool.file.is_some(), len > IN_MEMORY);
            let mut out = Vec::new();
            assert_eq!(spool.copy_to(&mut out).unwrap(), len as u64);
            assert!(out == data, "copy of {len} bytes differs");
        }
    }

    #[test]
    fn read_hashed_returns_the_hash_of_what_it_holds() {
        let (spool, bytes, sha) = read_hashed_within(&mut &b"abc"[..], IN_MEMORY).unwrap();
        assert_eq!(bytes, 3);
        assert_eq!(sha, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        let mut out = Vec::new();
        spool.copy_to(&mut out).unwrap();
        assert_eq!(out, b"abc");
    }
}
