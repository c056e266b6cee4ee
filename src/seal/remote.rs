//! A seal whose archive goes to an S3-compatible bucket.
//!
//! The evidence is sealed exactly as for a directory (one pack, every byte
//! scanned, quarantine when that fails), into a private staging directory
//! under `ROOT/uploads` on this disk; then the archive, its `.sha256` and
//! its receipt are uploaded create-only, the archive first. The archive is
//! the evidence, so a seal whose later objects fail takes it back. When the
//! clean archive cannot be placed (the store fails mid-way), the same
//! archive goes to the quarantine beside it, its receipt saying why; when
//! that fails too, nothing was saved and the run is held, as for a local
//! seal.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::archive::PackOptions;
use super::scan::Finding;
use super::target::Target;
use crate::archive_store::{Bucket, S3Place, Scratch};
use crate::error::{Error, IoContext, Result};
use crate::manifest;
use crate::manifest::{Checkpoint, Source};
use crate::workspace::QUARANTINE;

/// How a seal into a directory is made: the checkpoint's, which this one
/// stages with.
pub type SealLocal = fn(&Target<'_>, &Path, &PackOptions, Vec<Finding>, bool) -> Result<Checkpoint>;

/// Seals `target` into `place`; see the module's text.
pub fn seal(
    target: &Target<'_>,
    place: &S3Place,
    pack_opts: &PackOptions,
    prior: Vec<Finding>,
    allow_unscanned: bool,
    seal_local: SealLocal,
) -> Result<Checkpoint> {
    let name = format!("{}.{}", target.stem, pack_opts.format.extension());
    let bucket = Bucket::open(place)?;
    // One seal of a run at a time: a second waits, then finds the name
    // taken (some servers let two create-only multipart uploads both
    // complete).
    let _one_at_a_time = crate::archive_store::seal_mutex(target.src, pack_opts.deadline)?;
    // Taken already: refused before anything is packed, as locally. A store
    // that does not answer is a failed seal, said in the checkpoint.
    match bucket.head(&place.key(&name)) {
        Ok(Some(_)) => {
            return Err(Error::Usage(format!(
                "`{}` already exists: {}",
                place.object_url(&name),
                target.sealed_already()
            )));
        }
        Ok(None) => {}
        Err(e) => return Ok(nothing_saved(format!("the archive store failed: {e}"), Vec::new(), Vec::new())),
    }
    let staging = Scratch::new(target.scratch)?;
    // The store keeps the archive durable; its copy here only has to last
    // until it is uploaded.
    let staged_opts = PackOptions { durable: false, ..pack_opts.clone() };
    let local = seal_local(target, &staging.path(), &staged_opts, prior, allow_unscanned)?;
    let (Some(archive), Some(sha)) = (local.archive.clone(), local.archive_sha256.clone()) else {
        return Ok(local);
    };
    let receipt = local.receipt.clone().unwrap_or_default();
    if local.source == Source::Receipt {
        match upload(&bucket, place, &name, &archive, &sha, &receipt, None) {
            Ok((a, r)) => return Ok(Checkpoint { archive: Some(a), receipt: Some(r), ..local }),
            Err(e @ Error::Usage(_)) => return Err(e),
            Err(e) => {
                let why = format!("cannot place the archive in `{}`: {e}", place.url());
                return Ok(quarantine(
                    &bucket, place, target, pack_opts, &archive, &sha, &receipt, why, local,
                ));
            }
        }
    }
    let why = local.reason.clone().unwrap_or_else(|| "the seal failed".into());
    Ok(quarantine(&bucket, place, target, pack_opts, &archive, &sha, &receipt, why, local))
}

/// A copy of a sealed archive (a lane's kit) with its checksum and
/// receipt, placed create-only under `dest`; returns where the archive went.
pub fn place_copy(
    dest: &crate::archive_store::Place,
    archive: &Path,
    sha: &str,
    receipt: &Path,
) -> Result<String> {
    let name = archive
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| Error::Other(format!("`{}` does not name an archive", archive.display())))?;
    match dest {
        crate::archive_store::Place::S3(place) => {
            let bucket = Bucket::open(place)?;
            let (url, _) = upload(&bucket, place, name, archive, sha, receipt, None)?;
            Ok(url.display().to_string())
        }
        crate::archive_store::Place::Local(dir) => {
            crate::fsx::create_private_dirs(dir).ctx("cannot create", dir)?;
            let receipt_name = receipt.file_name().and_then(|n| n.to_str()).unwrap_or("receipt.json");
            let d = crate::fsx::Dir::open(dir)?;
            for (from, to) in [(archive, name.to_string()), (receipt, receipt_name.to_string())] {
                let mut src = std::fs::File::open(from).ctx("cannot open", from)?;
                let mut dst =
                    d.create_new(&to, 0o644).map_err(|e| Error::io("cannot create", dir.join(&to), e))?;
                std::io::copy(&mut src, &mut dst).ctx("cannot write", dir.join(&to))?;
                dst.sync_all().ctx("cannot sync", dir.join(&to))?;
            }
            crate::seal::archive::write_sha256_file(&dir.join(name), sha)?;
            d.sync()?;
            Ok(dir.join(name).display().to_string())
        }
    }
}

