//! Sealing a finished run: its evidence packed into a checksummed archive,
//! with the never-packed names left out and every byte shown to the secret
//! scanner in the same read; quarantine when that fails.

pub mod archive;
pub mod checkpoint;
mod compress;
pub mod exclude;
pub mod links;
pub mod scan;
mod walk;

/// The most bytes of file content a seal packs, and a restore writes, unless
/// `--max-bytes` says otherwise.
pub const DEFAULT_MAX_BYTES: u64 = 256 << 20;
/// [`DEFAULT_MAX_BYTES`] as `--help` shows it.
pub const DEFAULT_MAX_BYTES_SHOWN: &str = "256MiB";
/// The most entries (files, directories, links) a seal packs, and a restore
/// creates, unless `--max-files` says otherwise.
pub const DEFAULT_MAX_FILES: u64 = 50_000;

#[cfg(test)]
mod tests {
    #[test]
    fn the_shown_default_is_the_default() {
        assert_eq!(crate::duration::parse_size(super::DEFAULT_MAX_BYTES_SHOWN), Ok(super::DEFAULT_MAX_BYTES));
    }
}
