//! Scanning inside compressed files and archives.
//!
//! A secret in `logs.tar.gz` is as much in the run as one in `log.txt`, but
//! its bytes on disk are deflate output that no rule matches. A file whose
//! first bytes say gzip, zstd, tar or zip is therefore also decoded, and what
//! it holds is scanned as files of its own, named `outer!gzip` (the content
//! of a compressed stream) and `outer!/member` (a member of an archive), one
//! inside another: `out/a.zip!/b.tar.gz!gzip!/c.txt`.
//!
//! The run wrote these files, so nothing in them is trusted: a size in a
//! header is never used to allocate, a member name is shown escaped, and
//! decoding stops at budgets (nesting depth, decoded bytes per file and per
//! scan, expansion ratio, members, what is held in memory). Whatever the
//! scan could not look inside (a budget hit, a corrupt or encrypted member,
//! a format it does not open such as xz) is reported as an [`Unscanned`]
//! with the reason; the caller decides what that means (the seal
//! quarantines). What was decoded before a stop is still scanned.

use std::cell::Cell;
use std::fmt;
use std::io::{self, Read};
use std::sync::atomic::{AtomicU64, Ordering};

use super::{Finding, Scanner};

/// How far the scan goes inside compressed files and archives.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Containers opened one inside another: `a.tar.gz` is two (gzip, then
    /// tar), a `b.tar.gz` inside `a.zip` three.
    pub depth: u32,
    /// Decoded bytes from one file on disk, all its layers together.
    pub per_file: u64,
    /// At most this many decoded bytes per byte of the file on disk…
    pub ratio: u64,
    /// …beyond this many, which are always allowed.
    pub ratio_floor: u64,
    /// Decoded bytes in one scan, all files together.
    pub total: u64,
    /// The largest compressed file or archive held in memory to be opened:
    /// a file on disk, or a container inside another.
    pub held: usize,
    /// Members of one archive.
    pub members: u64,
}

/// The budgets every scan uses.
pub const LIMITS: Limits = Limits {
    depth: 4,
    per_file: 256 << 20,
    ratio: 200,
    ratio_floor: 16 << 20,
    total: 1 << 30,
    held: 64 << 20,
    members: 100_000,
};

/// Something the scan could not look inside, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Unscanned {
    pub path: String,
    pub why: String,
}

impl fmt::Display for Unscanned {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: not scanned: {}", self.path, self.why)
    }
}

/// The decoded bytes one scan may still produce, shared by its threads.
#[derive(Debug)]
pub struct Allowance(AtomicU64);

impl Allowance {
    pub fn new(limits: &Limits) -> Allowance {
        Allowance(AtomicU64::new(limits.total))
    }

    fn take(&self, n: u64) -> bool {
        self.0.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| left.checked_sub(n)).is_ok()
    }
}

/// A format the scan recognises by a file's first bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Format {
    Gzip,
    Zstd,
    Tar,
    Zip,
    /// A compressed or archive format the scan does not open.
    Unsupported(&'static str),
}

/// How many leading bytes [`sniff`] needs: tar's magic is at 257.
pub(super) const SNIFF: usize = 263;

/// The container format `head` (a file's first [`SNIFF`] bytes, or all of
/// a shorter file) starts with, if any.
pub(super) fn sniff(head: &[u8]) -> Option<Format> {
    let bzip2 = head.len() >= 10
        && head.starts_with(b"BZh")
        && (b'1'..=b'9').contains(&head[3])
        && head[4..10] == [0x31, 0x41, 0x59, 0x26, 0x53, 0x59];
    if head.starts_with(&[0x1f, 0x8b, 0x08]) {
        Some(Format::Gzip)
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Some(Format::Zstd)
    } else if head.starts_with(b"PK\x03\x04") || head.starts_with(b"PK\x05\x06") {
        Some(Format::Zip)
    } else if head.get(257..262) == Some(b"ustar") {
        Some(Format::Tar)
    } else if head.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0]) {
        Some(Format::Unsupported("xz"))
    } else if bzip2 {
        Some(Format::Unsupported("bzip2"))
    } else if head.starts_with(&[b'7', b'z', 0xbc, 0xaf, 0x27, 0x1c]) {
        Some(Format::Unsupported("7z"))
    } else if head.starts_with(b"Rar!\x1a\x07") {
        Some(Format::Unsupported("rar"))
    } else if head.starts_with(&[0x04, 0x22, 0x4d, 0x18]) {
        Some(Format::Unsupported("lz4"))
    } else {
        None
    }
}

