//! Sealing a finished run: its evidence packed into a checksummed archive,
//! with the never-packed names left out and every byte shown to the secret
//! scanner in the same read; quarantine when that fails.

pub mod archive;
pub mod checkpoint;
mod compress;
pub mod exclude;
pub mod links;
pub mod remote;
pub mod scan;
mod sink;
mod stages;
mod target;
mod walk;

/// The most bytes of file content a seal packs, and a restore writes, unless
/// `--max-bytes` says otherwise.
pub const DEFAULT_MAX_BYTES: u64 = 256 << 20;
/// [`DEFAULT_MAX_BYTES`] as `--help` shows it.
pub const DEFAULT_MAX_BYTES_SHOWN: &str = "256MiB";
/// The most entries (files, directories, links) a seal packs, and a restore
/// creates, unless `--max-files` says otherwise.
pub const DEFAULT_MAX_FILES: u64 = 50_000;
/// How long a seal and, when it fails, the quarantine may take together,
/// unless `--deadline` says otherwise.
pub const DEFAULT_DEADLINE: std::time::Duration = std::time::Duration::from_secs(90);
/// [`DEFAULT_DEADLINE`] as `--help` shows it.
pub const DEFAULT_DEADLINE_SHOWN: &str = "90s";
/// The archive format, unless `--format` says otherwise.
pub const DEFAULT_FORMAT: archive::Format = archive::Format::Zst;
/// [`DEFAULT_FORMAT`] as `--help` shows it.
pub const DEFAULT_FORMAT_SHOWN: &str = "zst";

#[cfg(test)]
mod tests {
    #[test]
    fn the_archive_stores_default_is_the_seals() {
        assert_eq!(crate::archive_store::DEFAULT_SEAL_BYTES, super::DEFAULT_MAX_BYTES);
    }

    #[test]
    fn the_shown_default_is_the_default() {
        assert_eq!(crate::duration::parse_size(super::DEFAULT_MAX_BYTES_SHOWN), Ok(super::DEFAULT_MAX_BYTES));
    }
}
