//! A lane's kit: the lane directory sealed into one checksummed archive
//! that a reviewer can trust without ever looking at the lane itself.
//!
//! The seal first removes `.env` and `.env.*` from `work/` and `replay/`,
//! then runs the kit check: `TICKET`, `replay/prompt.md` and an executable
//! `replay/eval.sh` present, `work/` a git repository, nothing on the
//! seal's never-packed list anywhere in the lane (a key left in the lane is
//! refused, not silently left out, so the reviewer sees what the operator
//! left). Only then is the lane packed and scanned, by the same code that
//! seals a run ([`crate::seal::checkpoint::seal_tree`]); git's own objects
//! are compressed, so the history is scanned separately, decompressed, and
//! a finding there sends the kit to quarantine too. After the pack the
//! kit's checksum file must exist and match: that is the check's last item.
//! The review of a kit is in [`super::review`].

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::Stdio;
use std::time::Instant;

use nix::sys::stat::SFlag;

use super::card::{Card, CheckItem, Checker, Kit, State};
use super::{Lane, Step, allowed, git_clean, now};
use crate::error::{Error, IoContext, Result};
use crate::fsx::walk::{Entry, Visit, Walk};
use crate::fsx::{Dir, kind};
use crate::manifest::{self, Status};
use crate::seal::archive::{Format, PackOptions};
use crate::seal::checkpoint::{self, Checkpoint, SealOptions, Source, Subject, Target};
use crate::seal::exclude::is_never_packed_name;
use crate::seal::scan::{Finding, Scanner};
use crate::workspace::RunDir;

/// What a kit holds, in this order.
pub const KIT_ENTRIES: [&str; 6] = ["TICKET", "card.json", "card.md", "replay", "work", "logs"];

/// Visits every entry below `dir` in name order without following
/// symlinks; `visit` returns whether to descend into a directory.
fn walk(dir: &Dir, rel: &str, visit: &mut dyn FnMut(&Dir, &str, &str, SFlag) -> Result<bool>) -> Result<()> {
    Walk::new().run(dir, |e| {
        let name = utf8_name(e)?;
        let Some(st) = &e.stat else { return Ok(Visit::Skip) };
        let below = e.rel.to_str().unwrap_or(name);
        let path = if rel.is_empty() { below.to_string() } else { format!("{rel}/{below}") };
        Ok(if visit(e.dir, name, &path, kind(st))? { Visit::Descend } else { Visit::Skip })
    })
}

/// The entry's name; an error naming it when it is not UTF-8 (runws never
/// makes such a name in a lane, and a lane's walks refuse one).
pub(super) fn utf8_name<'a>(e: &Entry<'a>) -> Result<&'a str> {
    e.name.to_str().ok_or_else(|| {
        Error::Other(format!(
            "`{}` holds a name that is not UTF-8: `{}`",
            crate::shown::path(e.dir.path()),
            crate::shown::os(e.name)
        ))
    })
}

fn is_env_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    lower == ".env" || lower.starts_with(".env.")
}

/// Removes `.env` and `.env.*` (files, links or directories) below `work/`
/// and `replay/`; returns what it removed, relative to the lane.
pub fn remove_env_files(lane: &Lane) -> Result<Vec<String>> {
    let mut removed = Vec::new();
    for top in ["work", "replay"] {
        if lane.dir.lstat(top)?.is_none_or(|st| kind(&st) != SFlag::S_IFDIR) {
            continue;
        }
        walk(&lane.dir.sub(top)?, top, &mut |d, name, path, _| {
            if is_env_name(name) {
                d.remove_tree(name)?;
                removed.push(path.to_string());
                return Ok(false);
            }
            Ok(true)
        })?;
    }
    Ok(removed)
}

fn item(item: &str, ok: bool, detail: impl Into<String>) -> CheckItem {
    CheckItem { item: item.to_string(), ok, detail: detail.into() }
}