/// Why decoding one file stopped at a budget.
#[derive(Debug, Clone, Copy)]
enum Over {
    PerFile,
    Ratio,
    Total,
}

/// Counts the decoded bytes of one file on disk against its budgets.
struct Meter<'a> {
    limits: &'a Limits,
    allowance: &'a Allowance,
    left: Cell<u64>,
    /// What the per-file cap is, the flat one or the ratio's.
    cap: Over,
    over: Cell<Option<Over>>,
}

impl Meter<'_> {
    fn take(&self, n: usize) -> bool {
        let n = n as u64;
        if n > self.left.get() {
            self.over.set(Some(self.cap));
            return false;
        }
        if !self.allowance.take(n) {
            self.over.set(Some(Over::Total));
            return false;
        }
        self.left.set(self.left.get() - n);
        true
    }

    fn why(&self, over: Over) -> String {
        let mib = |b: u64| b >> 20;
        match over {
            Over::PerFile => format!("more than {} MiB once decompressed", mib(self.limits.per_file)),
            Over::Ratio => {
                format!("it expands more than {} times (a decompression bomb?)", self.limits.ratio)
            }
            Over::Total => {
                format!("the scan's budget of {} MiB of decompressed data is spent", mib(self.limits.total))
            }
        }
    }
}

/// A decoder's output, counted as it is read.
struct Counted<'m, 'a, R> {
    inner: R,
    meter: &'m Meter<'a>,
}

impl<R: Read> Read for Counted<'_, '_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if !self.meter.take(n) {
            return Err(io::Error::other("over budget"));
        }
        Ok(n)
    }
}

/// Scans what `raw`, the whole of the file `path` on disk, holds inside:
/// its decoded content, its members, and theirs.
pub(super) fn scan_inside(
    scanner: &Scanner,
    limits: &Limits,
    allowance: &Allowance,
    path: &str,
    raw: &[u8],
    format: Format,
) -> (Vec<Finding>, Vec<Unscanned>) {
    let by_ratio = (raw.len() as u64).saturating_mul(limits.ratio).max(limits.ratio_floor);
    let (left, cap) =
        if by_ratio < limits.per_file { (by_ratio, Over::Ratio) } else { (limits.per_file, Over::PerFile) };
    let meter = Meter { limits, allowance, left: Cell::new(left), cap, over: Cell::new(None) };
    let mut walk = Inside { scanner, meter: &meter, findings: Vec::new(), unscanned: Vec::new() };
    walk.open(path, format, raw, 1);
    (walk.findings, walk.unscanned)
}

struct Inside<'s, 'm, 'a> {
    scanner: &'s Scanner,
    meter: &'m Meter<'a>,
    findings: Vec<Finding>,
    unscanned: Vec<Unscanned>,
}

/// The reader of a content failed: the container it came from cannot go on.
struct Broken;

