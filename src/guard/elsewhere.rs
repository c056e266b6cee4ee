//! `import` of a run this ROOT does not hold: one that ran on another host
//! (or under another ROOT) of a fleet that shares a PostgreSQL store and
//! seals into an archive store.
//!
//! The fleet view's record of the producer says whether it succeeded, the
//! sha256 of each output, and where its archive went. The archive is
//! downloaded and checked against its `.sha256` object (see
//! `restore::fetch`), the one output is streamed out of it, and it is kept
//! only when its bytes hash to the sha256 the fleet recorded. Everything
//! read from the store and the archive is untrusted: the record is held to
//! the run id asked for, the archive must be named after that run and lie
//! outside a quarantine, and only a regular file at exactly
//! `outputs/<name>.<run_id>` is read.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{Read, Write};

use sha2::{Digest, Sha256};

use crate::archive_store::S3Place;
use crate::error::{Error, IoContext, Result};
use crate::fsx::Dir;
use crate::store::{self, FleetQuery, FleetRun};
use crate::workspace::Root;

/// The producer as the fleet view records it, when it holds exactly one
/// record of that run id.
pub(super) fn record(url: &str, run: &str) -> Result<Option<FleetRun>> {
    let mut s = store::open_fleet(url)?;
    let q = FleetQuery { job: None, host: None, run: Some(run.to_string()), since: None, limit: Some(3) };
    let mut runs: Vec<FleetRun> = s.fleet_runs(&q)?.into_iter().filter(|r| r.run_id == run).collect();
    match runs.len() {
        0 => Ok(None),
        1 => Ok(runs.pop()),
        _ => Err(Error::ImportRefused {
            run: run.to_string(),
            name: String::new(),
            why: "the fleet view records a run of that id on more than one host".into(),
        }),
    }
}

/// What the import needs of the producer's record: its output's sha256 and
/// size, and its archive, each checked; or why it cannot serve.
pub(super) fn source(
    rec: &FleetRun,
    run: &str,
    name: &OsStr,
) -> std::result::Result<(String, u64, String), String> {
    if rec.status != "succeeded" {
        return Err(format!(
            "run `{run}` (on host {}) is {}; only a succeeded run can be imported from",
            crate::shown::line(&rec.host),
            crate::shown::line(&rec.status)
        ));
    }
    let wanted = name.to_str().ok_or("a name that is not UTF-8 cannot be imported from another host")?;
    let out = rec
        .outputs
        .iter()
        .find(|o| o.name == wanted)
        .ok_or_else(|| format!("run `{run}` did not produce `{}`", crate::shown::line(wanted)))?;
    let sha_ok = out.sha256.len() == 64 && out.sha256.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    if !sha_ok {
        return Err("the fleet view's sha256 of that output is not a sha256".into());
    }
    let url = rec.archive.as_deref().ok_or_else(|| {
        format!(
            "run `{run}` ran on host {} and was not sealed into an archive store; import it there",
            crate::shown::line(&rec.host)
        )
    })?;
    let (place, file) = S3Place::parse_object(url).map_err(|_| {
        format!("run `{run}` was sealed on host {}, not into an archive store", crate::shown::line(&rec.host))
    })?;
    if place.in_quarantine() {
        return Err(format!("run `{run}`'s archive is in quarantine; nothing is imported from there"));
    }
    // Only from the archive store this run trusts: a row of the fleet view
    // cannot send the import to a bucket its writer owns.
    let trusted = match crate::archive_store::configured(None) {
        Ok(Some(crate::archive_store::Place::S3(p))) => p,
        _ => {
            return Err(format!(
                "run `{run}` ran on host {}; an import from another host reads only the archive store \
                 {} names (an s3:// URL), which is not set here",
                crate::shown::line(&rec.host),
                crate::archive_store::ENV
            ));
        }
    };
    let inside = place.bucket == trusted.bucket
        && (trusted.prefix.is_empty()
            || place.prefix == trusted.prefix
            || place.prefix.starts_with(&format!("{}/", trusted.prefix)));
    if !inside {
        return Err(format!(
            "the archive the fleet view names for run `{run}` is not in the archive store `{}`",
            trusted.url()
        ));
    }
    if file != format!("{run}.tar.zst") && file != format!("{run}.tar.gz") {
        return Err(format!("the archive the fleet view names for run `{run}` is not named after it"));
    }
    Ok((out.sha256.clone(), out.bytes, url.to_string()))
}

/// Streams `outputs/<name>.<run>` out of the archive at `url` into a new
/// temp file in `into`; returns its name, size and sha256. The archive is
/// verified against its `.sha256` object before it is read. An entry whose
/// size is not the `bytes` the fleet view recorded is refused before a
/// byte of it is written: the archive may be anything, and a few bytes of
/// it may decompress to more than the disk holds.
pub(super) fn extract(
    root: &Root,
    url: &str,
    run: &str,
    name: &OsStr,
    (sha256, bytes): (&str, u64),
    into: &Dir,
) -> Result<(String, u64, String)> {
    let most = crate::archive_store::compressed_most(crate::seal::DEFAULT_MAX_BYTES);
    let fetched = crate::restore::fetch::fetch(url, &root.uploads(), most)?;
    let file = File::open(&fetched.archive).ctx("cannot open", &fetched.archive)?;
    let decoded: Box<dyn Read> = if url.ends_with(".tar.gz") {
        Box::new(flate2::read::GzDecoder::new(file))
    } else {
        Box::new(zstd::stream::read::Decoder::new(file).ctx("cannot read", &fetched.archive)?)
    };
    // What a seal packs with its default budgets, and a little for the
    // headers: a stream that decompresses to more (a bomb ahead of the
    // entry asked for) is given up, not read to its end.
    let decoded = crate::restore::Capped::at_most(decoded, crate::seal::DEFAULT_MAX_BYTES + (64 << 20));
    let mut want = b"outputs/".to_vec();
    want.extend_from_slice(name.as_encoded_bytes());
    want.push(b'.');
    want.extend_from_slice(run.as_bytes());
    let mut archive = tar::Archive::new(decoded);
    let bad = |e: std::io::Error| Error::Other(format!("cannot read the archive `{url}`: {e}"));
    for entry in archive.entries().map_err(bad)? {
        let entry = entry.map_err(bad)?;
        if entry.header().entry_type() != tar::EntryType::Regular
            || entry.path_bytes().as_ref() != want.as_slice()
        {
            continue;
        }
        let size = entry.size();
        if size != bytes {
            return Err(Error::Integrity {
                path: std::path::PathBuf::from(format!("{url}!/outputs/{}.{run}", crate::shown::os(name))),
                expected: sha256.to_string(),
                found: format!("an entry of {size} bytes, where the fleet view records {bytes}"),
            });
        }
        let mut entry = entry.take(bytes);
        let (tmp, mut f) = into.create_temp(name, 0o644)?;
        let copied = (|| -> std::io::Result<(u64, String)> {
            let mut hasher = Sha256::new();
            let mut buf = vec![0u8; 1 << 20];
            let mut bytes = 0u64;
            loop {
                let n = entry.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
                f.write_all(&buf[..n])?;
                bytes += n as u64;
            }
            f.sync_all()?;
            Ok((bytes, crate::hex::encode(&hasher.finalize())))
        })();
        drop(f);
        return match copied {
            Ok((bytes, sha)) => Ok((tmp, bytes, sha)),
            Err(e) => {
                let _ = into.unlink(&tmp);
                Err(bad(e))
            }
        };
    }
    Err(Error::Other(format!(
        "the archive `{url}` holds no output `{}` of run `{run}`",
        crate::shown::os(name)
    )))
}
