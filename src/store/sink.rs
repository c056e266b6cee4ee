//! The fenced sink for a plain directory (`--to DIR`).
//!
//! `DIR/<encoded key>` holds the payload, replaced atomically, so a reader
//! sees a whole payload or none. `DIR/.runws-fence/<encoded key>.json`
//! records the highest fence and the sha256 of the bytes published with it.
//! Each check-and-write holds an exclusive `flock` on `.runws-fence`, across
//! processes.
//!
//! The record is written (durably) before the payload: a crash between the
//! two leaves a record ahead of the payload, never a payload ahead of its
//! record, so a stale writer can never slip in under a fence that was already
//! written. The record keeps the fence and hash of the payload it replaces,
//! so a reader can still name the fence of the bytes it finds, and a retry of
//! the interrupted publish completes it.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{
    PublishOutcome, check_key, encode_key, open_dir_durable, read_file, read_record, sha256_hex,
    subdir_durable,
};
use crate::error::{Error, Result};
use crate::fsx::Dir;

const FENCE_DIR: &str = ".runws-fence";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Committed {
    fence: u64,
    sha256: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct FenceRecord {
    key: String,
    fence: u64,
    sha256: String,
    /// The payload this record's write replaces, until that write lands.
    previous: Option<Committed>,
}

/// Publishes `payload` as `DIR/<encoded key>` when `fence` is above the
/// highest fence recorded for `key`, or equal with identical bytes.
pub fn publish_to_dir(dir: &Path, key: &str, fence: u64, payload: &[u8]) -> Result<PublishOutcome> {
    check_key(key)?;
    let sink = open_dir_durable(dir)?;
    let fences = subdir_durable(&sink, FENCE_DIR)?;
    let _lock = fences.lock()?;

    let name = encode_key(key);
    let record_name = format!("{name}.json");
    let record = fence_record(&fences, &record_name, key)?;
    let sha = sha256_hex(payload);
    if let Some(r) = &record {
        if fence < r.fence || (fence == r.fence && sha != r.sha256) {
            return Err(Error::StaleFence {
                key: key.to_string(),
                offered: fence,
                highest: r.fence,
                same_fence: fence == r.fence,
            });
        }
        if fence == r.fence {
            if payload_sha(&sink, &name)?.as_deref() == Some(sha.as_str()) {
                return Ok(PublishOutcome::Unchanged);
            }
            // The publish that wrote this record stopped before its payload
            // landed; this retry of the same bytes completes it.
            sink.write_atomic(&name, payload, 0o644, true)?;
            return Ok(PublishOutcome::Written);
        }
    }
    let previous = match &record {
        Some(r) => on_disk(&sink, &name, r)?,
        None => None,
    };
    let new = FenceRecord { key: key.to_string(), fence, sha256: sha, previous };
    fences.write_atomic(&record_name, &to_json(&new), 0o644, true)?;
    sink.write_atomic(&name, payload, 0o644, true)?;
    Ok(PublishOutcome::Written)
}

/// The fence and bytes of the payload now in `DIR` for `key`.
pub fn read_from_dir(dir: &Path, key: &str) -> Result<Option<(u64, Vec<u8>)>> {
    check_key(key)?;
    let sink = match Dir::open(dir) {
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Ok(None);
        }
        other => other?,
    };
    if sink.lstat(FENCE_DIR)?.is_none() {
        return Ok(None);
    }
    let fences = sink.sub(FENCE_DIR)?;
    let _lock = fences.lock()?;
    let name = encode_key(key);
    let Some(record) = fence_record(&fences, &format!("{name}.json"), key)? else {
        return Ok(None);
    };
    let Some(bytes) = read_file(&sink, &name)? else {
        return Ok(None);
    };
    let sha = sha256_hex(&bytes);
    if sha == record.sha256 {
        return Ok(Some((record.fence, bytes)));
    }
    match record.previous {
        Some(p) if p.sha256 == sha => Ok(Some((p.fence, bytes))),
        _ => Err(Error::StoreCorrupt {
            path: sink.join(&name),
            why: "the payload matches no fence recorded for it (changed outside runws?)".into(),
        }),
    }
}

/// What the payload file holds now, as a fence and hash, if known.
fn on_disk(sink: &Dir, name: &str, record: &FenceRecord) -> Result<Option<Committed>> {
    let Some(sha) = payload_sha(sink, name)? else {
        return Ok(None);
    };
    if sha == record.sha256 {
        return Ok(Some(Committed { fence: record.fence, sha256: sha }));
    }
    Ok(record.previous.clone().filter(|p| p.sha256 == sha))
}

