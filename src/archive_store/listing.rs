//! What an archive store holds: its archives by job and run, sealed or
//! quarantined, from a bucket's listing or a directory's entries (never
//! through a symlink). The same reading tells the reaper whether a run
//! whose manifest records no archive has one all the same.

use std::path::Path;

use serde::Serialize;

use super::{Bucket, Place, S3Place};
use crate::error::Result;
use crate::fsx::Dir;
use crate::workspace::QUARANTINE;

/// One archive in a store.
#[derive(Debug, Clone, Serialize)]
pub struct Listed {
    /// `s3://…` or a path.
    pub archive: String,
    /// The job directory it lies in, when the place is an archive store.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    /// The run id (or lane) it seals: its name without the extension and,
    /// in quarantine, without a `.N` the quarantine added.
    pub run: String,
    pub quarantine: bool,
    pub bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modified: Option<String>,
}

/// An archive's name without its `.tar.zst` or `.tar.gz`; `None` for a
/// name that is not an archive's.
pub fn stem(name: &str) -> Option<&str> {
    name.strip_suffix(".tar.zst").or_else(|| name.strip_suffix(".tar.gz")).filter(|s| !s.is_empty())
}

/// The run an archive's name seals, and whether it is in quarantine, from
/// the segments of its path below the store (`[job,] [quarantine,] name`).
fn classify(segments: &[&str], with_jobs: bool) -> Option<(Option<String>, String, bool)> {
    // What a `seal --to` put at the top of a store has no job.
    let top = matches!(segments, [_] | [QUARANTINE, _]);
    let (job, rest) = if with_jobs && !top {
        (Some(segments.first()?.to_string()), &segments[1..])
    } else {
        (None, segments)
    };
    let (quarantine, name) = match rest {
        [name] => (false, *name),
        [q, name] if *q == QUARANTINE => (true, *name),
        _ => return None,
    };
    let mut run = stem(name)?;
    if quarantine {
        // `<run>.<n>` for a later quarantine of the same run.
        if let Some((r, n)) = run.rsplit_once('.')
            && !n.is_empty()
            && n.bytes().all(|b| b.is_ascii_digit())
        {
            run = r;
        }
    }
    Some((job, run.to_string(), quarantine))
}

/// The archives under `place` (an archive store when `with_jobs`: one
/// directory per job), of `job` only when given.
pub fn list(place: &Place, with_jobs: bool, job: Option<&str>) -> Result<Vec<Listed>> {
    let place = match job {
        Some(j) if with_jobs => place.for_job(j)?,
        _ => place.clone(),
    };
    let with_jobs = with_jobs && job.is_none();
    let mut out = match &place {
        Place::S3(p) => list_bucket(p, with_jobs)?,
        Place::Local(d) => list_dir(d, with_jobs)?,
    };
    if let Some(j) = job {
        for l in &mut out {
            l.job = Some(j.to_string());
        }
    }
    out.sort_by(|a, b| {
        (&a.job, &a.run, a.quarantine, &a.archive).cmp(&(&b.job, &b.run, b.quarantine, &b.archive))
    });
    Ok(out)
}

fn list_bucket(place: &S3Place, with_jobs: bool) -> Result<Vec<Listed>> {
    let bucket = Bucket::open(place)?;
    let mut out = Vec::new();
    let base = format!(
        "s3://{}/{}",
        place.bucket,
        if place.prefix.is_empty() { String::new() } else { format!("{}/", place.prefix) }
    );
    for o in bucket.list(&place.prefix)? {
        let Some(rel) = o.url.strip_prefix(&base) else { continue };
        let segments: Vec<&str> = rel.split('/').collect();
        if let Some((job, run, quarantine)) = classify(&segments, with_jobs) {
            out.push(Listed {
                archive: o.url.clone(),
                job,
                run,
                quarantine,
                bytes: o.bytes,
                modified: Some(o.modified),
            });
        }
    }
    Ok(out)
}