/// The kit check before packing.
pub fn check(lane: &Lane) -> Result<Vec<CheckItem>> {
    let d = &lane.dir;
    let st_kind = |dir: &Dir, name: &str| -> Result<Option<(SFlag, nix::sys::stat::FileStat)>> {
        Ok(dir.lstat(name)?.map(|st| (kind(&st), st)))
    };
    let mut items = Vec::new();
    items.push(match st_kind(d, "TICKET")? {
        Some((SFlag::S_IFREG, st)) if st.st_size > 0 => item("TICKET", true, "present"),
        Some((SFlag::S_IFREG, _)) => item("TICKET", false, "empty"),
        Some(_) => item("TICKET", false, "not a regular file"),
        None => item("TICKET", false, "missing"),
    });
    let replay = match st_kind(d, "replay")? {
        Some((SFlag::S_IFDIR, _)) => Some(d.sub("replay")?),
        _ => None,
    };
    let in_replay = |name: &str| -> Result<Option<(SFlag, nix::sys::stat::FileStat)>> {
        match &replay {
            Some(r) => st_kind(r, name),
            None => Ok(None),
        }
    };
    items.push(match in_replay("prompt.md")? {
        Some((SFlag::S_IFREG, _)) => item("replay/prompt.md", true, "present"),
        Some(_) => item("replay/prompt.md", false, "not a regular file"),
        None => item("replay/prompt.md", false, "missing"),
    });
    items.push(match in_replay("eval.sh")? {
        Some((SFlag::S_IFREG, st)) if st.st_mode & 0o100 != 0 => {
            item("replay/eval.sh", true, "present, executable")
        }
        Some((SFlag::S_IFREG, _)) => item("replay/eval.sh", false, "not executable"),
        Some(_) => item("replay/eval.sh", false, "not a regular file"),
        None => item("replay/eval.sh", false, "missing"),
    });
    let git_ok = matches!(st_kind(d, "work")?, Some((SFlag::S_IFDIR, _)))
        && matches!(st_kind(&d.sub("work")?, ".git")?, Some((SFlag::S_IFDIR, _)));
    items.push(item(
        "work/.git",
        git_ok,
        if git_ok { "a git repository" } else { "work/ is not a git repository" },
    ));

    let mut forbidden = Vec::new();
    walk(d, "", &mut |_, name, path, _| {
        let parent = path.rsplit_once('/').map(|(p, _)| p.rsplit('/').next().unwrap_or(p).to_string());
        if is_never_packed_name(parent.as_deref(), name) {
            forbidden.push(path.to_string());
            return Ok(false);
        }
        Ok(true)
    })?;
    items.push(if forbidden.is_empty() {
        item("forbidden files", true, "none")
    } else {
        item("forbidden files", false, format!("present: {}", forbidden.join(", ")))
    });
    Ok(items)
}

/// The last check item: `<kit>.sha256` present and matching the kit.
pub fn check_checksum(kit: &Path, sha256: &str) -> CheckItem {
    match crate::restore::verify(kit) {
        Ok(found) if found == sha256 => item("checksum", true, format!("sha256:{found}")),
        Ok(found) => item("checksum", false, format!("sha256:{found}, but the seal wrote {sha256}")),
        Err(e) => item("checksum", false, e.to_string()),
    }
}

/// Scans git's objects, decompressed, with the seal's rules: a secret that
/// was committed and then deleted still travels in `.git`.
pub fn scan_history(work: &Path) -> Result<Vec<Finding>> {
    let mut c = git_clean(work);
    c.args(["cat-file", "--batch-all-objects", "--batch"]).stdout(Stdio::piped()).stderr(Stdio::null());
    let mut child =
        c.spawn().map_err(|e| Error::Other(format!("cannot run git to read the lane's history: {e}")))?;
    let scanner = Scanner::new();
    let mut findings = Vec::new();
    let out = child.stdout.take().ok_or_else(|| Error::Other("git gave no output".into()))?;
    let mut r = BufReader::new(out);
    let mut header = String::new();
    let mut buf = vec![0u8; 64 * 1024];
    let result = (|| -> std::io::Result<()> {
        loop {
            header.clear();
            if r.read_line(&mut header)? == 0 {
                return Ok(());
            }
            let parts: Vec<&str> = header.split_whitespace().collect();
            let [oid, kind, size] = parts[..] else { continue };
            let mut left: u64 = size.parse().unwrap_or(0);
            let mut scan = (kind != "tree").then(|| scanner.file(&format!("work/.git/{oid} ({kind})")));
            while left > 0 {
                let want = left.min(buf.len() as u64) as usize;
                let n = r.read(&mut buf[..want])?;
                if n == 0 {
                    return Ok(());
                }
                if let Some(s) = scan.as_mut() {
                    s.feed(&buf[..n]);
                }
                left -= n as u64;
            }
            if let Some(s) = scan {
                findings.extend(s.finish());
            }
            let mut nl = [0u8; 1];
            r.read_exact(&mut nl)?;
        }
    })();
    let status = child.wait().ctx("cannot wait for", "git")?;
    result.ctx("cannot read the history of", work)?;
    if !status.success() {
        return Err(Error::Other(format!("git cannot read the history of `{}`", work.display())));
    }
    Ok(findings)
}

