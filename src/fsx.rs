//! Small, careful file-system helpers used everywhere runws touches disk.
//!
//! Everything inside a run directory is reached through a [`Dir`]: an open
//! directory descriptor, with every further step taken relative to it and
//! with `O_NOFOLLOW`, so a symlink the child planted (even one replacing
//! `outputs/` itself) is refused instead of followed out of the run. Files are
//! written to a fresh temp name in the same directory, synced, and renamed
//! over the target, so a reader sees the old bytes or the new ones, never a
//! mix; `rename` replaces a planted symlink rather than writing through it.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg, OFlag, openat, renameat};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat, fstatat, mkdirat};
use nix::unistd::{UnlinkatFlags, symlinkat, unlinkat};

use crate::error::{Error, IoContext, Result};

pub mod walk;

/// Longest name accepted for outputs and other single path components.
pub const MAX_NAME_BYTES: usize = 200;

/// The whole of a kernel file (procfs, cgroupfs), read in pieces of 4 KiB
/// and more. Such files report a size of 0, so `fs::read` asks for the size
/// and then reads 32 bytes, 32, 64 and so on: for `/proc/self/mountinfo`
/// eight reads and a `statx` where this makes two reads.
pub fn read_kernel_bytes(path: impl AsRef<Path>) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut f = File::open(path)?;
    let mut buf = vec![0u8; 4096];
    let mut len = 0;
    loop {
        if len == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
        match f.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(len);
    Ok(buf)
}

/// [`read_kernel_bytes`] as text; an error when it is not UTF-8 (for a
/// file whose lines may hold names anyone chose, such as the paths of
/// `/proc/net/unix`, read the bytes).
pub fn read_kernel_text(path: impl AsRef<Path>) -> io::Result<String> {
    String::from_utf8(read_kernel_bytes(path)?).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Creates `path` and each missing parent with mode 0700: what runws
/// creates (ROOT, its `runs/`, `store/`, `archive/`, lanes) is private to
/// its user. A directory that exists keeps its mode.
pub fn create_private_dirs(path: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(path)
}

/// Opens the file at `path` for writing, created empty when missing and
/// never truncated: a file that is there to be locked.
pub fn open_lock_file(path: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(path)
}

/// Checks that `name` is one plain path component: not empty, not `.` or
/// `..`, no `/`, no NUL, at most [`MAX_NAME_BYTES`] bytes.
pub fn check_name(name: impl AsRef<OsStr>) -> Result<()> {
    let name = name.as_ref().as_bytes();
    let why = if name.is_empty() {
        Some("a name cannot be empty")
    } else if name == b"." || name == b".." {
        Some("`.` and `..` are not names")
    } else if name.contains(&b'/') {
        Some("a name is one path component and cannot contain `/`")
    } else if name.contains(&0) {
        Some("a name cannot contain NUL")
    } else if name.len() > MAX_NAME_BYTES {
        Some("a name is at most 200 bytes")
    } else {
        None
    };
    match why {
        Some(why) => Err(Error::InvalidName { name: crate::shown::bytes(name), why }),
        None => Ok(()),
    }
}

/// An open directory; every operation is relative to it and never follows a
/// symlink in the last component.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

/// An exclusive `flock` on a directory, released on drop.
pub struct DirLock {
    _lock: Flock<OwnedFd>,
}

/// A file already in place whose bytes and directory entry still have to
/// reach the disk.
pub struct PendingSync {
    file: File,
    dir: Dir,
    path: PathBuf,
}

impl PendingSync {
    /// Syncs the file, then its directory.
    pub fn sync(self) -> Result<()> {
        self.file.sync_all().ctx("cannot sync", &self.path)?;
        self.dir.sync()
    }
}

/// The temp file of one atomic write, made ahead of time by
/// [`Dir::reserve`]. Removed when dropped unused.
pub struct Reserved<'a> {
    dir: &'a Dir,
    name: String,
    tmp: String,
    file: Option<File>,
    placed: bool,
}

impl Reserved<'_> {
    /// Makes the temp file's directory entry durable now (one flush), so
    /// that the write that fills it later needs one flush of its own: that
    /// file sync makes its bytes and its inode durable, and the entry
    /// naming it already is.
    pub fn sync_entry(&self) -> Result<()> {
        match &self.file {
            Some(_) => self.dir.sync(),
            None => Ok(()),
        }
    }
    /// Fills the temp file, syncs it and renames it over the name it was
    /// reserved for; with `durable` the directory is synced too (without,
    /// the bytes are durable under the temp name once this returns, and the
    /// rename reaches the disk later). On any error the temp file is
    /// removed and the old file is left as it was.
    pub fn replace_with<T>(
        mut self,
        durable: bool,
        fill: impl FnOnce(&mut File) -> io::Result<T>,
    ) -> Result<T> {
        let path = self.dir.join(&self.name);
        let mut file = self.take_file()?;
        let value = fill(&mut file)
            .and_then(|v| file.sync_all().map(|()| v))
            .map_err(|e| Error::io("cannot write", &path, e))?;
        drop(file);
        self.place(&path, durable)?;
        Ok(value)
    }

    /// The temp file, to be written once.
    fn take_file(&mut self) -> Result<File> {
        self.file.take().ok_or_else(|| Error::Other("a reserved file is written once".into()))
    }

    /// Renames the written temp file over `path`, its name; with `durable`
    /// the directory is synced too.
    fn place(&mut self, path: &Path, durable: bool) -> Result<()> {
        renameat(self.dir.fd.as_fd(), self.tmp.as_str(), self.dir.fd.as_fd(), self.name.as_str())
            .ctx("cannot replace", path)?;
        self.placed = true;
        if durable {
            self.dir.sync()?;
        }
        Ok(())
    }
}