fn list_dir(dir: &Path, with_jobs: bool) -> Result<Vec<Listed>> {
    let mut out = Vec::new();
    let top = match Dir::open(dir) {
        Ok(d) => d,
        Err(crate::error::Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Ok(out);
        }
        Err(e) => return Err(e),
    };
    let mut places: Vec<(Option<String>, Dir)> = Vec::new();
    if with_jobs {
        for (name, is_dir) in top.entries_raw()? {
            let Some(name) = name.to_str() else { continue };
            if is_dir == Some(false) || name.starts_with('.') || name == "lanes" {
                continue;
            }
            if let Ok(d) = top.sub(name) {
                places.push((Some(name.to_string()), d));
            }
        }
    } else {
        places.push((None, top));
    }
    for (job, d) in places {
        let mut here = vec![(false, d)];
        if let Ok(q) = here[0].1.sub(QUARANTINE) {
            here.push((true, q));
        }
        for (quarantine, d) in here {
            for name in d.entries()? {
                let Some(run) = classify(&[&name], false).map(|c| c.1) else { continue };
                let Ok(Some(st)) = d.lstat(&name) else { continue };
                if st.st_mode & libc_s_ifmt() != libc_s_ifreg() {
                    continue;
                }
                let run =
                    if quarantine { classify(&[QUARANTINE, &name], false).map_or(run, |c| c.1) } else { run };
                out.push(Listed {
                    archive: d.join(&name).display().to_string(),
                    job: job.clone(),
                    run,
                    quarantine,
                    bytes: st.st_size as u64,
                    modified: Some(crate::manifest::format_time(
                        std::time::UNIX_EPOCH + std::time::Duration::from_secs(st.st_mtime.max(0) as u64),
                    )),
                });
            }
        }
    }
    Ok(out)
}

fn libc_s_ifmt() -> u32 {
    nix::sys::stat::SFlag::S_IFMT.bits()
}

fn libc_s_ifreg() -> u32 {
    nix::sys::stat::SFlag::S_IFREG.bits()
}

/// A run's evidence in a store, by the precedence a manifest's records
/// have: a sealed archive, then one in quarantine. Only a whole seal
/// counts: the archive, its receipt (which a seal places last, and never
/// takes back), and its `.sha256`, naming it, whose digest the archive's
/// bytes have. An object merely named after the run is not evidence.
pub fn evidence(store: &Place, job: &str, run: &str) -> Result<Option<Listed>> {
    let mut mine: Vec<Listed> = match store.for_job(job)? {
        // In a bucket: the run's own names are asked for, and only the
        // job's quarantine is listed, not every archive of the job.
        Place::S3(p) => {
            let bucket = Bucket::open(&p)?;
            let mut found = Vec::new();
            for name in [format!("{run}.tar.zst"), format!("{run}.tar.gz")] {
                if let Some(bytes) = bucket.head(&p.key(&name))? {
                    let archive = p.object_url(&name);
                    found.push(Listed {
                        archive,
                        job: Some(job.into()),
                        run: run.into(),
                        quarantine: false,
                        bytes,
                        modified: None,
                    });
                }
            }
            let q = p.join(QUARANTINE)?;
            for o in bucket.list(&q.prefix)? {
                let name = o.url.rsplit('/').next().unwrap_or_default();
                let in_it = o.url == q.object_url(name);
                if in_it && classify(&[QUARANTINE, name], false).is_some_and(|c| c.1 == run) {
                    let run = run.to_string();
                    found.push(Listed {
                        archive: o.url.clone(),
                        job: Some(job.into()),
                        run,
                        quarantine: true,
                        bytes: o.bytes,
                        modified: Some(o.modified),
                    });
                }
            }
            found
        }
        Place::Local(_) => list(store, true, Some(job))?.into_iter().filter(|l| l.run == run).collect(),
    };
    mine.sort_by_key(|l| l.quarantine);
    for l in mine {
        if whole(store, &l, run)? {
            return Ok(Some(l));
        }
    }
    Ok(None)
}

/// The most bytes of an archive the reaper downloads to hash it: what a
/// seal with its default budgets packs (256 MiB of content), with the
/// compressor's and tar's overhead.
const EVIDENCE_MOST: u64 = super::compressed_most(super::DEFAULT_SEAL_BYTES);

/// The most bytes of a receipt read.
const RECEIPT_MOST: usize = 1 << 20;