impl<'m, 'a> Inside<'_, 'm, 'a> {
    fn skip(&mut self, path: &str, why: impl Into<String>) {
        self.unscanned.push(Unscanned { path: path.to_string(), why: why.into() });
    }

    /// Why reading `what` failed: a budget, or the data itself.
    fn failed(&mut self, path: &str, what: &str, e: &io::Error) {
        let why = match self.meter.over.get() {
            Some(over) => self.meter.why(over),
            None => format!("corrupt {what}: {}", crate::shown::text(&e.to_string())),
        };
        self.skip(path, why);
    }

    fn too_deep(&mut self, path: &str, depth: u32) -> bool {
        if depth > self.meter.limits.depth {
            let n = self.meter.limits.depth;
            self.skip(path, format!("nested more than {n} compressed files or archives deep"));
            return true;
        }
        false
    }

    /// Opens the container `data` (of `format`), the `depth`th one in.
    fn open(&mut self, path: &str, format: Format, data: &[u8], depth: u32) {
        if self.too_deep(path, depth) {
            return;
        }
        match format {
            Format::Gzip => {
                let mut r = Counted { inner: flate2::read::MultiGzDecoder::new(data), meter: self.meter };
                let _ = self.content(&format!("{path}!gzip"), "gzip data", &mut r, depth);
            }
            Format::Zstd => match zstd::stream::read::Decoder::with_buffer(data) {
                Ok(d) => {
                    let mut r = Counted { inner: d, meter: self.meter };
                    let _ = self.content(&format!("{path}!zstd"), "zstd data", &mut r, depth);
                }
                Err(e) => self.failed(path, "zstd data", &e),
            },
            Format::Tar => self.tar(path, data, depth),
            Format::Zip => self.zip(path, data, depth),
            Format::Unsupported(name) => self.skip(path, format!("{name} files are not opened by the scan")),
        }
    }

    /// Scans one decoded content or member read from `r` as a file of its
    /// own, and opens it too when it is a container itself. An error reading
    /// `r` is reported and returned, so a container stops at its first
    /// broken member; what was read before it is still scanned.
    fn content(&mut self, path: &str, what: &str, r: &mut dyn Read, depth: u32) -> Result<(), Broken> {
        let mut text = self.scanner.file(path);
        let mut head = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        // The first bytes decide what this is.
        let mut end = false;
        while head.len() < SNIFF {
            match r.read(&mut buf[..SNIFF - head.len()]) {
                Ok(0) => {
                    end = true;
                    break;
                }
                Ok(n) => head.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    text.feed(&head);
                    self.findings.extend(text.finish());
                    self.failed(path, what, &e);
                    return Err(Broken);
                }
            }
        }
        let format = sniff(&head);
        if format == Some(Format::Tar) {
            // A tar is read as it streams; its members are the files.
            if self.too_deep(path, depth + 1) {
                return Ok(());
            }
            let mut chained = io::Read::chain(&head[..], r);
            return self.tar_stream(path, &mut chained, depth + 1);
        }
        // Other containers are held whole (up to a limit) to be opened.
        let mut held = format.map(|_| head.clone());
        text.feed(&head);
        let mut result = Ok(());
        while !end {
            match r.read(&mut buf) {
                Ok(0) => end = true,
                Ok(n) => {
                    text.feed(&buf[..n]);
                    if let Some(h) = held.as_mut() {
                        if h.len() + n > self.meter.limits.held {
                            held = None;
                            let mib = self.meter.limits.held >> 20;
                            self.skip(path, format!("larger than {mib} MiB, the most opened in memory"));
                        } else {
                            h.extend_from_slice(&buf[..n]);
                        }
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.failed(path, what, &e);
                    result = Err(Broken);
                    held = None;
                    end = true;
                }
            }
        }
        self.findings.extend(text.finish());
        if let (Some(format), Some(held)) = (format, held) {
            self.open(path, format, &held, depth + 1);
        }
        result
    }

    fn tar(&mut self, path: &str, data: &[u8], depth: u32) {
        let mut r = data;
        let _ = self.tar_stream(path, &mut r, depth);
    }

    /// The members of the tar read from `r`, each a file of its own.
    fn tar_stream(&mut self, path: &str, r: &mut dyn Read, depth: u32) -> Result<(), Broken> {
        let mut archive = tar::Archive::new(r);
        let entries = match archive.entries() {
            Ok(entries) => entries,
            Err(e) => {
                self.failed(path, "tar", &e);
                return Err(Broken);
            }
        };
        let mut members = 0u64;
        for entry in entries {
            let mut entry = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    self.failed(path, "tar", &e);
                    return Err(Broken);
                }
            };
            members += 1;
            if members > self.meter.limits.members {
                let n = self.meter.limits.members;
                self.skip(path, format!("more than {n} members"));
                return Ok(());
            }
            use tar::EntryType as T;
            if !matches!(entry.header().entry_type(), T::Regular | T::Continuous | T::GNUSparse) {
                continue;
            }
            let member = format!("{path}!/{}", crate::shown::bytes(&entry.path_bytes()));
            self.content(&member, "tar member", &mut entry, depth)?;
        }
        Ok(())
    }

    /// The members of the zip `data`, as its central directory lists them;
    /// an entry the directory does not list is reported, not guessed at.
    fn zip(&mut self, path: &str, data: &[u8], depth: u32) {
        // The crate checks the end records against the file's length: the
        // entries it makes room for are at most one per 46 bytes of `data`,
        // which is itself held within `limits.held`.
        let mut archive = match zip::ZipArchive::new(io::Cursor::new(data)) {
            Ok(archive) => archive,
            Err(e) => return self.skip(path, format!("corrupt zip: {}", crate::shown::text(&e.to_string()))),
        };
        // Byte ranges the directory accounts for: each member's local header
        // and data.
        let mut covered = Vec::new();
        for i in 0..archive.len() {
            if i as u64 >= self.meter.limits.members {
                let n = self.meter.limits.members;
                return self.skip(path, format!("more than {n} members"));
            }
            let Ok(entry) = archive.by_index_data(i) else {
                return self.skip(path, "corrupt zip: a bad central directory record");
            };
            let member = format!("{path}!/{}", crate::shown::bytes(entry.name_raw()));
            let (dir, encrypted, method) = (entry.is_dir(), entry.encrypted(), entry.compression());
            // Reading the local header finds where the data starts.
            let file = match archive.by_index_raw(i) {
                Ok(file) => file,
                Err(_) => {
                    self.skip(&member, "corrupt zip: no local header where the directory says");
                    continue;
                }
            };
            let (start, size) = (file.header_start(), file.compressed_size());
            let end = file.data_start().and_then(|d| d.checked_add(size));
            drop(file);
            let Some(end) = end.filter(|&end| end <= data.len() as u64) else {
                self.skip(&member, "corrupt zip: its data runs past the end of the file");
                continue;
            };
            covered.push((start, end));
            if dir {
                continue;
            }
            if encrypted {
                self.skip(&member, "encrypted");
                continue;
            }
            if !matches!(method, zip::CompressionMethod::Stored | zip::CompressionMethod::Deflated) {
                // The number is what names a method; the crate only
                // discourages matching on it.
                #[allow(deprecated)]
                let m = method.to_u16();
                self.skip(&member, format!("zip compression method {m} is not opened by the scan"));
                continue;
            }
            // The CRC is checked at the end of the data, when every byte has
            // been scanned already: a mismatch leaves nothing unscanned.
            let options = zip::ZipReadOptions::new().ignore_crc32(true);
            match archive.by_index_with_options(i, options) {
                Ok(file) => {
                    let mut r = Counted { inner: file, meter: self.meter };
                    let _ = self.content(&member, "zip member", &mut r, depth);
                }
                Err(e) => {
                    self.skip(&member, format!("corrupt zip member: {}", crate::shown::text(&e.to_string())))
                }
            }
        }
        // The crate keeps one member per name, the last: the others are
        // neither scanned nor covered, so they are also counted below.
        if archive.has_duplicate_names() {
            self.skip(path, "members that share a name, of which only the last is opened");
        }
        // A local entry before the directory and outside every listed one is
        // one that a tool reading the entries in order would extract and the
        // directory hides.
        let before = data.len().min(archive.central_directory_start().try_into().unwrap_or(usize::MAX));
        let hidden = find_all(&data[..before], b"PK\x03\x04")
            .filter(|&p| !covered.iter().any(|&(s, e)| (s..e).contains(&(p as u64))))
            .collect::<Vec<_>>();
        if let Some(first) = hidden.first() {
            let n = hidden.len();
            self.skip(
                path,
                format!(
                    "{n} entr{} that its directory does not list (at byte {first})",
                    if n == 1 { "y" } else { "ies" }
                ),
            );
        }
    }
}