impl Reserved<'_> {
    /// Allocates disk space for the first `len` bytes of the temp file now,
    /// without changing its size (it stays empty to every reader), so that
    /// a later write of at most that many bytes needs no free space. A file
    /// system that cannot allocate ahead (`EOPNOTSUPP`) reserves nothing.
    pub fn allocate(&self, len: u64) -> Result<()> {
        match &self.file {
            Some(f) => allocate_ahead(f, len).ctx("cannot reserve space beside", self.dir.join(&self.name)),
            None => Ok(()),
        }
    }

    /// [`Reserved::replace_with`] for bytes known in advance, written over
    /// the space [`Reserved::allocate`] reserved: when the disk is full and
    /// `bytes` are larger than that space, `fit` is asked for a version of
    /// at most the reserved length, which is written instead.
    pub fn replace_fitting(
        mut self,
        durable: bool,
        bytes: &[u8],
        fit: impl FnOnce(u64) -> Option<Vec<u8>>,
    ) -> Result<()> {
        let path = self.dir.join(&self.name);
        let file = self.take_file()?;
        let reserved = fstat(file.as_fd()).map_or(0, |st| st.st_blocks.max(0) as u64 * 512);
        let written = match write_over(&file, bytes) {
            Err(e) if e.raw_os_error() == Some(nix::libc::ENOSPC) && bytes.len() as u64 > reserved => {
                match fit(reserved) {
                    Some(smaller) if smaller.len() as u64 <= reserved => write_over(&file, &smaller),
                    _ => Err(e),
                }
            }
            other => other,
        };
        written.and_then(|()| file.sync_all()).map_err(|e| Error::io("cannot write", &path, e))?;
        drop(file);
        self.place(&path, durable)
    }
}

/// Writes `bytes` from the start of `file` and cuts it there (which also
/// gives back whatever was allocated beyond them).
fn write_over(file: &File, bytes: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    file.write_all_at(bytes, 0)?;
    file.set_len(bytes.len() as u64)
}