/// Whether the listed archive of `run` is a whole seal (see [`evidence`]):
/// its receipt names this run, this archive and its digest; its `.sha256`
/// names it with the same digest; its bytes (at most [`EVIDENCE_MOST`])
/// have that digest.
fn whole(store: &Place, l: &Listed, run: &str) -> Result<bool> {
    let name = l.archive.rsplit('/').next().unwrap_or_default().to_string();
    let stem = stem(&name).unwrap_or_default().to_string();
    let receipt_name = format!("{stem}.receipt.json");
    let sum_name = format!("{name}.sha256");
    let (receipt, sum) = match store {
        Place::S3(_) => {
            let (place, _) = S3Place::parse_object(&l.archive)?;
            let bucket = Bucket::open(&place)?;
            let Some(receipt) = bucket.get_small(&place.key(&receipt_name), RECEIPT_MOST).ok().flatten()
            else {
                return Ok(false);
            };
            let Some(sum) = bucket.get_small(&place.key(&sum_name), 4096)? else { return Ok(false) };
            let Some(expected) = agreed(&receipt, &sum, run, &name) else { return Ok(false) };
            return match bucket.get_hashed(&place.key(&name), None, EVIDENCE_MOST) {
                Ok((found, _)) => Ok(found == expected),
                // Larger than a default seal: not judged evidence here.
                Err(crate::error::Error::Other(_)) => Ok(false),
                Err(e) => Err(e),
            };
        }
        Place::Local(_) => {
            let path = Path::new(&l.archive);
            let Some(dir) = path.parent() else { return Ok(false) };
            let d = Dir::open(dir)?;
            let read = |n: &str, most: u64| -> Option<Vec<u8>> {
                let mut f = d.open_read(n).ok().flatten()?;
                let mut bytes = Vec::new();
                std::io::Read::read_to_end(&mut std::io::Read::take(&mut f, most), &mut bytes).ok()?;
                Some(bytes)
            };
            let (Some(receipt), Some(sum)) =
                (read(&receipt_name, RECEIPT_MOST as u64), read(&sum_name, 4096))
            else {
                return Ok(false);
            };
            (receipt, sum)
        }
    };
    let Some(expected) = agreed(&receipt, &sum, run, &name) else { return Ok(false) };
    let path = Path::new(&l.archive);
    let d = Dir::open(path.parent().unwrap_or(Path::new(".")))?;
    let Some(archive) = d.open_read(&name)? else { return Ok(false) };
    if archive.metadata().map_or(true, |m| m.len() > EVIDENCE_MOST) {
        return Ok(false);
    }
    let (_, found) = crate::fingerprint::hash_reader(&mut { archive })
        .map_err(|e| crate::error::Error::io("cannot read", path, e))?;
    Ok(found == expected)
}

/// The digest a receipt and a `.sha256` agree on for archive `name` of
/// run `run`, or `None` when they do not (or are not what a seal writes).
fn agreed(receipt: &[u8], sum: &[u8], run: &str, name: &str) -> Option<String> {
    let expected = super::checksum_line(std::str::from_utf8(sum).ok()?, name.as_bytes()).ok()?;
    let r: serde_json::Value = serde_json::from_slice(receipt).ok()?;
    let names_it = r.get("run_id").and_then(|v| v.as_str()) == Some(run)
        && r.get("archive").and_then(|v| v.as_str()) == Some(name)
        && r.get("archive_sha256").and_then(|v| v.as_str()) == Some(expected.as_str());
    names_it.then_some(expected)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_classified_by_where_they_lie() {
        assert_eq!(classify(&["j", "r.tar.zst"], true), Some((Some("j".into()), "r".into(), false)));
        assert_eq!(
            classify(&["j", "quarantine", "r.2.tar.gz"], true),
            Some((Some("j".into()), "r".into(), true))
        );
        assert_eq!(classify(&["r.tar.zst"], false), Some((None, "r".into(), false)));
        assert_eq!(classify(&["r.tar.zst"], true), Some((None, "r".into(), false)));
        assert_eq!(classify(&["quarantine", "r.1.tar.zst"], true), Some((None, "r".into(), true)));
        assert_eq!(classify(&["j", "r.tar.zst.sha256"], true), None);
        assert_eq!(classify(&["j", "x", "r.tar.zst"], true), None);
        assert_eq!(classify(&["j", ".tar.zst"], true), None);
    }
}