fn find_all<'d>(hay: &'d [u8], needle: &'d [u8]) -> impl Iterator<Item = usize> + 'd {
    hay.windows(needle.len()).enumerate().filter(move |(_, w)| *w == needle).map(|(i, _)| i)
}

/// What [`DeepScan`] has seen of a file's first bytes.
#[derive(Debug)]
enum Held {
    /// Fewer than [`SNIFF`] bytes so far.
    Sniffing(Vec<u8>),
    /// A container, held whole to be opened at the end.
    Whole(Format, Vec<u8>),
    /// A container too large to hold.
    TooLarge,
    /// Not a container.
    Plain,
}

/// The streaming scan of one file on disk that also looks inside it when it
/// is compressed or an archive: feed it the file's bytes in any chunks, then
/// [`DeepScan::finish`].
#[derive(Debug)]
pub struct DeepScan<'a> {
    text: super::FileScan<'a>,
    scanner: &'a Scanner,
    limits: &'a Limits,
    allowance: &'a Allowance,
    path: String,
    held: Held,
}

impl<'a> DeepScan<'a> {
    pub fn new(
        scanner: &'a Scanner,
        limits: &'a Limits,
        allowance: &'a Allowance,
        path: &str,
    ) -> DeepScan<'a> {
        DeepScan {
            text: scanner.file(path),
            scanner,
            limits,
            allowance,
            path: path.to_string(),
            held: Held::Sniffing(Vec::new()),
        }
    }

    pub fn feed(&mut self, chunk: &[u8]) {
        self.text.feed(chunk);
        match &mut self.held {
            Held::Sniffing(head) => {
                // Only the first bytes are copied until they say what this is.
                let take = (SNIFF - head.len()).min(chunk.len());
                head.extend_from_slice(&chunk[..take]);
                if head.len() == SNIFF {
                    let mut head = std::mem::take(head);
                    self.held = match sniff(&head) {
                        Some(format) => {
                            head.extend_from_slice(&chunk[take..]);
                            Held::Whole(format, head)
                        }
                        None => Held::Plain,
                    };
                    self.check_size();
                }
            }
            Held::Whole(_, data) => {
                data.extend_from_slice(chunk);
                self.check_size();
            }
            Held::TooLarge | Held::Plain => {}
        }
    }

    fn check_size(&mut self) {
        if let Held::Whole(_, data) = &self.held
            && data.len() > self.limits.held
        {
            self.held = Held::TooLarge;
        }
    }

    pub fn finish(self) -> (Vec<Finding>, Vec<Unscanned>) {
        let mut findings = self.text.finish();
        let (format, data) = match self.held {
            Held::Sniffing(head) => match sniff(&head) {
                Some(format) => (format, head),
                None => return (findings, Vec::new()),
            },
            Held::Whole(format, data) => (format, data),
            Held::Plain => return (findings, Vec::new()),
            Held::TooLarge => {
                let mib = self.limits.held >> 20;
                let why = format!("larger than {mib} MiB, the most opened in memory");
                return (findings, vec![Unscanned { path: self.path, why }]);
            }
        };
        let (inside, unscanned) =
            scan_inside(self.scanner, self.limits, self.allowance, &self.path, &data, format);
        findings.extend(inside);
        (findings, unscanned)
    }
}