/// What a seal did: the card after it, and the checkpoint.
pub struct SealReport {
    pub card: Card,
    pub checkpoint: Checkpoint,
}

/// Seals the lane into `ROOT/archive/lanes/<lane>.tar.zst` (`<lane>.2...`
/// after a return). A failed check writes nothing but the card; a scan
/// finding quarantines the kit and leaves the lane `working`.
pub fn seal(lane: &Lane, store: Option<&crate::archive_store::Place>) -> Result<SealReport> {
    let _lock = lane.lock()?;
    let mut card = lane.read()?;
    allowed(&lane.name, card.state, Step::Seal)?;
    for r in card.replay.runs.iter().filter(|r| r.finished_at.is_none()) {
        if let Ok(run) = RunDir::open(&lane.root, &r.run_id)
            && manifest::read(&run.dir).is_ok_and(|m| m.status == Status::Running)
        {
            return Err(Error::LaneRefused(format!(
                "lane `{}`: its run `{}` is still running; seal after it ends",
                lane.name, r.run_id
            )));
        }
    }
    // Earlier attempts since the last seal removed files too: keep saying so.
    let mut removed = match &card.checker {
        Some(c) if !c.ok && card.state == State::Working => c.removed.clone(),
        _ => Vec::new(),
    };
    removed.extend(remove_env_files(lane)?);
    let items = check(lane)?;
    let mut warnings = Vec::new();
    for (i, file) in ["replay/prompt.md", "replay/eval.sh"].iter().enumerate() {
        let bytes = std::fs::read(lane.path().join(file)).unwrap_or_default();
        if card.template_sha256.get(i).is_some_and(|t| *t == super::sha256_hex(&bytes)) {
            warnings.push(format!("{file} is the unedited template"));
        }
    }
    let failed: Vec<String> =
        items.iter().filter(|i| !i.ok).map(|i| format!("{} {}", i.item, i.detail)).collect();
    let mut checker = Checker {
        ok: failed.is_empty(),
        at: now(),
        items,
        removed,
        warnings,
        scan: None,
        findings: Vec::new(),
        quarantine: None,
    };
    card.checker = Some(checker.clone());
    if !failed.is_empty() {
        card.event("seal", format!("kit check failed: {}", failed.join("; ")));
        lane.write(&card)?;
        return Err(Error::KitCheck { lane: lane.name.clone(), failed: failed.join("; ") });
    }
    card.event("seal", "kit check passed; sealing");
    // The card in the kit is the card as sealed.
    lane.write(&card)?;

    let prior = scan_history(&lane.path().join("work"))?;
    let dir = lane.root.kits();
    let mut stem = lane.name.clone();
    let mut n = 2;
    // A name free here and, with an archive store, there too: a lane of
    // the same name on another host may have stored its kit already.
    let lanes_store = store.map(|s| s.for_job("lanes")).transpose()?;
    while dir.join(format!("{stem}.tar.zst")).exists()
        || lanes_store.as_ref().is_some_and(|p| crate::archive_store::holds(p, &format!("{stem}.tar.zst")))
    {
        stem = format!("{}.{n}", lane.name);
        n += 1;
    }
    let defaults = SealOptions::default();
    let pack = PackOptions {
        format: Format::Zst,
        max_bytes: defaults.max_bytes,
        max_files: defaults.max_files,
        deadline: Some(Instant::now() + defaults.deadline),
        include: KIT_ENTRIES.iter().map(|s| s.to_string()).collect(),
        durable: true,
    };
    let dest = crate::archive_store::Place::Local(dir);
    let scratch = lane.root.uploads();
    let target = Target {
        src: lane.path(),
        dest: &dest,
        scratch: &scratch,
        stem: &stem,
        subject: Subject::Lane { lane: &lane.name },
    };
    let cp = checkpoint::seal_tree(&target, &pack, prior, false)?;

    checker.scan =
        Some(if cp.source == Source::Receipt { "clean".into() } else { cp.source.as_str().to_string() });
    checker.findings = cp.findings.clone();
    match (&cp.source, &cp.archive, &cp.archive_sha256) {
        (Source::Receipt, Some(path), Some(sha)) => {
            let sum = check_checksum(path, sha);
            checker.ok = sum.ok;
            let detail = format!("checksum {}", sum.detail);
            checker.items.push(sum);
            card.checker = Some(checker.clone());
            if !checker.ok {
                card.event("seal", detail.clone());
                lane.write(&card)?;
                return Err(Error::KitCheck { lane: lane.name.clone(), failed: detail });
            }
            let receipt = cp.receipt.clone().unwrap_or_default();
            // The kit must survive the host: with an archive store, a seal
            // is only a seal once its copy is there. When that fails the
            // local kit is taken back, and a later seal makes it again.
            let stored = match store {
                None => None,
                Some(store) => match store
                    .for_job("lanes")
                    .and_then(|dest| crate::seal::remote::place_copy(&dest, path, sha, &receipt))
                {
                    Ok(url) => Some(url),
                    Err(e) => {
                        for p in [path.clone(), receipt.clone(), crate::seal::archive::sha256_path(path)] {
                            let _ = std::fs::remove_file(p);
                        }
                        card.event("seal", format!("kit sealed but not stored in the archive store: {e}"));
                        lane.write(&card)?;
                        return Err(e);
                    }
                },
            };
            card.kit = Some(Kit {
                path: path.display().to_string(),
                sha256: sha.clone(),
                receipt: receipt.display().to_string(),
                sealed_at: cp.at.clone(),
                stored: stored.clone(),
            });
            card.review = None;
            card.stamp = None;
            card.state = State::Sealed;
            let copy = stored.map(|u| format!(", stored as {u}")).unwrap_or_default();
            card.event("seal", format!("sealed into {} (sha256:{sha}){copy}", path.display()));
        }
        _ => {
            checker.ok = false;
            checker.quarantine = cp.archive.as_ref().map(|p| p.display().to_string());
            card.checker = Some(checker.clone());
            let why = cp.reason.clone().unwrap_or_default();
            card.event(
                "seal",
                format!("seal failed ({why}); {}", checker.quarantine.as_deref().unwrap_or("nothing saved")),
            );
        }
    }
    lane.write(&card)?;
    Ok(SealReport { card, checkpoint: cp })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_names() {
        for yes in [".env", ".ENV", ".env.local", ".env.example"] {
            assert!(is_env_name(yes), "{yes}");
        }
        for no in ["env", ".envrc", "x.env", "dotenv"] {
            assert!(!is_env_name(no), "{no}");
        }
    }

    #[test]
    fn a_missing_or_wrong_checksum_fails_the_check() {
        let tmp = tempfile::tempdir().unwrap();
        let kit = tmp.path().join("k.tar.zst");
        std::fs::write(&kit, b"bytes").unwrap();
        let sha = crate::hex::encode(&<sha2::Sha256 as sha2::Digest>::digest(b"bytes"));
        assert!(!check_checksum(&kit, &sha).ok, "no .sha256 file passed");
        crate::seal::archive::write_sha256_file(&kit, &sha).unwrap();
        assert!(check_checksum(&kit, &sha).ok);
        assert!(!check_checksum(&kit, &"0".repeat(64)).ok);
        std::fs::write(&kit, b"other").unwrap();
        assert!(!check_checksum(&kit, &sha).ok);
    }
}
