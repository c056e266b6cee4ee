//! Starting the writeback of a file's dirty pages early, so that the
//! `fsync` that makes the file durable waits only for what was written
//! last (`sync_file_range`, which no safe interface covers).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use nix::libc;

/// Asks the kernel to start writing `len` bytes of `fd` from `offset` to
/// its device, without waiting for that to finish and without any promise
/// of durability (only `fsync` gives that). Errors of the writes show up
/// again at that `fsync`.
pub fn start(fd: BorrowedFd<'_>, offset: u64, len: u64) -> io::Result<()> {
    let (Ok(offset), Ok(len)) = (libc::off64_t::try_from(offset), libc::off64_t::try_from(len)) else {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    };
    // SAFETY: plain integers and a descriptor borrowed for the call; the kernel writes no memory of this process.
    let ret = unsafe { libc::sync_file_range(fd.as_raw_fd(), offset, len, libc::SYNC_FILE_RANGE_WRITE) };
    if ret == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsFd;

    #[test]
    fn starts_the_writeback_of_a_file_and_refuses_what_has_none() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&[7u8; 1 << 16]).unwrap();
        start(f.as_fd(), 0, 1 << 16).unwrap();
        // A pipe has no pages to write back: the kernel says so.
        let (r, _w) = nix::unistd::pipe().unwrap();
        assert!(start(r.as_fd(), 0, 1).is_err());
        assert!(start(f.as_fd(), u64::MAX, 1).is_err());
    }
}