/// `fallocate` of the first `len` bytes of `file`, keeping its size; a file
/// system that cannot do it is not an error.
fn allocate_ahead(file: &File, len: u64) -> io::Result<()> {
    let len = i64::try_from(len).map_err(|_| io::Error::from_raw_os_error(nix::libc::EFBIG))?;
    match nix::fcntl::fallocate(file.as_fd(), nix::fcntl::FallocateFlags::FALLOC_FL_KEEP_SIZE, 0, len) {
        Ok(()) | Err(Errno::EOPNOTSUPP) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        if !self.placed {
            let _ = unlinkat(self.dir.fd.as_fd(), self.tmp.as_str(), UnlinkatFlags::NoRemoveDir);
        }
    }
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

fn is_symlink_errno(e: Errno) -> bool {
    // openat with O_NOFOLLOW on a symlink gives ELOOP; with O_DIRECTORY on a
    // symlink to a non-directory some kernels give ENOTDIR.
    e == Errno::ELOOP
}

impl Dir {
    /// Opens `path` as a directory, following symlinks on the way (use this
    /// only for a root the user named).
    pub fn open(path: impl AsRef<Path>) -> Result<Dir> {
        let path = path.as_ref();
        let fd =
            nix::fcntl::open(path, OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())
                .ctx("cannot open directory", path)?;
        Ok(Dir { fd, path: path.to_path_buf() })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        self.path.join(name)
    }

    /// Opens the subdirectory `name`, refusing a symlink.
    pub fn sub(&self, name: impl AsRef<OsStr>) -> Result<Dir> {
        let name = name.as_ref();
        let path = self.join(name);
        match openat(
            self.fd.as_fd(),
            name,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => Ok(Dir { fd, path }),
            Err(e) if is_symlink_errno(e) => Err(Error::Symlink { path }),
            Err(Errno::ENOTDIR) if self.is_symlink(name) => Err(Error::Symlink { path }),
            Err(e) => Err(Error::io("cannot open directory", path, e.into())),
        }
    }

    fn is_symlink(&self, name: impl AsRef<OsStr>) -> bool {
        let name = name.as_ref();
        matches!(self.lstat(name), Ok(Some(st)) if kind(&st) == SFlag::S_IFLNK)
    }

    /// Creates the directory `name` with `mode`; fails if anything exists there.
    pub fn mkdir(&self, name: impl AsRef<OsStr>, mode: u32) -> io::Result<()> {
        let name = name.as_ref();
        mkdirat(self.fd.as_fd(), name, Mode::from_bits_truncate(mode)).map_err(io::Error::from)
    }

    /// Creates the directory `name` unless a directory (not a symlink) is already there.
    pub fn mkdir_if_missing(&self, name: impl AsRef<OsStr>, mode: u32) -> Result<()> {
        let name = name.as_ref();
        match self.mkdir(name, mode) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                self.sub(name)?;
                Ok(())
            }
            Err(e) => Err(Error::io("cannot create directory", self.join(name), e)),
        }
    }

    /// `lstat` of `name`; `None` when nothing is there.
    pub fn lstat(&self, name: impl AsRef<OsStr>) -> Result<Option<FileStat>> {
        let name = name.as_ref();
        match fstatat(self.fd.as_fd(), name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(st)),
            Err(Errno::ENOENT) => Ok(None),
            Err(e) => Err(Error::io("cannot stat", self.join(name), e.into())),
        }
    }

    /// `openat` of `name` with `access` (`O_RDONLY`, `O_WRONLY`, ...), never
    /// through a symlink, and without blocking on a fifo planted there.
    fn open_unblocked(&self, name: &OsStr, access: OFlag) -> nix::Result<OwnedFd> {
        let flags = access | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
        openat(self.fd.as_fd(), name, flags, Mode::empty())
    }

    /// [`Dir::open_unblocked`] of `name` (at `path`), and the `fstat` of
    /// what it opened; `None` when nothing is there, [`Error::Symlink`] for
    /// a symlink.
    fn open_stat(&self, name: &OsStr, path: &Path, access: OFlag) -> Result<Option<(OwnedFd, FileStat)>> {
        let fd = match self.open_unblocked(name, access) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => return Ok(None),
            Err(e) if is_symlink_errno(e) => return Err(Error::Symlink { path: path.to_path_buf() }),
            Err(e) => return Err(Error::io("cannot open", path, e.into())),
        };
        let st = fstat(fd.as_fd()).ctx("cannot stat", path)?;
        Ok(Some((fd, st)))
    }

    /// Opens the regular file `name` for reading; refuses symlinks and
    /// anything that is not a regular file.
    pub fn open_read(&self, name: impl AsRef<OsStr>) -> Result<Option<File>> {
        let name = name.as_ref();
        let path = self.join(name);
        let Some((fd, st)) = self.open_stat(name, &path, OFlag::O_RDONLY)? else { return Ok(None) };
        if kind(&st) != SFlag::S_IFREG {
            return Err(Error::SpecialFile { path });
        }
        // O_NONBLOCK only guarded the open against a planted fifo.
        nix::fcntl::fcntl(fd.as_fd(), nix::fcntl::FcntlArg::F_SETFL(OFlag::empty()))
            .ctx("cannot open", &path)?;
        Ok(Some(File::from(fd)))
    }

    /// Creates `name` exclusively (never through a symlink) for writing.
    pub fn create_new(&self, name: impl AsRef<OsStr>, mode: u32) -> io::Result<File> {
        let name = name.as_ref();
        let fd = openat(
            self.fd.as_fd(),
            name,
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(mode),
        )?;
        Ok(File::from(fd))
    }

    /// Creates `name` exclusively (never through a symlink) for reading and
    /// writing: for a copy that is read back after the kernel made it.
    pub fn create_new_rw(&self, name: impl AsRef<OsStr>, mode: u32) -> io::Result<File> {
        let name = name.as_ref();
        let fd = openat(
            self.fd.as_fd(),
            name,
            OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(mode),
        )?;
        Ok(File::from(fd))
    }

    /// A fresh temp name in this directory for a file that will become `name`.
    fn temp_name(name: &OsStr) -> String {
        let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        // A name that is not UTF-8 gives a temp name that is: the temp
        // name only has to be unique.
        let short: String = name.to_string_lossy().chars().take(64).collect();
        format!(".{short}.{}.{n}.{nanos:x}.tmp", std::process::id())
    }

    /// Creates a fresh temp file in this directory that will become `name`
    /// after [`Dir::rename`]; returns its name and the open file. The file
    /// is locked while it is open (see [`Dir::create_locked`]), so a
    /// cleanup tells the temp file of a writer that died from a live one.
    pub fn create_temp(&self, name: impl AsRef<OsStr>, mode: u32) -> Result<(String, File)> {
        let name = name.as_ref();
        loop {
            let tmp = Self::temp_name(name);
            match self.create_locked(&tmp, mode) {
                Ok(file) => return Ok((tmp, file)),
                // Removed by a cleanup before the lock was taken: a new name.
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::io("cannot create a temp file beside", self.join(name), e)),
            }
        }
    }

    /// Creates `name` exclusively (never through a symlink) and takes an
    /// exclusive `flock` on it, held as long as the file is open: a writer
    /// that dies releases it, so [`Dir::abandoned`] can tell its leftovers
    /// from a live writer's file, even when the pid was reused. A cleanup
    /// that took the lock in the moment between the creation and the lock
    /// (and so removed the file) makes this fail with `Interrupted`: try
    /// again with a new name. `NotFound` means this directory is gone (a
    /// command removed it, say), and trying again would never end.
    pub fn create_locked(&self, name: impl AsRef<OsStr>, mode: u32) -> io::Result<File> {
        let name = name.as_ref();
        let file = self.create_new(name, mode)?;
        if let Err(e) = rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive) {
            let e = io::Error::from(e);
            let _ = unlinkat(self.fd.as_fd(), name, UnlinkatFlags::NoRemoveDir);
            return Err(e);
        }
        if fstat(file.as_fd())?.st_nlink == 0 {
            return Err(io::Error::from(io::ErrorKind::Interrupted));
        }
        Ok(file)
    }

    /// Whether the regular file `name` is a dead writer's leftover: nobody
    /// holds the lock its writer took (see [`Dir::create_locked`]). With
    /// `remove`, an abandoned file is removed while this holds its lock,
    /// and only if `name` still names the file that was checked. Never
    /// follows a symlink; a symlink, fifo or other special file is
    /// [`Leftover::NotAFile`].
    pub fn abandoned(&self, name: impl AsRef<OsStr>, remove: bool) -> Result<Leftover> {
        let name = name.as_ref();
        let path = self.join(name);
        let (fd, st) = match self.open_stat(name, &path, OFlag::O_RDONLY | OFlag::O_NOCTTY) {
            Ok(Some(opened)) => opened,
            Ok(None) => return Ok(Leftover::Gone),
            Err(Error::Symlink { .. }) => return Ok(Leftover::NotAFile),
            Err(e) => return Err(e),
        };
        if kind(&st) != SFlag::S_IFREG {
            return Ok(Leftover::NotAFile);
        }
        let lock = match Flock::lock(fd, FlockArg::LockExclusiveNonblock) {
            Ok(l) => l,
            Err((_, Errno::EWOULDBLOCK)) => return Ok(Leftover::Held),
            Err((_, e)) => return Err(Error::io("cannot lock", path, e.into())),
        };
        if st.st_nlink == 0 {
            return Ok(Leftover::Gone);
        }
        if !remove {
            return Ok(Leftover::Abandoned);
        }
        // The name must still lead to the file that was checked.
        match self.lstat(name)? {
            Some(now) if (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino) => {}
            _ => return Ok(Leftover::Gone),
        }
        match unlinkat(self.fd.as_fd(), name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => {}
            Err(e) => return Err(Error::io("cannot remove", path, e.into())),
        }
        drop(lock);
        Ok(Leftover::Abandoned)
    }

    /// Writes `name` atomically: the bytes produced by `fill` go to a temp
    /// file, which is synced and renamed over `name`. With `durable` the
    /// directory is synced too, so the rename survives a crash. On any error
    /// the temp file is removed and `name` is left as it was.
    pub fn write_atomic_with<T>(
        &self,
        name: &str,
        mode: u32,
        durable: bool,
        fill: impl FnOnce(&mut File) -> io::Result<T>,
    ) -> Result<T> {
        self.reserve(name, mode)?.replace_with(durable, fill)
    }

    /// Creates, now, the temp file of one later atomic write of `name`:
    /// the inode and its directory entry are paid for while there is time,
    /// leaving only write, sync and rename for when the bytes are known.
    pub fn reserve(&self, name: &str, mode: u32) -> Result<Reserved<'_>> {
        let (tmp, file) = self.create_temp(name, mode)?;
        Ok(Reserved { dir: self, name: name.to_string(), tmp, file: Some(file), placed: false })
    }

    /// [`Dir::reserve`] with a known temp name, created exclusively: one a
    /// cleanup can remove by that exact name if the writer died.
    pub fn reserve_named(&self, name: &str, tmp: &str, mode: u32) -> Result<Reserved<'_>> {
        let file = self.create_new(tmp, mode).ctx("cannot create a temp file beside", self.join(name))?;
        Ok(Reserved {
            dir: self,
            name: name.to_string(),
            tmp: tmp.to_string(),
            file: Some(file),
            placed: false,
        })
    }

    /// Grows the space allocated ahead for the empty temp file `name` (one
    /// [`Dir::reserve_named`] made) to `len` bytes; nothing when it is not
    /// there, is not an empty regular file, or was not made by this user.
    pub fn allocate_named(&self, name: &str, len: u64) -> Result<()> {
        let path = self.join(name);
        let fd = match self.open_unblocked(name.as_ref(), OFlag::O_WRONLY) {
            Ok(fd) => fd,
            Err(Errno::ENOENT | Errno::ELOOP | Errno::EACCES | Errno::EPERM | Errno::ENXIO) => return Ok(()),
            Err(e) => return Err(Error::io("cannot open", path, e.into())),
        };
        let st = fstat(fd.as_fd()).ctx("cannot stat", &path)?;
        if kind(&st) != SFlag::S_IFREG || st.st_size != 0 || st.st_uid != nix::unistd::geteuid().as_raw() {
            return Ok(());
        }
        allocate_ahead(&File::from(fd), len).ctx("cannot reserve space beside", self.join(name))
    }

    /// Writes `name` atomically but without waiting for the disk: the temp
    /// file is renamed into place at once (readers see old or new bytes,
    /// never a mix) and the returned [`PendingSync`] makes it durable later.
    /// Until then a crash may leave `name` empty; use this only where that
    /// is as good as the file never having been written (a first write).
    pub fn write_atomic_deferred(&self, name: &str, bytes: &[u8], mode: u32) -> Result<PendingSync> {
        let path = self.join(name);
        let (tmp, mut file) = self.create_temp(name, mode)?;
        if let Err(e) = file.write_all(bytes) {
            let _ = unlinkat(self.fd.as_fd(), tmp.as_str(), UnlinkatFlags::NoRemoveDir);
            return Err(Error::io("cannot write", path, e));
        }
        if let Err(e) = renameat(self.fd.as_fd(), tmp.as_str(), self.fd.as_fd(), name) {
            let _ = unlinkat(self.fd.as_fd(), tmp.as_str(), UnlinkatFlags::NoRemoveDir);
            return Err(Error::io("cannot replace", path, e.into()));
        }
        let dir =
            Dir { fd: self.fd.try_clone().ctx("cannot duplicate", &self.path)?, path: self.path.clone() };
        Ok(PendingSync { file, dir, path })
    }

    /// Writes `name` atomically (temp file renamed into place) without any
    /// sync: for callers that write many files and then sync the whole file
    /// system once (`syncfs`) before they report success.
    pub fn write_atomic_unsynced(&self, name: &str, bytes: &[u8], mode: u32) -> Result<()> {
        let pending = self.write_atomic_deferred(name, bytes, mode)?;
        drop(pending);
        Ok(())
    }

    /// Writes `bytes` to `name` atomically (see [`Dir::write_atomic_with`]).
    pub fn write_atomic(&self, name: &str, bytes: &[u8], mode: u32, durable: bool) -> Result<()> {
        self.write_atomic_with(name, mode, durable, |f| f.write_all(bytes))
    }

    /// Renames `from` to `to` within this directory.
    pub fn rename(&self, from: impl AsRef<OsStr>, to: impl AsRef<OsStr>) -> Result<()> {
        let (from, to) = (from.as_ref(), to.as_ref());
        renameat(self.fd.as_fd(), from, self.fd.as_fd(), to).ctx("cannot rename", self.join(from))
    }

    /// Removes the file (or symlink) `name`; missing is fine.
    pub fn unlink(&self, name: impl AsRef<OsStr>) -> Result<()> {
        let name = name.as_ref();
        match unlinkat(self.fd.as_fd(), name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(Error::io("cannot remove", self.join(name), e.into())),
        }
    }

    /// Removes the empty directory `name`; missing is fine.
    pub fn rmdir(&self, name: impl AsRef<OsStr>) -> Result<()> {
        let name = name.as_ref();
        match unlinkat(self.fd.as_fd(), name, UnlinkatFlags::RemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(Error::io("cannot remove directory", self.join(name), e.into())),
        }
    }

    /// Creates the symlink `name` pointing at `target`.
    pub fn symlink(&self, target: &Path, name: impl AsRef<OsStr>) -> Result<()> {
        let name = name.as_ref();
        symlinkat(target, self.fd.as_fd(), name).ctx("cannot create symlink", self.join(name))
    }

    /// Makes the directory's entries durable.
    pub fn sync(&self) -> Result<()> {
        nix::unistd::fsync(self.fd.as_fd()).ctx("cannot sync directory", &self.path)
    }

    /// Takes an exclusive `flock` on this directory, waiting for it.
    pub fn lock(&self) -> Result<DirLock> {
        let dup = self.fd.try_clone().ctx("cannot lock", &self.path)?;
        let lock = Flock::lock(dup, FlockArg::LockExclusive)
            .map_err(|(_, e)| Error::io("cannot lock", &self.path, e.into()))?;
        Ok(DirLock { _lock: lock })
    }

    /// A descriptor of this directory with an open file description of its
    /// own: one a `flock` or a listing shares with no other.
    fn reopen(&self) -> nix::Result<OwnedFd> {
        openat(self.fd.as_fd(), ".", OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())
    }

    /// Takes an exclusive `flock` on this directory through a descriptor
    /// of its own: unlike [`Dir::lock`], a later [`Dir::lock`] by this
    /// same process waits for it, and releasing that one leaves this held.
    pub fn lock_apart(&self) -> Result<DirLock> {
        let fd = self.reopen().ctx("cannot lock", &self.path)?;
        let lock = Flock::lock(fd, FlockArg::LockExclusive)
            .map_err(|(_, e)| Error::io("cannot lock", &self.path, e.into()))?;
        Ok(DirLock { _lock: lock })
    }

    /// Takes an exclusive `flock` on this directory, waiting at most `wait`;
    /// `None` when someone else still holds it then (a stopped process).
    pub fn lock_within(&self, wait: std::time::Duration) -> Result<Option<DirLock>> {
        let deadline = std::time::Instant::now() + wait;
        let mut pause = std::time::Duration::from_millis(1);
        loop {
            let dup = self.fd.try_clone().ctx("cannot lock", &self.path)?;
            match Flock::lock(dup, FlockArg::LockExclusiveNonblock) {
                Ok(lock) => return Ok(Some(DirLock { _lock: lock })),
                Err((_, Errno::EWOULDBLOCK)) => {}
                Err((_, e)) => return Err(Error::io("cannot lock", &self.path, e.into())),
            }
            if std::time::Instant::now() >= deadline {
                return Ok(None);
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(std::time::Duration::from_millis(50));
        }
    }

    /// Removes `name` and everything below it, like `rm -rf`, but: never
    /// follows a symlink (a link is removed, not its target), never enters
    /// a mount point (another file system, or a bind mount of this one),
    /// and makes a directory writable when its mode stops the removal.
    /// Missing is fine. A mount point inside is left with the directories
    /// leading to it, and makes this an error naming it (see
    /// [`Dir::remove_tree_keeping_mounts`]). Returns how many entries went.
    pub fn remove_tree(&self, name: impl AsRef<OsStr>) -> Result<u64> {
        let name = name.as_ref();
        let removed = self.remove_tree_keeping_mounts(name)?;
        match removed.mounts_left.first() {
            None => Ok(removed.entries),
            Some(m) => Err(Error::Other(format!(
                "refused to remove `{}`: left mount point `{}` (a mount is never entered)",
                self.join(name).display(),
                m.display()
            ))),
        }
    }

    /// Removes `name` and everything under it, except mount points: a
    /// directory (or file) another file system, or a bind mount of this
    /// one, is mounted on is never entered nor removed, and neither are
    /// the directories that lead to it. Symlinks are never followed.
    pub fn remove_tree_keeping_mounts(&self, name: impl AsRef<OsStr>) -> Result<Removed> {
        let name = name.as_ref();
        let mut removed = Removed::default();
        let Some(st) = self.lstat(name)? else { return Ok(removed) };
        if kind(&st) != SFlag::S_IFDIR {
            match unlinkat(self.fd.as_fd(), name, UnlinkatFlags::NoRemoveDir) {
                Ok(()) | Err(Errno::ENOENT) => removed.entries = 1,
                Err(Errno::EBUSY) if self.is_mount_point(name)? => removed.mounts_left.push(self.join(name)),
                Err(e) => return Err(Error::io("cannot remove", self.join(name), e.into())),
            }
            return Ok(removed);
        }
        let here = mount_of(self.fd.as_fd()).ctx("cannot stat", &self.path)?;
        removed.entries = self.remove_dir_tree(name, &here, 0, &mut removed.mounts_left)?;
        Ok(removed)
    }

    /// True when a file system is mounted on `name` (read without
    /// following a symlink in `name` itself).
    fn is_mount_point(&self, name: impl AsRef<OsStr>) -> Result<bool> {
        let name = name.as_ref();
        let here = mount_of(self.fd.as_fd()).ctx("cannot stat", &self.path)?;
        let there = match mount_of_name(self.fd.as_fd(), name) {
            Ok(m) => m,
            // Gone meanwhile: nothing is mounted there.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(Error::io("cannot stat", self.join(name), e)),
        };
        Ok(there.differs_from(&here, &self.join(name)))
    }

    fn remove_dir_tree(
        &self,
        name: &OsStr,
        mount: &Mount,
        depth: usize,
        left: &mut Vec<PathBuf>,
    ) -> Result<u64> {
        const MAX_DEPTH: usize = 800;
        let path = self.join(name);
        if depth > MAX_DEPTH {
            return Err(Error::Other(format!(
                "`{}` is nested more than {MAX_DEPTH} levels deep",
                path.display()
            )));
        }
        let sub = match self.sub(name) {
            Ok(d) => d,
            // Removed meanwhile (another reaper): what this was to do is done.
            Err(Error::Io { source, .. }) if source.raw_os_error() == Some(nix::libc::ENOENT) => {
                return Ok(0);
            }
            Err(Error::Io { source, .. }) if source.raw_os_error() == Some(nix::libc::EACCES) => {
                // A directory without read or search permission: give it
                // back (a mount point cannot be opened either way here, so
                // first make sure this is not one: chmod would reach its root).
                if self.is_mount_point(name)? {
                    left.push(path);
                    return Ok(0);
                }
                match nix::sys::stat::fchmodat(
                    self.fd.as_fd(),
                    name,
                    Mode::from_bits_truncate(0o700),
                    nix::sys::stat::FchmodatFlags::NoFollowSymlink,
                ) {
                    Ok(()) => {}
                    Err(Errno::ENOENT) => return Ok(0),
                    Err(e) => return Err(Error::io("cannot make writable", &path, e.into())),
                }
                match self.sub(name) {
                    Ok(d) => d,
                    Err(Error::Io { source, .. }) if source.raw_os_error() == Some(nix::libc::ENOENT) => {
                        return Ok(0);
                    }
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        };
        let there = mount_of(sub.fd.as_fd()).ctx("cannot stat", &path)?;
        if there.differs_from(mount, &path) {
            left.push(path);
            return Ok(0);
        }
        let kept = left.len();
        let mut removed = 0;
        let mut made_writable = false;
        let entries = match sub.entries_once() {
            Ok(e) => e,
            // Removed after it was opened (another reaper): listing a
            // removed directory fails so, and what this was to do is done.
            Err(Error::Io { source, .. }) if source.raw_os_error() == Some(nix::libc::ENOENT) => {
                return Ok(0);
            }
            Err(e) => return Err(e),
        };
        for entry in entries {
            let (child, is_dir) = entry;
            let result = if is_dir == Some(true) {
                sub.remove_dir_tree(&child, mount, depth + 1, left)
            } else {
                match unlinkat(sub.fd.as_fd(), child.as_os_str(), UnlinkatFlags::NoRemoveDir) {
                    Ok(()) | Err(Errno::ENOENT) => Ok(1),
                    Err(Errno::EISDIR) => sub.remove_dir_tree(&child, mount, depth + 1, left),
                    Err(Errno::EBUSY) if sub.is_mount_point(&child)? => {
                        left.push(sub.join(&child));
                        Ok(0)
                    }
                    Err(Errno::EACCES | Errno::EPERM) if !made_writable => {
                        made_writable = true;
                        nix::sys::stat::fchmod(sub.fd.as_fd(), Mode::from_bits_truncate(0o700))
                            .ctx("cannot make writable", sub.path())?;
                        match unlinkat(sub.fd.as_fd(), child.as_os_str(), UnlinkatFlags::NoRemoveDir) {
                            Ok(()) | Err(Errno::ENOENT) => Ok(1),
                            Err(e) => Err(Error::io("cannot remove", sub.join(&child), e.into())),
                        }
                    }
                    Err(e) => Err(Error::io("cannot remove", sub.join(&child), e.into())),
                }
            };
            removed += result?;
        }
        drop(sub);
        if left.len() > kept {
            // A mount point is left below: this directory stays around it.
            return Ok(removed);
        }
        match unlinkat(self.fd.as_fd(), name, UnlinkatFlags::RemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => Ok(removed + 1),
            Err(Errno::EACCES | Errno::EPERM) => {
                nix::sys::stat::fchmod(self.fd.as_fd(), Mode::from_bits_truncate(0o700))
                    .ctx("cannot make writable", &self.path)?;
                match unlinkat(self.fd.as_fd(), name, UnlinkatFlags::RemoveDir) {
                    Ok(()) | Err(Errno::ENOENT) => Ok(removed + 1),
                    Err(e) => Err(Error::io("cannot remove directory", path, e.into())),
                }
            }
            Err(e) => Err(Error::io("cannot remove directory", path, e.into())),
        }
    }

    /// The owner of this directory and when it was created (when the file
    /// system records it): neither can be set by an unprivileged process.
    pub fn owner_and_birth(&self) -> (Option<u32>, Option<std::time::SystemTime>) {
        let btime = rustix::fs::StatxFlags::BTIME;
        match statx_of(self.fd.as_fd(), c"", rustix::fs::AtFlags::EMPTY_PATH, btime) {
            Ok(sx) => {
                let born = (sx.stx_mask & btime.bits() != 0 && sx.stx_btime.tv_sec > 0).then(|| {
                    std::time::UNIX_EPOCH
                        + std::time::Duration::new(sx.stx_btime.tv_sec as u64, sx.stx_btime.tv_nsec)
                });
                (Some(sx.stx_uid), born)
            }
            Err(_) => (fstat(self.fd.as_fd()).ok().map(|st| st.st_uid), None),
        }
    }

    /// The names in this directory with whether each is a directory (when
    /// the file system says so without a stat), read through the open
    /// descriptor rather than the path.
    pub fn entries_raw(&self) -> Result<Vec<(OsString, Option<bool>)>> {
        let fd = self.reopen().ctx("cannot list", &self.path)?;
        let mut dir = nix::dir::Dir::from_fd(fd).ctx("cannot list", &self.path)?;
        let mut out = Vec::new();
        for entry in dir.iter() {
            let entry = entry.ctx("cannot list", &self.path)?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let is_dir = entry.file_type().map(|t| t == nix::dir::Type::Directory);
            out.push((OsStr::from_bytes(name).to_os_string(), is_dir));
        }
        Ok(out)
    }

    /// [`Dir::entries_raw`] read straight from this descriptor, without
    /// opening the directory again: for a directory opened just now and
    /// listed once (the descriptor's position moves to the end). The
    /// removal of a tree lists each directory so, saving five system calls
    /// a directory (reopen, stat, two fcntl, rewind).
    fn entries_once(&self) -> Result<Vec<(OsString, Option<bool>)>> {
        let mut buf = [std::mem::MaybeUninit::<u8>::uninit(); 8192];
        let mut dir = rustix::fs::RawDir::new(self.fd.as_fd(), &mut buf);
        let mut out = Vec::new();
        while let Some(entry) = dir.next() {
            let entry = entry.map_err(|e| Error::io("cannot list", &self.path, e.into()))?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let is_dir = match entry.file_type() {
                rustix::fs::FileType::Unknown => None,
                t => Some(t == rustix::fs::FileType::Directory),
            };
            out.push((OsStr::from_bytes(name).to_os_string(), is_dir));
        }
        Ok(out)
    }

    /// The names in this directory, except `.` and `..`, that are UTF-8:
    /// for callers that look for names runws makes (run ids, its own
    /// files), which always are. Walks that must see every name use
    /// [`Dir::entries_raw`].
    pub fn entries(&self) -> Result<Vec<String>> {
        Ok(self.entries_raw()?.into_iter().filter_map(|(name, _)| name.into_string().ok()).collect())
    }

    /// Every name in this directory, except `.` and `..`; an error naming
    /// the first that is not UTF-8 (for trees runws only ever fills with
    /// such names).
    pub fn entries_utf8(&self) -> Result<Vec<String>> {
        self.entries_raw()?
            .into_iter()
            .map(|(name, _)| {
                name.into_string().map_err(|n| {
                    Error::Other(format!(
                        "`{}` holds a name that is not UTF-8: `{}`",
                        crate::shown::os(self.path.as_os_str()),
                        crate::shown::os(&n)
                    ))
                })
            })
            .collect()
    }

    /// True when this directory has been removed since it was opened (its
    /// descriptor still works, but no name leads to it any more).
    pub fn is_removed(&self) -> bool {
        fstat(self.fd.as_fd()).is_ok_and(|st| st.st_nlink == 0)
    }

    pub fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    pub fn borrow(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// What [`Dir::abandoned`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Leftover {
    /// Nobody holds its lock: its writer is gone (removed, if asked).
    Abandoned,
    /// A live process holds its lock.
    Held,
    /// Not a regular file: never one a writer of runws's left.
    NotAFile,
    /// Nothing there (any more).
    Gone,
}

/// True for the name of a temp file [`Dir::create_temp`] makes:
/// `.NAME.PID.N.NANOS.tmp` (PID and N decimal, NANOS hex).
pub fn is_temp_name(name: &[u8]) -> bool {
    let Some(rest) = name.strip_prefix(b".").and_then(|n| n.strip_suffix(b".tmp")) else { return false };
    let mut parts = rest.rsplitn(4, |&b| b == b'.');
    let (Some(nanos), Some(n), Some(pid), Some(_)) = (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    let digits = |p: &[u8]| !p.is_empty() && p.iter().all(u8::is_ascii_digit);
    digits(pid) && digits(n) && !nanos.is_empty() && nanos.iter().all(u8::is_ascii_hexdigit)
}

/// What [`Dir::remove_tree_keeping_mounts`] did.
#[derive(Debug, Default)]
pub struct Removed {
    /// Entries removed.
    pub entries: u64,
    /// Mount points found and left, with the directories leading to them.
    pub mounts_left: Vec<PathBuf>,
}

/// Which mount a file is on: the mount id where the kernel reports it
/// (Linux 5.8 and later: it tells a bind mount of the same file system
/// apart), else only the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mount {
    dev: (u32, u32),
    id: Option<u64>,
    /// The kernel says this is the root of a mount.
    root: bool,
}

impl Mount {
    /// True when `self` (a directory inside a tree on `parent`'s mount) is
    /// on another mount: a mount point never to be crossed.
    fn differs_from(&self, parent: &Mount, path: &Path) -> bool {
        if self.root || self.dev != parent.dev {
            return true;
        }
        match (self.id, parent.id) {
            (Some(a), Some(b)) => a != b,
            // No mount ids on this kernel: the mount table tells.
            _ => mount_points().contains(path),
        }
    }
}

fn statx_of(
    dir: BorrowedFd<'_>,
    name: &std::ffi::CStr,
    flags: rustix::fs::AtFlags,
    mask: rustix::fs::StatxFlags,
) -> io::Result<rustix::fs::Statx> {
    Ok(rustix::fs::statx(dir, name, flags, mask)?)
}

fn mount_from(sx: &rustix::fs::Statx) -> Mount {
    use rustix::fs::{StatxAttributes, StatxFlags};
    let root = StatxAttributes::MOUNT_ROOT;
    Mount {
        dev: (sx.stx_dev_major, sx.stx_dev_minor),
        id: (sx.stx_mask & StatxFlags::MNT_ID.bits() != 0).then_some(sx.stx_mnt_id),
        root: sx.stx_attributes_mask.contains(root) && sx.stx_attributes.contains(root),
    }
}

/// The mount an open file is on.
fn mount_of(fd: BorrowedFd<'_>) -> io::Result<Mount> {
    statx_of(fd, c"", rustix::fs::AtFlags::EMPTY_PATH, rustix::fs::StatxFlags::MNT_ID)
        .map(|sx| mount_from(&sx))
}

/// The mount of `name` in `dir`: a mount point shows its mounted root (a
/// symlink is not followed).
fn mount_of_name(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<Mount> {
    let name = std::ffi::CString::new(name.as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(nix::libc::EINVAL))?;
    let flags = rustix::fs::AtFlags::SYMLINK_NOFOLLOW | rustix::fs::AtFlags::NO_AUTOMOUNT;
    statx_of(dir, &name, flags, rustix::fs::StatxFlags::MNT_ID).map(|sx| mount_from(&sx))
}

/// Every mount point of this mount namespace (`/proc/self/mountinfo`),
/// read once: only consulted on kernels without mount ids.
fn mount_points() -> &'static std::collections::HashSet<PathBuf> {
    static POINTS: std::sync::OnceLock<std::collections::HashSet<PathBuf>> = std::sync::OnceLock::new();
    POINTS.get_or_init(|| mount_table().unwrap_or_default().into_iter().map(|m| m.point).collect())
}

/// One line of `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountLine {
    /// Where it is mounted, unescaped: any bytes.
    pub point: PathBuf,
    /// The file system type (`tmpfs`, `cgroup2`).
    pub fstype: String,
    /// The super block's options (for a cgroup v1 hierarchy, its controllers).
    pub options: String,
}

/// The mount table of this mount namespace, in its order, read as bytes: a
/// mount point may be named with any bytes (any user may mount a FUSE file
/// system on a directory of theirs), and such a line must not keep the
/// others from being read.
pub fn mount_table() -> io::Result<Vec<MountLine>> {
    Ok(parse_mountinfo(&read_kernel_bytes("/proc/self/mountinfo")?))
}

/// `ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER`,
/// fields separated by single spaces (a space inside a field is escaped).
fn parse_mountinfo(bytes: &[u8]) -> Vec<MountLine> {
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    bytes
        .split(|&b| b == b'\n')
        .filter_map(|line| {
            let fields: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
            let dash = fields.iter().skip(6).position(|f| *f == b"-")? + 6;
            Some(MountLine {
                point: unescape_mountinfo(fields.get(4)?),
                fstype: text(fields.get(dash + 1)?),
                options: fields.get(dash + 3).map(|o| text(o)).unwrap_or_default(),
            })
        })
        .collect()
}

/// mountinfo writes space, tab, newline and backslash as `\ooo`.
fn unescape_mountinfo(b: &[u8]) -> PathBuf {
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 4 <= b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    PathBuf::from(OsString::from_vec(out))
}

/// Opens `path`, a path someone named (a symlink in it is followed), for
/// reading, when it is a regular file; `None` when it is anything else. A
/// fifo, socket, device or directory is told by a `stat` before any open, so
/// none is ever opened, and the open descriptor is checked again: its
/// `O_NONBLOCK` keeps a fifo swapped in between from blocking the open.
pub fn open_regular(path: &Path) -> io::Result<Option<File>> {
    if !std::fs::metadata(path)?.file_type().is_file() {
        return Ok(None);
    }
    let fd = nix::fcntl::open(path, OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK, Mode::empty())?;
    if kind(&fstat(fd.as_fd())?) != SFlag::S_IFREG {
        return Ok(None);
    }
    nix::fcntl::fcntl(fd.as_fd(), nix::fcntl::FcntlArg::F_SETFL(OFlag::empty()))?;
    Ok(Some(File::from(fd)))
}

/// The file type bits of a `stat`.
pub fn kind(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits())
}

/// Lossless conversion for names that came from the command line.
pub fn os_to_str(s: &OsStr) -> Result<&str> {
    std::str::from_utf8(s.as_bytes())
        .map_err(|_| Error::Usage(format!("`{}` is not valid UTF-8", s.to_string_lossy())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(check_name("report.json").is_ok());
        assert!(check_name(".hidden").is_ok());
        for bad in ["", ".", "..", "a/b", "/x", "a\0b", &"x".repeat(201)] {
            assert!(check_name(bad).is_err(), "{bad:?} accepted");
        }
        assert!(check_name("x".repeat(200)).is_ok());
    }

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(unescape_mountinfo(br"/a\040b\011c\134d"), Path::new("/a b\tc\\d"));
        assert_eq!(unescape_mountinfo(br"/plain\04"), Path::new(r"/plain\04"));
        assert_eq!(unescape_mountinfo(b"/odd-\xff\\376"), Path::new(OsStr::from_bytes(b"/odd-\xff\xfe")));
    }

    /// Every line is read, whatever bytes another line's mount point holds;
    /// optional fields before the `-` are skipped.
    #[test]
    fn mountinfo_lines_are_read_as_bytes() {
        let table = b"31 23 0:28 / /sys/fs/cgroup rw,relatime shared:9 - tmpfs tmpfs rw,mode=755\n\
            90 31 0:99 / /home/u/mnt-\xff\xfe rw,nosuid - fuse.sshfs host: rw,user_id=1000\n\
            39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n\
            garbage\n";
        let lines = parse_mountinfo(table);
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert_eq!(lines[0].point, Path::new("/sys/fs/cgroup"));
        assert_eq!(lines[0].fstype, "tmpfs");
        assert_eq!(lines[1].point, Path::new(OsStr::from_bytes(b"/home/u/mnt-\xff\xfe")));
        assert_eq!(lines[2].fstype, "cgroup");
        assert_eq!(lines[2].options, "rw,pids");
    }

    /// Nothing mounted: the whole tree goes, and no mount point is reported.
    #[test]
    fn removal_without_mounts_leaves_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(tmp.path().join("t/a/b")).unwrap();
        std::fs::write(tmp.path().join("t/a/b/f"), b"x").unwrap();
        let dir = Dir::open(tmp.path()).unwrap();
        let r = dir.remove_tree_keeping_mounts("t").unwrap();
        assert_eq!((r.entries, r.mounts_left.len()), (4, 0));
        assert!(!tmp.path().join("t").exists());
    }

    #[test]
    fn atomic_write_replaces_planted_symlink() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("outside");
        std::fs::write(&outside, b"keep").unwrap();
        let inner = tmp.path().join("inner");
        std::fs::create_dir(&inner).unwrap();
        std::os::unix::fs::symlink(&outside, inner.join("f")).unwrap();
        let dir = Dir::open(&inner).unwrap();
        dir.write_atomic("f", b"new", 0o644, true).unwrap();
        assert_eq!(std::fs::read(&outside).unwrap(), b"keep");
        assert_eq!(std::fs::read(inner.join("f")).unwrap(), b"new");
        assert!(matches!(dir.open_read("f"), Ok(Some(_))));
    }

    #[test]
    fn refuses_symlinked_subdir_and_file() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("real")).unwrap();
        std::os::unix::fs::symlink(tmp.path().join("real"), tmp.path().join("link")).unwrap();
        std::fs::write(tmp.path().join("real/x"), b"x").unwrap();
        std::os::unix::fs::symlink(tmp.path().join("real/x"), tmp.path().join("xl")).unwrap();
        let dir = Dir::open(tmp.path()).unwrap();
        assert!(matches!(dir.sub("link"), Err(Error::Symlink { .. })));
        assert!(matches!(dir.open_read("xl"), Err(Error::Symlink { .. })));
    }
}