fn payload_sha(sink: &Dir, name: &str) -> Result<Option<String>> {
    Ok(read_file(sink, name)?.map(|b| sha256_hex(&b)))
}

fn fence_record(fences: &Dir, name: &str, key: &str) -> Result<Option<FenceRecord>> {
    read_record(fences, name, key, |r: &FenceRecord| &r.key)
}

pub(crate) fn to_json<T: Serialize>(value: &T) -> Vec<u8> {
    // Plain structs of strings and numbers always serialise.
    let mut bytes = serde_json::to_vec_pretty(value).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fences_only_grow() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("out");
        let key = "nightly-report/2026-11-30";
        assert_eq!(publish_to_dir(&dir, key, 5, b"five").unwrap(), PublishOutcome::Written);
        assert_eq!(publish_to_dir(&dir, key, 5, b"five").unwrap(), PublishOutcome::Unchanged);
        let e = publish_to_dir(&dir, key, 5, b"other").unwrap_err();
        assert!(matches!(e, Error::StaleFence { offered: 5, highest: 5, same_fence: true, .. }), "{e}");
        let e = publish_to_dir(&dir, key, 4, b"four").unwrap_err();
        assert_eq!(e.exit_code(), crate::exit::STALE_FENCE);
        assert!(e.to_string().contains("offered 4, highest seen 5"), "{e}");
        assert!(e.to_string().contains(key), "{e}");
        assert_eq!(publish_to_dir(&dir, key, 7, b"seven").unwrap(), PublishOutcome::Written);
        assert_eq!(std::fs::read(dir.join(encode_key(key))).unwrap(), b"seven");
        assert_eq!(read_from_dir(&dir, key).unwrap(), Some((7, b"seven".to_vec())));
        assert_eq!(read_from_dir(&dir, "other").unwrap(), None);
    }

    /// Replays a crash between the record and the payload of a publish.
    #[test]
    fn crash_between_record_and_payload() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        publish_to_dir(dir, "k", 5, b"old").unwrap();
        let fences = Dir::open(dir.join(FENCE_DIR)).unwrap();
        let ahead = FenceRecord {
            key: "k".into(),
            fence: 7,
            sha256: sha256_hex(b"new"),
            previous: Some(Committed { fence: 5, sha256: sha256_hex(b"old") }),
        };
        fences.write_atomic("k.json", &to_json(&ahead), 0o644, true).unwrap();

        // The reader names the fence of the bytes it finds.
        assert_eq!(read_from_dir(dir, "k").unwrap(), Some((5, b"old".to_vec())));
        // A writer between the two fences is refused: the record is ahead.
        assert!(matches!(publish_to_dir(dir, "k", 6, b"six"), Err(Error::StaleFence { highest: 7, .. })));
        // The retry of the interrupted publish completes it.
        assert_eq!(publish_to_dir(dir, "k", 7, b"new").unwrap(), PublishOutcome::Written);
        assert_eq!(read_from_dir(dir, "k").unwrap(), Some((7, b"new".to_vec())));
        assert_eq!(publish_to_dir(dir, "k", 7, b"new").unwrap(), PublishOutcome::Unchanged);
    }

    #[test]
    fn hostile_keys_stay_inside() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("sink");
        let keys =
            ["..", ".", "../escape", "a/../../b", "/etc/passwd", ".runws-fence", "~x", "%2E%2E", "ü/ß"];
        let long = "k/".repeat(250);
        for (i, key) in keys.iter().copied().chain([long.as_str()]).enumerate() {
            publish_to_dir(&dir, key, 1, format!("{i}").as_bytes()).unwrap();
            assert_eq!(read_from_dir(&dir, key).unwrap(), Some((1, format!("{i}").into_bytes())), "{key}");
        }
        let mut names: Vec<String> =
            std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
        names.sort();
        // Nothing escaped: the sink holds exactly one file per key, plus the records.
        assert_eq!(names.len(), keys.len() + 2, "{names:?}");
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 1);
        for bad in ["", "a\0b"] {
            assert!(matches!(publish_to_dir(&dir, bad, 1, b"x"), Err(Error::InvalidName { .. })));
        }
        assert!(publish_to_dir(&dir, &"x".repeat(513), 1, b"x").is_err());
    }
}