/// The staged archive, uploaded under `place/quarantine/` with the first
/// free name, its receipt saying why.
#[allow(clippy::too_many_arguments)]
fn quarantine(
    bucket: &Bucket,
    place: &S3Place,
    target: &Target<'_>,
    pack_opts: &PackOptions,
    archive: &Path,
    sha: &str,
    receipt: &Path,
    why: String,
    local: Checkpoint,
) -> Checkpoint {
    let ext = pack_opts.format.extension();
    let attempt = (|| -> Result<(PathBuf, PathBuf)> {
        let qplace = place.join(QUARANTINE)?;
        let mut n = 0;
        loop {
            let name =
                if n == 0 { format!("{}.{ext}", target.stem) } else { format!("{}.{n}.{ext}", target.stem) };
            match upload(bucket, &qplace, &name, archive, sha, receipt, Some(&why)) {
                Err(Error::Usage(_)) if n < 100 => n += 1,
                other => return other,
            }
        }
    })();
    match attempt {
        Ok((a, r)) => Checkpoint {
            source: Source::Quarantine,
            archive: Some(a),
            receipt: Some(r),
            reason: Some(why),
            at: manifest::format_time(SystemTime::now()),
            ..local
        },
        Err(e) => {
            nothing_saved(format!("{why}; the quarantine failed too: {e}"), local.findings, local.not_scanned)
        }
    }
}

fn nothing_saved(reason: String, findings: Vec<String>, not_scanned: Vec<String>) -> Checkpoint {
    Checkpoint {
        source: Source::None,
        archive: None,
        archive_sha256: None,
        receipt: None,
        reason: Some(reason),
        findings,
        not_scanned,
        at: manifest::format_time(SystemTime::now()),
        extra: Default::default(),
    }
}

/// Uploads the archive as `place/name`, then its `.sha256` and receipt,
/// each create-only; `quarantined` rewrites the receipt's source and
/// reason. Returns the archive's and the receipt's URLs. An archive whose
/// name is taken is a usage error (nothing was written); a later failure
/// takes back what was placed.
fn upload(
    bucket: &Bucket,
    place: &S3Place,
    name: &str,
    archive: &Path,
    sha: &str,
    receipt: &Path,
    quarantined: Option<&str>,
) -> Result<(PathBuf, PathBuf)> {
    let stem = crate::archive_store::stem(name).unwrap_or(name);
    let receipt_name = format!("{stem}.receipt.json");
    let mut fields: serde_json::Value =
        serde_json::from_slice(&std::fs::read(receipt).ctx("cannot read", receipt)?)
            .map_err(|e| Error::Other(format!("the staged receipt is not JSON: {e}")))?;
    fields["archive"] = name.into();
    if let Some(why) = quarantined {
        fields["source"] = Source::Quarantine.as_str().into();
        fields["reason"] = why.into();
    }
    let mut receipt_bytes = serde_json::to_vec_pretty(&fields).map_err(|e| Error::Other(e.to_string()))?;
    receipt_bytes.push(b'\n');

    let key = place.key(name);
    match bucket.put_file_new(&key, archive) {
        Ok(()) => {}
        // A write retried after its answer was lost finds its own object:
        // the same bytes are this seal's archive.
        Err(Error::Usage(m)) => {
            if !bucket.get_hashed(&key, None, u64::MAX).is_ok_and(|(found, _)| found == sha) {
                return Err(Error::Usage(m));
            }
        }
        Err(e) => return Err(e),
    }
    let rest = put_new_or_same(bucket, &format!("{key}.sha256"), format!("{sha}  {name}\n").into_bytes())
        .and_then(|created| match put_new_or_same(bucket, &place.key(&receipt_name), receipt_bytes) {
            Ok(_) => Ok(()),
            Err(e) => {
                // Taken back only when this call wrote it.
                if created {
                    let _ = bucket.delete(&format!("{key}.sha256"));
                }
                Err(e)
            }
        });
    match rest {
        Ok(()) => {}
        // Its checksum or receipt is there already: another seal of the
        // same archive placed them, and the archive under this name may be
        // that seal's (a server that lets two create-only uploads both
        // succeed). Nothing is taken back: it may not be this seal's.
        Err(Error::Usage(m)) => {
            return Err(Error::Other(format!(
                "{m}: another seal of `{}` raced this one",
                place.object_url(name)
            )));
        }
        Err(e) => {
            // A seal is never reported on a partial result.
            let _ = bucket.delete(&key);
            return Err(e);
        }
    }
    Ok((PathBuf::from(place.object_url(name)), PathBuf::from(place.object_url(&receipt_name))))
}

/// Writes `bytes` as `key` create-only; an object already there with the
/// same bytes is this write's own, retried after its answer was lost (or a
/// racing seal's same bytes). True when this call wrote it.
fn put_new_or_same(bucket: &Bucket, key: &str, bytes: Vec<u8>) -> Result<bool> {
    match bucket.put_new(key, bytes.clone()) {
        Ok(()) => Ok(true),
        Err(Error::Usage(m)) => match bucket.get_small(key, bytes.len() + 1) {
            Ok(Some(there)) if there == bytes => Ok(false),
            _ => Err(Error::Usage(m)),
        },
        Err(e) => Err(e),
    }
}
